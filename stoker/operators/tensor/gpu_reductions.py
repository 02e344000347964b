"""GPU ``reductions.*`` (sum, mean, mean_square, rms, min, max, variance, std_dev) with CuPy.

The axes come from the CPU operator's own resolution (``resolve_axes`` over the batch's rank and
layout, the same for every sample), the result types from its ``out_dtype``, and the final cast
does what the CPU's ``convert`` does (``gpu_cast.cast_array``; between integer types a saturation
whose bounds fit the source type). A batch whose samples share one shape (a
dense array, or a buffer holding them back to back) is reduced as one ``(N, ...)`` array in one
call, the batch axis kept; other batches sample by sample.

The arithmetic follows the CPU's: integer sums accumulate in 64 bits (int64, or uint64 for
unsigned inputs; exact, wrapping alike on overflow), everything else in float64: the mean-like
results are float64 sums divided by the element count, then cast. Sums of integers below 2**53
are exact in float64 whatever the order, so mean, mean_square and rms of 8/16-bit integer data
equal the CPU's to the bit; float inputs and variance/std_dev differ only through summation order
(and fused multiply-adds) before the cast to float32.

What runs through the host fallback instead (which fails as the CPU does where it fails):
boolean inputs, a mean input that is not a GPU batch or has the wrong shape or sample count,
axes that do not resolve or repeat, min/max over an empty axis, and mean-like results cast to an
integer ``dtype`` where a sample reduces no elements (a NaN whose integer value the CPU leaves to
the processor).
"""

from __future__ import annotations

import numpy as np

from stoker import types
from stoker.operators.gpu_registry import DOUBLE_OF_ANY, dense_view, host_fallback, register_gpu
from stoker.operators.tensor._axes import resolve_axes
from stoker.operators.tensor.gpu_cast import cast_array
from stoker.operators.tensor.gpu_shape_join import shape_table
from stoker.operators.tensor.reductions import means_fit, reduced_tables

_NAMES = ("sum", "mean", "mean_square", "rms", "min", "max", "variance", "std_dev")
_MEAN_LIKE = ("mean", "mean_square", "rms")
_kernels: dict = {}


def _sum_sq():
    """ReductionKernel: float64 sum of ``(x - m)**2`` (m broadcast to x; 0 gives the sum of squares)."""
    from stoker.backend import cuda

    k = _kernels.get("sum_sq")
    if k is None:
        cp = cuda.cupy()
        # (CuPy's device float16 converts to float, and so to double, exactly.)
        k = _kernels["sum_sq"] = cp.ReductionKernel(
            "T x, float64 m", "float64 y", "stoker_sq(stoker_dbl(x) - m)", "a + b", "y = a", "0", "stoker_sum_sq",
            preamble=DOUBLE_OF_ANY + "__device__ double stoker_sq(double d) { return d * d; }\n")
    return k


def _wide(dtype: np.dtype) -> np.dtype:
    """The CPU's accumulator for sums: int64 / uint64 for integers, float64 for floats."""
    return np.dtype(np.uint64 if dtype.kind == "u" else np.int64 if dtype.kind == "i" else np.float64)


def _count(shape, axes) -> int:
    """Elements reduced into one output value (1 with no axes)."""
    return int(np.prod([shape[a] for a in axes])) if axes else 1


def reduce_array(name: str, a, axes: tuple, keep: bool, ddof: int = 0, mean=None):
    """Reduction ``name`` of CuPy array ``a`` over ``axes`` (array axes), before the output cast.

    Returns int64/uint64 (sum of integers), the input type (min/max) or float64 (the rest), as
    the CPU computes them. ``mean`` (float64, shaped to broadcast against ``a`` with the reduced
    axes kept) is variance/std_dev's second input.
    """
    from stoker.backend import cuda

    cp = cuda.cupy()
    if name == "sum":
        return cp.sum(a, axis=axes, dtype=_wide(a.dtype), keepdims=keep) if axes else a.astype(_wide(a.dtype))
    if name in ("min", "max"):
        if not axes:
            return a
        return (cp.amin if name == "min" else cp.amax)(a, axis=axes, keepdims=keep)
    n = _count(a.shape, axes)
    if name == "mean":
        if not axes:
            return a.astype(cp.float64)
        # sum, then one division by the count: NumPy's mean, to the bit where the sum is exact
        return cp.true_divide(cp.sum(a, axis=axes, dtype=cp.float64, keepdims=keep), n)
    if name in ("mean_square", "rms"):
        if not axes:
            sq = cp.square(a.astype(cp.float64))
        else:
            sq = cp.true_divide(_sum_sq()(a, 0.0, axis=axes, keepdims=keep), n)
        return cp.sqrt(sq) if name == "rms" else sq
    # variance / std_dev: squared deviations from the given mean, divided by N - ddof (0 if <= 0)
    if not axes:
        sq = cp.square(a.astype(cp.float64) - mean)
    else:
        sq = _sum_sq()(a, cp.broadcast_to(mean, a.shape), axis=axes, keepdims=keep)
    denom = n - ddof
    var = cp.true_divide(sq, denom) if denom > 0 else cp.zeros_like(sq)
    return cp.sqrt(var) if name == "std_dev" else var


