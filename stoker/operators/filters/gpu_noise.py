"""GPU ``noise.gaussian``, ``noise.salt_and_pepper`` (one launch of ``kernels/noise.cu`` per batch)
and ``noise.shot`` (``kernels/shot_noise.cu``): the CPU operators' values for the same seed.

Both CPU operators take every element's randomness from ``element_rng`` (Philox4x64-10 keyed by
the sample's stream, one counter per block of four words), and the kernel computes the same words
and the same arithmetic element-parallel. The host builds one table row per sample: the sample's
key (``element_rng.batch_keys``, exactly the key ``sample_key(ctx.rng)`` gives on the CPU), its
element count, how salt_and_pepper shares a draw among a pixel's channels, and the arguments: the
values of the CPU operator's own ``params``, computed for the whole batch at once with NumPy
(``gaussian_rows``, ``salt_and_pepper_rows``, ``shot_rows``; no Python step per sample, issue 16).
``params`` itself runs sample by sample only where NumPy cannot read the arguments at once or some
value is refused: a bad per-sample argument fails with the CPU's error, naming the sample's source.

``noise.shot``'s Poisson counts come from ``element_poisson`` on the CPU: element j reads only its
own Philox words, and ``kernels/shot_noise.cu`` does the same float64 steps (its own exp and log,
no fused multiply-adds: ``SHOT_OPTIONS``), so the counts are equal bit for bit. (The CPU turns
8-bit samples' search into a table look-up of the same thresholds; the kernel searches.)

Through the host fallback instead: inputs on the CPU, element types other than
uint8/int8/uint16/int16/float32/float64 (the CPU's int32 rounding at the saturation limits and
float16 rounding are not reproduced), and batches of more than 65535 samples.
"""

from __future__ import annotations

import numpy as np

from stoker.operators.color._common import to_dtype
from stoker.operators.filters import element_rng
from stoker.operators.filters.noise import shared_axis
from stoker.operators.gpu_registry import (
    contiguous_samples,
    flat_output,
    grid_for,
    host_fallback,
    register_gpu,
    upload_table,
)
from stoker.operators.image.geometry_batch import plan_rows, sample_scalars

# Element types with a kernel, by the suffix of its name (noise_<op>_<suffix>)
_SUFFIX = {np.dtype(t): s for t, s in ((np.uint8, "u8"), (np.int8, "i8"), (np.uint16, "u16"), (np.int16, "i16"),
                                       (np.float32, "f32"), (np.float64, "f64"))}
_ITAB, _FTAB = 8, 4  # as in noise.cu
_MAX_GRID_Y = 65535  # one grid row per sample
# shot_noise.cu's options: no fused multiply-adds, which NumPy's separate roundings never make
SHOT_OPTIONS = ("-std=c++17", "--fmad=false")


def noise_tables(op_seed: int, iteration: int, sample_indices, shapes, rows, groups):
    """The kernel's host tables for samples of ``shapes`` whose random streams have indices
    ``sample_indices``: ``itab`` (n, 8) int64 with the pointers (columns 0, 1) left 0, ``ftab``
    (n, 4) float64 from ``rows[i]`` (up to 4 numbers per sample), ``groups[i] = (channels sharing
    a draw, elements after the channel axis)``."""
    n = len(shapes)
    itab = np.zeros((n, _ITAB), np.int64)
    itab[:, 2] = [int(np.prod(s, dtype=np.int64)) for s in shapes]
    # keys are 53-bit values: they fit int64 as they are
    itab[:, 3:5] = element_rng.batch_keys(op_seed, iteration, list(sample_indices)).astype(np.int64)
    itab[:, 5:7] = np.asarray(groups, np.int64).reshape(n, 2)
    ftab = np.zeros((n, _FTAB), np.float64)
    for i, row in enumerate(rows):
        ftab[i, :len(row)] = row
    return itab, ftab


def salt_and_pepper_group(layout: str, shape, per_channel: bool) -> tuple[int, int]:
    """(channels sharing one draw, elements after the channel axis) of a sample: element j uses
    draw ``(j // (channels * inner)) * inner + j % inner``, the CPU's row-major draw index over
    the shape with the shared axis set to 1."""
    axis = shared_axis(layout, len(shape), per_channel)
    if axis is None:
        return 1, 1
    return max(int(shape[axis]), 1), int(np.prod(shape[axis + 1:], dtype=np.int64))


