"""``cat`` and ``stack``: join the samples of several inputs, sample by sample."""

from __future__ import annotations

import numpy as np

from stoker.errors import arg_error
from stoker.operators.image.crop import LayoutAware
from stoker.operators.schema import Arg, Schema, register

JOIN_ARGS = [Arg("axis", "int", 0, doc="axis to join along (negative counts from the end)"),
             Arg("axis_name", "layout", None, doc="join along this layout letter instead of ``axis``")]


def _common_layout(layouts: list[str]) -> str:
    named = [lay for lay in layouts if lay]
    return named[0] if named and all(lay == named[0] for lay in named) else (named[0] if named else "")


class _Join(LayoutAware):
    def _check_inputs(self, inputs):
        first = inputs[0]
        for k, x in enumerate(inputs[1:], 1):
            if x.dtype != first.dtype:
                raise self.error(f"{self.schema.name}: input {k} has type {x.dtype.name}, input 0 has "
                                 f"{first.dtype.name}; all inputs must have the same type")
            if x.ndim != first.ndim:
                raise self.error(f"{self.schema.name}: input {k} has {x.ndim} dimensions, input 0 has "
                                 f"{first.ndim}; all inputs must have the same rank")


@register
class Cat(_Join):
    """Concatenates the inputs' samples along an existing axis."""

    schema = Schema(
        name="cat",
        doc="Joins the i-th samples of all inputs along an existing axis (``axis`` or "
            "``axis_name``); the other extents must match. Keeps the layout.",
        args=JOIN_ARGS,
        inputs=(1, 999),
        devices=("cpu",),
    )

    def run_sample(self, inputs, args, ctx):
        self._check_inputs(inputs)
        ndim = inputs[0].ndim
        axis = self._axis(ndim, self.layout_of(args))
        try:
            return np.concatenate(inputs, axis=axis)
        except ValueError:
            raise self.error(f"cat: the inputs' shapes {[x.shape for x in inputs]} differ outside the "
                             f"joined axis {axis}") from None

    def _axis(self, ndim: int, layout: str) -> int:
        name = self.args["axis_name"]
        if name:
            if name not in layout:
                raise ValueError(f"cat: argument 'axis_name': {name!r} is not in the layout {layout!r}")
            return layout.index(name)
        axis = self.args["axis"]
        if not -ndim <= axis < ndim:
            raise ValueError(f"cat: argument 'axis': {axis} is out of range for {ndim}D samples")
        return axis % ndim

    def output_layouts(self, input_layouts):
        return [_common_layout(input_layouts)]


@register
class Stack(_Join):
    """Stacks the inputs' samples along a new axis."""

    schema = Schema(
        name="stack",
        doc="Joins the i-th samples of all inputs along a new axis inserted at ``axis`` (0 ... ndim); "
            "the shapes must be equal. ``axis_name`` names the new axis in the layout.",
        args=JOIN_ARGS,
        inputs=(1, 999),
        devices=("cpu",),
    )

    def setup(self):
        name = self.args["axis_name"]
        if name is not None and len(name) != 1:
            raise arg_error("stack", "axis_name", f"must be a single letter, got {name!r}")

    def run_sample(self, inputs, args, ctx):
        self._check_inputs(inputs)
        ndim = inputs[0].ndim
        axis = self.args["axis"]
        if not -(ndim + 1) <= axis <= ndim:
            raise self.error(f"stack: argument 'axis': {axis} is out of range for {ndim}D samples "
                             f"(0 ... {ndim})")
        try:
            return np.stack(inputs, axis=axis)
        except ValueError:
            raise self.error(f"stack: the inputs' shapes differ: {[x.shape for x in inputs]}") from None

    def output_layouts(self, input_layouts):
        lay = _common_layout(input_layouts)
        name = self.args["axis_name"]
        if not lay or not name:
            return [""]
        axis = self.args["axis"] % (len(lay) + 1)
        return [lay[:axis] + name + lay[axis:]]