def _finish(op, out, in_dtype):
    """The CPU's output cast (``convert``) on the device: saturating between integer types,
    rounding halves away from zero from floats."""
    from stoker.backend import cuda

    dtype = op.out_dtype(np.dtype(in_dtype))
    if out.dtype == dtype:
        return out
    if dtype.kind in "iu" and out.dtype.kind in "iu" and not np.can_cast(out.dtype, dtype):
        # Bound only the sides the source type reaches past, in the source type: a bound given as
        # a Python int that the source cannot hold (-128 for uint64) would not clip the same way.
        cp = cuda.cupy()
        src, dst = np.iinfo(out.dtype), np.iinfo(dtype)
        if src.min < dst.min:
            out = cp.maximum(out, out.dtype.type(dst.min))
        if src.max > dst.max:
            out = cp.minimum(out, out.dtype.type(dst.max))
        return out.astype(dtype)
    return cast_array(out, dtype)


def _dense(x):
    """The batch as one ``(N, ...)`` CuPy array without a copy, or None."""
    d = x.dense()
    return d if d is not None else dense_view(x)


def _gpu_reduction(op, batch, inputs, arg_inputs):
    """``fn.reductions.<name>`` on GPU batches (see the module's docstring)."""
    from stoker.tensors_gpu import TensorListGPU

    name = op.schema.name.split(".", 1)[1]
    x = inputs[0]
    layout = op.output_layouts([x.layout()])[0]
    if not all(isinstance(t, TensorListGPU) for t in inputs):
        return host_fallback(op, batch, inputs, arg_inputs)
    if len(x) == 0:
        return [TensorListGPU([], layout, [])]
    in_dtype = np.dtype(types.to_numpy_type(x.dtype))
    if in_dtype == np.bool_:
        return host_fallback(op, batch, inputs, arg_inputs)
    table = shape_table(x)  # (N, ndim): the whole batch's plan in NumPy, no step per sample
    try:  # the rank and layout are the batch's, so one resolution serves every sample
        axes = tuple(resolve_axes(op.schema.name, op.args["axes"], op.args["axis_names"], x.layout(),
                                  table.shape[1]))
        kept, _ = reduced_tables(table, axes)
    except ValueError:
        return host_fallback(op, batch, inputs, arg_inputs)
    counts = np.prod(table[:, list(axes)], axis=1) if axes else np.ones(len(x), np.int64)
    if name in ("min", "max") and axes and counts.min() == 0:
        return host_fallback(op, batch, inputs, arg_inputs)
    if name in _MEAN_LIKE and op.out_dtype(in_dtype).kind in "iu" and counts.min() == 0:
        return host_fallback(op, batch, inputs, arg_inputs)
    mean_tl = inputs[1] if len(inputs) > 1 else None
    mean_table = None
    if mean_tl is not None:
        if len(mean_tl) != len(x):
            return host_fallback(op, batch, inputs, arg_inputs)
        mean_table = shape_table(mean_tl)
        if not means_fit(mean_table, kept).all():
            return host_fallback(op, batch, inputs, arg_inputs)
    keep = bool(op.args["keep_dims"])
    ddof = int(op.args.get("ddof") or 0)

    dense = _dense(x) if (table == table[0]).all() else None
    means = None
    if dense is not None and mean_tl is not None:
        means = _dense(mean_tl) if (mean_table == mean_table[0]).all() else None
        if means is None:
            dense = None
    if dense is not None:
        mean = None if means is None else means.astype(np.float64).reshape((len(x), *kept[0].tolist()))
        out = reduce_array(name, dense, tuple(a + 1 for a in axes), keep, ddof, mean)
        return [TensorListGPU(_finish(op, out, in_dtype), layout, x.source_info())]
    # A ragged batch: reduced sample by sample (one launch each; a segmented reduction would need
    # a new kernel).
    samples = x.samples()
    mean_samples = mean_tl.samples() if mean_tl is not None else [None] * len(x)
    outs = []
    for a, m, k in zip(samples, mean_samples, kept.tolist()):
        mean = None if m is None else m.astype(np.float64).reshape(k)
        outs.append(_finish(op, reduce_array(name, a, axes, keep, ddof, mean), in_dtype))
    return [TensorListGPU(outs, layout, x.source_info())]


for _name in _NAMES:
    register_gpu(f"reductions.{_name}")(_gpu_reduction)