def noise_tables_batch(op_seed: int, iteration: int, sample_indices, shapes, rows, groups):
    """:func:`noise_tables` from arrays, with no step per sample: ``shapes`` (n, ndim), ``rows``
    (n, k <= 4) float64, ``groups`` (n, 2); the same tables."""
    shapes = np.asarray(shapes, np.int64)
    n = shapes.shape[0]
    rows = np.asarray(rows, np.float64).reshape(n, -1)
    itab = np.zeros((n, _ITAB), np.int64)
    itab[:, 2] = np.prod(shapes, axis=1, dtype=np.int64)
    # keys are 53-bit values: they fit int64 as they are
    itab[:, 3:5] = element_rng.batch_keys(op_seed, iteration, np.asarray(sample_indices, np.int64)).astype(np.int64)
    itab[:, 5:7] = np.asarray(groups, np.int64).reshape(n, 2)
    ftab = np.zeros((n, _FTAB), np.float64)
    ftab[:, :rows.shape[1]] = rows
    return itab, ftab


def salt_and_pepper_groups(layout: str, shapes, per_channel: bool) -> np.ndarray:
    """:func:`salt_and_pepper_group` of every sample of ``shapes`` (n, ndim) at once: (n, 2)."""
    shapes = np.asarray(shapes, np.int64)
    out = np.ones((shapes.shape[0], 2), np.int64)
    axis = shared_axis(layout, shapes.shape[1], per_channel)
    if axis is not None:
        out[:, 0] = np.maximum(shapes[:, axis], 1)
        out[:, 1] = np.prod(shapes[:, axis + 1:], axis=1, dtype=np.int64)
    return out


def gaussian_rows(op, arg_inputs, n: int) -> tuple[np.ndarray]:
    """``(rows,)``: every sample's (stddev, mean) as the CPU's ``params`` gives them (float32
    values, as float64), for the whole batch at once. ValueError for a negative stddev."""
    mean = sample_scalars(op, arg_inputs, "mean", n, 0.0)
    std = sample_scalars(op, arg_inputs, "stddev", n, 1.0)
    if (std < 0).any():
        raise ValueError("argument 'stddev' must not be negative")
    return (np.stack([std.astype(np.float32), mean.astype(np.float32)], 1).astype(np.float64),)


def gaussian_row_one(op, arg_inputs, i: int) -> tuple[np.ndarray]:
    """Sample ``i``'s ``(row,)`` by the CPU operator's per-sample rule (``params``)."""
    mean, std = op.params(op.sample_args(arg_inputs, i))  # float32 values, checked as on the CPU
    return (np.array([float(std), float(mean)]),)


def salt_and_pepper_rows(op, arg_inputs, n: int, dtype) -> tuple[np.ndarray]:
    """``(rows,)``: every sample's (salt threshold, replace threshold, salt, pepper) as the CPU's
    ``params`` gives them, for the whole batch at once. ValueError for a probability outside
    [0, 1]."""
    prob = sample_scalars(op, arg_inputs, "prob", n, 0.05)
    svp = sample_scalars(op, arg_inputs, "salt_vs_pepper", n, 0.5)
    if not (((prob >= 0) & (prob <= 1)) & ((svp >= 0) & (svp <= 1))).all():  # NaN fails too
        raise ValueError("arguments 'prob' and 'salt_vs_pepper' must be in [0, 1]")
    is_int = dtype.kind in "iu"
    salt = sample_scalars(op, arg_inputs, "salt_val", n, float(np.iinfo(dtype).max) if is_int else 1.0)
    pepper = sample_scalars(op, arg_inputs, "pepper_val", n, float(np.iinfo(dtype).min) if is_int else -1.0)
    rows = np.empty((n, 4))
    # element_rng.threshold32 elementwise: round(p * 2^32) in float64
    rows[:, 0] = np.floor(prob * svp * 4294967296.0 + 0.5)
    rows[:, 1] = np.floor(prob * 4294967296.0 + 0.5)
    rows[:, 2], rows[:, 3] = to_dtype(salt, dtype), to_dtype(pepper, dtype)
    return (rows,)


def salt_and_pepper_row_one(op, arg_inputs, i: int, dtype) -> tuple[np.ndarray]:
    """Sample ``i``'s ``(row,)`` by the CPU operator's per-sample rule (``params``)."""
    thr_salt, thr, salt, pepper = op.params(dtype, op.sample_args(arg_inputs, i))
    return (np.array([float(thr_salt), float(thr), float(salt), float(pepper)]),)


