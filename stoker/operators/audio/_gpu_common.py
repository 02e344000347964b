"""What the audio GPU modules share: a batch as one flat device buffer, cached kernels, launch
sizes, and the normalized sample conversions of :mod:`._convert` written with CuPy."""

from __future__ import annotations

import numpy as np

from stoker.operators.gpu_registry import flat_offsets


def one_buffer(x):
    """``(buffer, element offsets, shapes)`` of device batch ``x``, every sample in one 1-D
    buffer: its own when it has one (gaps between samples allowed), else its samples copied back
    to back (one concatenation; only list-backed batches take it)."""
    from stoker.backend import cuda

    parts = x.flat_parts()
    if parts is not None:
        return parts
    cp = cuda._cupy()
    samples = x.samples()
    shapes = np.asarray([s.shape for s in samples], np.int64).reshape(len(samples), -1)
    buf = cp.concatenate([s.reshape(-1) for s in samples]) if samples else cp.zeros(1, cp.float32)
    return buf, flat_offsets([s.size for s in samples]), shapes


def raw_kernel(source: str, name: str):
    """Kernel ``name`` of the CUDA ``source`` (compiled once per device and source)."""
    from stoker.backend import cuda

    return cuda.source_kernel(source, name)


def elementwise(name: str, in_params: str, out_params: str, body: str):
    """A cached ``cupy.ElementwiseKernel``."""
    from stoker.backend import cuda

    return cuda.elementwise_kernel(name, in_params, out_params, body)


def grid(max_items: int, n: int, block: int = 256, cap: int = 4096):
    """(grid, block) for a kernel with one grid row per sample and threads striding over the
    sample's items (at most ``cap`` blocks a row: the kernels loop past that)."""
    return (min(cap, max(1, -(-max_items // block))), n, 1), (block, 1, 1)


def to_float(cp, x):
    """Device samples as float32 in [-1, 1] (integers normalized as on the CPU, floats cast)."""
    dtype = np.dtype(x.dtype)
    if dtype.kind == "f":
        return x.astype(cp.float32, copy=False)
    top = float(np.iinfo(dtype).max)
    if dtype.kind == "u":
        return (x.astype(cp.float64) * (2.0 / top) - 1.0).astype(cp.float32)
    return (x.astype(cp.float64) * (1.0 / top)).astype(cp.float32)


def _round_half_away(cp, v):
    return cp.copysign(cp.floor(cp.abs(v) + 0.5), v)


def from_float(cp, f, dtype):
    """Float samples in [-1, 1] as ``dtype`` (normalized, rounded halves away, saturated)."""
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return f.astype(dtype, copy=False)
    info = np.iinfo(dtype)
    v = f.astype(cp.float64)
    v = (v + 1.0) * (0.5 * info.max) if dtype.kind == "u" else v * float(info.max)
    return cp.clip(_round_half_away(cp, v), info.min, info.max).astype(dtype)


def cast_saturate(cp, y, dtype):
    """``y`` as ``dtype`` without normalizing: integers rounded (halves away) and clamped."""
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return y.astype(dtype, copy=False)
    info = np.iinfo(dtype)
    return cp.clip(_round_half_away(cp, y.astype(cp.float64)), info.min, info.max).astype(dtype)


def element_dtype(x) -> np.dtype:
    """The NumPy dtype of device batch ``x``."""
    return np.dtype(x.element_dtype())
