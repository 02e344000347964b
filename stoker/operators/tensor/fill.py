"""Constant-filled tensors: ``zeros``, ``ones``, ``full`` and their ``*_like`` forms."""

from __future__ import annotations

import numpy as np

from stoker import types
from stoker.operators.base import Operator
from stoker.operators.schema import Arg, Schema, register
from stoker.operators.tensor.basic import convert


def _shape(op: str, value) -> tuple[int, ...]:
    shape = tuple(int(v) for v in np.asarray(value).reshape(-1))
    if any(s < 0 for s in shape):
        raise ValueError(f"{op}: argument 'shape': extents must be non-negative, got {list(shape)}")
    return shape


class _Filled(Operator):
    """zeros / ones: a fixed value, shape per sample, type from ``dtype``."""

    value = 0

    def run_sample(self, inputs, args, ctx):
        shape = _shape(self.schema.name, args.get("shape") if args.get("shape") is not None else ())
        return np.full(shape, self.value, self.args["dtype"])

    def output_layouts(self, input_layouts):
        return [self.args["layout"] or ""]


def _filled_schema(name: str, value: str) -> Schema:
    return Schema(
        name=name,
        doc=f"A tensor of {value} of the given ``shape`` (per sample allowed) and ``dtype`` (default int32).",
        args=[Arg("shape", "int_list", None, tensor=True, doc="output shape (default: a scalar)"),
              Arg("dtype", "dtype", types.INT32, doc="output type"),
              Arg("layout", "layout", None, doc="output layout")],
        inputs=(0, 0), devices=("cpu",))


@register
class Zeros(_Filled):
    """A tensor of zeros."""

    schema = _filled_schema("zeros", "zeros")
    value = 0


@register
class Ones(_Filled):
    """A tensor of ones."""

    schema = _filled_schema("ones", "ones")
    value = 1


@register
class Full(Operator):
    """A tensor filled with the input (broadcast to ``shape``)."""

    schema = Schema(
        name="full",
        doc="Broadcasts the input ``fill_value`` to ``shape`` (default: the input's own shape); the "
            "output has the input's type.",
        args=[Arg("shape", "int_list", None, tensor=True, doc="output shape"),
              Arg("layout", "layout", None, doc="output layout")],
        devices=("cpu",),
    )

    def run_sample(self, inputs, args, ctx):
        fill = inputs[0]
        if args.get("shape") is None:
            return fill.copy()
        shape = _shape("full", args["shape"])
        try:
            return np.broadcast_to(fill, shape).copy()
        except ValueError:
            raise self.error(f"full: the fill value of shape {fill.shape} does not broadcast to the "
                             f"argument 'shape' {list(shape)}") from None

    def output_layouts(self, input_layouts):
        return [self.args["layout"] or ""]


class _FilledLike(Operator):
    value = 0

    def run_sample(self, inputs, args, ctx):
        dtype = self.args["dtype"] if self.args["dtype"] is not None else inputs[0].dtype
        return np.full(inputs[0].shape, self.value, dtype)

    def output_layouts(self, input_layouts):
        return [input_layouts[0] if input_layouts else ""]


def _like_schema(name: str, value: str) -> Schema:
    return Schema(
        name=name,
        doc=f"A tensor of {value} with the input's shape and layout; type ``dtype`` (default: the input's).",
        args=[Arg("dtype", "dtype", None, doc="output type (default: the input's)")], devices=("cpu",))


@register
class ZerosLike(_FilledLike):
    """Zeros shaped like the input."""

    schema = _like_schema("zeros_like", "zeros")
    value = 0


@register
class OnesLike(_FilledLike):
    """Ones shaped like the input."""

    schema = _like_schema("ones_like", "ones")
    value = 1


@register
class FullLike(Operator):
    """The second input broadcast to the first input's shape."""

    schema = Schema(
        name="full_like",
        doc="Broadcasts the second input (``fill_value``) to the shape of the first; the output has "
            "the first input's type and layout.",
        inputs=(2, 2), devices=("cpu",))

    def run_sample(self, inputs, args, ctx):
        like, fill = inputs
        try:
            out = np.broadcast_to(fill, like.shape)
        except ValueError:
            raise self.error(f"full_like: the fill value of shape {fill.shape} does not broadcast to "
                             f"the shape {like.shape} of the first input") from None
        return convert(np.asarray(out), like.dtype)  # saturating, as cast

    def output_layouts(self, input_layouts):
        return [input_layouts[0] if input_layouts else ""]