def shot_rows(op, arg_inputs, n: int) -> tuple[np.ndarray]:
    """``(rows,)``: every sample's factor as the CPU's ``params`` gives it, for the whole batch at
    once. ValueError for a factor that is not finite."""
    factor = sample_scalars(op, arg_inputs, "factor", n, 20.0)
    if not np.isfinite(factor).all():
        raise ValueError("argument 'factor' must be finite")
    return (factor.reshape(n, 1),)


def shot_row_one(op, arg_inputs, i: int) -> tuple[np.ndarray]:
    """Sample ``i``'s ``(row,)`` by the CPU operator's per-sample rule (``params``)."""
    return (np.array([op.params(op.sample_args(arg_inputs, i))]),)


def _run(op, batch, inputs, arg_inputs, kind: str, per_thread: int, rows, one, groups=None,
         source: str = "noise", options: tuple = ("-std=c++17",)):
    """Launch ``noise_<kind>_<type>`` over the batch, a thread per ``per_thread`` elements.
    ``rows(n, dtype)`` gives every sample's ftab row at once, ``one(i, dtype)`` a sample's by the
    CPU's rule (:func:`plan_rows`: it names a sample whose arguments are refused);
    ``groups(layout, shapes)`` the samples' (channels sharing a draw, inner elements); ``source``
    and ``options``: the kernel file and its NVRTC options (before ``element_rng.kernel_options``)."""
    from stoker.backend import cuda
    from stoker.tensors_gpu import TensorListGPU

    x = inputs[0]
    if not isinstance(x, TensorListGPU) or not 0 < len(x) <= _MAX_GRID_Y:
        return host_fallback(op, batch, inputs, arg_inputs)
    dtype = x.element_dtype()
    if dtype not in _SUFFIX:
        return host_fallback(op, batch, inputs, arg_inputs)
    x = contiguous_samples(x)
    ptrs, _, shapes = x.geometry()
    n = len(x)
    layout = x.layout() or ""
    ftab_rows, = plan_rows(op, batch, n, lambda: rows(n, dtype), lambda i: one(i, dtype))
    group = np.ones((n, 2), np.int64) if groups is None else groups(layout, shapes)
    itab, ftab = noise_tables_batch(op.op_seed, batch.iteration, batch.sample_indices(n), shapes, ftab_rows, group)
    sizes = itab[:, 2]
    buf, offsets, out = flat_output(shapes, sizes, dtype, layout, x.source_info())
    if not sizes.any():
        return [out]
    itab[:, 0] = ptrs
    itab[:, 1] = buf.data.ptr + offsets * dtype.itemsize
    grid, block = grid_for(-(-int(sizes.max()) // per_thread), n)
    kernel = cuda.load_kernel(source, f"noise_{kind}_{_SUFFIX[dtype]}", element_rng.kernel_options(options))
    kernel(grid, block, (upload_table(itab, batch), upload_table(ftab, batch)))
    return [out]


@register_gpu("noise.gaussian")
def gpu_gaussian_noise(op, batch, inputs, arg_inputs):
    """``fn.noise.gaussian`` on GPU batches: one launch, the CPU's values."""
    return _run(op, batch, inputs, arg_inputs, "gaussian", 4, lambda n, dtype: gaussian_rows(op, arg_inputs, n),
                lambda i, dtype: gaussian_row_one(op, arg_inputs, i))


@register_gpu("noise.salt_and_pepper")
def gpu_salt_and_pepper_noise(op, batch, inputs, arg_inputs):
    """``fn.noise.salt_and_pepper`` on GPU batches: one launch, the CPU's values."""
    per_channel = bool(op.args.get("per_channel"))
    return _run(op, batch, inputs, arg_inputs, "salt_and_pepper", 1,
                lambda n, dtype: salt_and_pepper_rows(op, arg_inputs, n, dtype),
                lambda i, dtype: salt_and_pepper_row_one(op, arg_inputs, i, dtype),
                lambda layout, shapes: salt_and_pepper_groups(layout, shapes, per_channel))


@register_gpu("noise.shot")
def gpu_shot_noise(op, batch, inputs, arg_inputs):
    """``fn.noise.shot`` on GPU batches: one launch, the CPU's values."""
    return _run(op, batch, inputs, arg_inputs, "shot", 1, lambda n, dtype: shot_rows(op, arg_inputs, n),
                lambda i, dtype: shot_row_one(op, arg_inputs, i), source="shot_noise", options=SHOT_OPTIONS)
