"""GPU ``cast``: one elementwise pass per batch (rounding and saturation like the CPU cast): over
the dense array, or over the one buffer a ragged batch lies in (a resized or decoded batch), so
the host does not step through the samples; only a batch of separate arrays is cast sample by
sample."""

from __future__ import annotations

import numpy as np

from stoker.operators.gpu_registry import register_gpu


def flat_span(offsets: np.ndarray, shapes: np.ndarray) -> tuple[int, int]:
    """(first, end) element of the part of a flat buffer that samples at ``offsets`` with
    ``shapes`` (N, ndim) occupy."""
    sizes = np.prod(shapes, axis=1, dtype=np.int64)
    return int(offsets.min()), int((offsets + sizes).max())


def cast_array(x, dtype):
    """``x`` (CuPy) converted to ``dtype``: floats round halves away from zero and saturate into integer types."""
    from stoker.backend import cuda

    cp = cuda.cupy()
    dtype = np.dtype(dtype)
    if dtype.kind in "iu" and x.dtype.kind == "f":
        info = np.iinfo(dtype)
        x64 = x.astype(cp.float64)  # halves round away from zero, as the CPU cast (and DALI)
        return cp.clip(cp.trunc(x64 + cp.copysign(0.5, x64)), info.min, info.max).astype(dtype)
    if dtype.kind in "iu" and x.dtype.kind in "iu" and not np.can_cast(x.dtype, dtype):
        # Bounds inside the source type's range as well: a bound the input type cannot hold
        # (65535 for int16) may raise under NumPy 2's scalar rules, which CuPy follows.
        dst, src = np.iinfo(dtype), np.iinfo(x.dtype)
        return cp.clip(x, max(dst.min, src.min), min(dst.max, src.max)).astype(dtype)
    return x.astype(dtype)


@register_gpu("cast")
def gpu_cast(op, batch, inputs, arg_inputs):
    """``fn.cast`` on GPU batches."""
    from stoker.tensors_gpu import TensorListGPU

    x = inputs[0]
    dtype = op.args.get("dtype")
    dense = x.dense()
    if dense is not None:
        out = TensorListGPU(cast_array(dense, dtype), x.layout(), x.source_info())
    else:
        parts = x.flat_parts()
        if parts is not None and len(x):
            # The span of the buffer the samples occupy, cast at once; the samples keep their places
            # in it (gaps between them are cast too, and never read).
            buf, offsets, shapes = parts
            start, end = flat_span(offsets, shapes)
            out = TensorListGPU.from_flat(cast_array(buf[start:end], dtype), offsets - start, shapes,
                                          x.layout(), x.source_info())
        else:
            out = TensorListGPU([cast_array(s, dtype) for s in x.samples()], x.layout(), x.source_info())
    out.fresh = True  # (cast_array always makes a new array: a later operator may write into it)
    return [out]
