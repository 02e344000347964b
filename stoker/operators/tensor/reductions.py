"""``reductions.*``: sum, mean, min, max, mean_square, rms, std_dev and variance over axes.

Axes come from ``axes`` (indices; an empty list reduces nothing) or
``axis_names`` (layout letters); with neither, every axis is reduced. Result
types follow DALI: ``sum`` widens integers to 64 bits, the mean-like ones give
float32, ``min``/``max`` keep the input type. float64 stays float64 (DALI
rejects it; stoker accepts it).
"""

from __future__ import annotations

import numpy as np

from stoker.errors import arg_error
from stoker.operators.image.crop import LayoutAware
from stoker.operators.schema import Arg, Schema, register
from stoker.operators.tensor._axes import drop_layout, resolve_axes
from stoker.operators.tensor.basic import convert

AXES_ARGS = [Arg("axes", "int_list", None, doc="axes to reduce (default: all)"),
             Arg("axis_names", "layout", None, doc="layout letters of the axes to reduce"),
             Arg("keep_dims", "bool", False, doc="keep reduced axes with extent 1")]
DTYPE_ARG = Arg("dtype", "dtype", None, doc="output type (default: see the operator)")
DDOF_ARG = Arg("ddof", "int", 0, doc="delta degrees of freedom: divide by N - ddof")


class _Reduction(LayoutAware):
    """Common plumbing: axes from the arguments, layout of the result, output type."""

    def setup(self):
        if self.args.get("ddof") is not None and self.args["ddof"] < 0:
            raise arg_error(self.schema.name, "ddof", "must be non-negative")

    def _axes(self, x, args) -> tuple[int, ...]:
        return tuple(resolve_axes(self.schema.name, self.args["axes"], self.args["axis_names"],
                                  self.layout_of(args), x.ndim))

    def run_sample(self, inputs, args, ctx):
        x = inputs[0]
        if x.dtype == np.bool_:
            raise self.error(f"{self.schema.name}: boolean input is not supported; cast it first")
        axes = self._axes(x, args)
        out = self.reduce(x, axes, inputs[1:])
        out = np.asarray(out)
        dtype = self.out_dtype(x.dtype)
        out = convert(out, dtype) if out.dtype != dtype else out
        return out if out.flags.c_contiguous else out.copy()  # (ascontiguousarray would make 0-d 1-d)

    def out_dtype(self, in_dtype: np.dtype) -> np.dtype:
        if self.args.get("dtype") is not None:
            return np.dtype(self.args["dtype"])
        return self.default_dtype(in_dtype)

    def default_dtype(self, in_dtype):
        return np.dtype(np.float64) if in_dtype == np.float64 else np.dtype(np.float32)

    def reduce(self, x, axes, extra):
        raise NotImplementedError

    def output_layouts(self, input_layouts):
        lay = input_layouts[0] if input_layouts else ""
        if not lay or self.args["keep_dims"]:
            return [lay]
        try:
            axes = resolve_axes(self.schema.name, self.args["axes"], self.args["axis_names"], lay, len(lay))
        except ValueError:
            return [""]
        return [drop_layout(lay, axes)]


def _schema(name: str, doc: str, extra=(), inputs=(1, 1)) -> Schema:
    return Schema(name=f"reductions.{name}", doc=doc, args=[*AXES_ARGS, *extra], inputs=inputs,
                  devices=("cpu",))


def _wide(x):
    """The input in a type wide enough to accumulate exactly (int64/uint64/float64)."""
    if x.dtype.kind == "u":
        return x.astype(np.uint64)
    if x.dtype.kind == "i":
        return x.astype(np.int64)
    return x.astype(np.float64)


@register
class Sum(_Reduction):
    """Sum over axes."""

    schema = _schema("sum", "Sum of the elements over the reduced axes. Output type: int64 for signed "
                            "integers, uint64 for unsigned, float32 for float (or ``dtype``).", [DTYPE_ARG])

    def default_dtype(self, in_dtype):
        if in_dtype.kind == "i":
            return np.dtype(np.int64)
        if in_dtype.kind == "u":
            return np.dtype(np.uint64)
        return super().default_dtype(in_dtype)

    def reduce(self, x, axes, extra):
        return _wide(x).sum(axis=axes, keepdims=self.args["keep_dims"])


@register
class Mean(_Reduction):
    """Mean over axes."""

    schema = _schema("mean", "Mean of the elements over the reduced axes (float32, or ``dtype``).", [DTYPE_ARG])

    def reduce(self, x, axes, extra):
        return _mean(_wide(x), axes, self.args["keep_dims"])


@register
class MeanSquare(_Reduction):
    """Mean of squares over axes."""

    schema = _schema("mean_square", "Mean of the squared elements over the reduced axes (float32).",
                     [DTYPE_ARG])

    def reduce(self, x, axes, extra):
        return _mean(np.square(x.astype(np.float64)), axes, self.args["keep_dims"])


@register
class RMS(_Reduction):
    """Root mean square over axes."""

    schema = _schema("rms", "Square root of the mean of the squared elements (float32).", [DTYPE_ARG])

    def reduce(self, x, axes, extra):
        return np.sqrt(_mean(np.square(x.astype(np.float64)), axes, self.args["keep_dims"]))


@register
class Min(_Reduction):
    """Minimum over axes."""

    schema = _schema("min", "Smallest element over the reduced axes (input type).")

    def default_dtype(self, in_dtype):
        return in_dtype

    def reduce(self, x, axes, extra):
        return _extreme(np.min, x, axes, self.args["keep_dims"], self)


@register
class Max(_Reduction):
    """Maximum over axes."""

    schema = _schema("max", "Largest element over the reduced axes (input type).")

    def default_dtype(self, in_dtype):
        return in_dtype

    def reduce(self, x, axes, extra):
        return _extreme(np.max, x, axes, self.args["keep_dims"], self)


class _Spread(_Reduction):
    """variance / std_dev: the second input is the mean over the same axes (as reductions.mean gives)."""

    def reduce(self, x, axes, extra):
        mean = np.asarray(extra[0], np.float64)
        kept, flat = reduced_shapes(x.shape, axes)
        if not mean_fits(mean.shape, kept, flat):
            raise self.error(f"{self.schema.name}: the mean input has shape {mean.shape}; expected "
                             f"{flat} or {kept} for the reduced axes {list(axes)}")
        d = x.astype(np.float64) - mean.reshape(kept)
        n = int(np.prod([x.shape[a] for a in axes])) if axes else 1
        denom = n - self.args["ddof"]
        sq = np.square(d).sum(axis=axes, keepdims=self.args["keep_dims"])
        var = sq / denom if denom > 0 else np.zeros_like(sq)
        return self.finish(var)

    def finish(self, var):
        return var


@register
class Variance(_Spread):
    """Variance over axes, given the mean."""

    schema = _schema("variance", "Variance over the reduced axes; the second input is the mean over the "
                                 "same axes. Divides by N - ddof (float32).", [DDOF_ARG], inputs=(2, 2))


@register
class StdDev(_Spread):
    """Standard deviation over axes, given the mean."""

    schema = _schema("std_dev", "Standard deviation over the reduced axes; the second input is the mean "
                                "over the same axes. Divides by N - ddof (float32).", [DDOF_ARG], inputs=(2, 2))

    def finish(self, var):
        return np.sqrt(var)


def reduced_shapes(shape, axes) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """``(kept, flat)``: the shape of a reduction of a ``shape`` sample over ``axes`` with and
    without ``keep_dims`` (the shape itself when ``axes`` is empty). Repeated axes raise NumPy's
    own ValueError, as the reduction itself would."""
    shape = tuple(int(d) for d in shape)
    if not axes:
        return shape, shape
    np.zeros((1,) * len(shape)).sum(axis=tuple(axes))  # NumPy's check of the axes, on one element
    kept = tuple(1 if d in axes else s for d, s in enumerate(shape))
    flat = tuple(s for d, s in enumerate(shape) if d not in axes)
    return kept, flat


def mean_fits(mean_shape, kept, flat) -> bool:
    """Whether a mean input of ``mean_shape`` serves variance/std_dev: the reduction's shape with
    or without the reduced axes kept, or any shape with as many values (reshaped, in C order, to
    the kept shape)."""
    mean_shape = tuple(int(d) for d in mean_shape)
    return mean_shape in (kept, flat) or int(np.prod(mean_shape)) == int(np.prod(kept))


def reduced_tables(table, axes) -> tuple[np.ndarray, np.ndarray]:
    """``reduced_shapes`` for every sample at once: ``table`` is an ``(N, ndim)`` array of sample
    shapes; returns ``(kept, flat)`` as ``(N, ndim)`` and ``(N, ndim - len(axes))`` int64 arrays.
    Repeated or out-of-range axes raise NumPy's ValueError as ``reduced_shapes`` does."""
    table = np.asarray(table, np.int64).reshape(len(table), -1)
    if not axes:
        return table, table
    reduced_shapes((1,) * table.shape[1], axes)  # the axes' checks, once: the rank is the batch's
    kept = table.copy()
    kept[:, list(axes)] = 1
    return kept, np.delete(table, list(axes), axis=1)


def means_fit(mean_table, kept) -> np.ndarray:
    """``mean_fits`` for every sample at once (``(N,)`` bools) from ``(N, ...)`` shape tables of the
    mean input and of the kept reduction shapes: a shape equal to the kept or flat one has as many
    values, so the count decides."""
    mean_table = np.asarray(mean_table, np.int64).reshape(len(mean_table), -1)
    return np.prod(mean_table, axis=1) == np.prod(np.asarray(kept, np.int64).reshape(len(kept), -1), axis=1)


def _mean(x, axes, keep_dims):
    if not axes:
        return x.astype(np.float64)
    return np.mean(x, axis=axes, keepdims=keep_dims, dtype=np.float64)


def _extreme(fn, x, axes, keep_dims, op):
    if not axes:
        return x
    if any(x.shape[a] == 0 for a in axes):
        raise op.error(f"{op.schema.name}: cannot take the {fn.__name__} over an empty axis "
                       f"(sample shape {x.shape})")
    return fn(x, axis=axes, keepdims=keep_dims)
