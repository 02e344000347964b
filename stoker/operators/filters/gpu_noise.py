"""GPU ``noise.gaussian`` and ``noise.salt_and_pepper``: one launch of ``kernels/noise.cu`` per
batch, the CPU operators' values for the same seed.

Both CPU operators take every element's randomness from ``element_rng`` (Philox4x64-10 keyed by
the sample's stream, one counter per block of four words), and the kernel computes the same words
and the same arithmetic element-parallel. The host builds one table row per sample: the sample's
key (``element_rng.batch_keys``, exactly the key ``sample_key(ctx.rng)`` gives on the CPU), its
element count, how salt_and_pepper shares a draw among a pixel's channels, and the arguments, read
and checked by the CPU operator's own ``params`` (so a bad per-sample argument fails with the CPU's
error, naming the sample's source).

Through the host fallback instead: ``noise.shot`` (its Poisson draws come from a sequential
generator), inputs on the CPU, element types other than uint8/int8/uint16/int16/float32/float64
(the CPU's int32 rounding at the saturation limits and float16 rounding are not reproduced), and
batches of more than 65535 samples.
"""

from __future__ import annotations

import numpy as np

from stoker.operators.filters import element_rng
from stoker.operators.filters.noise import shared_axis
from stoker.operators.gpu_registry import (
    contiguous_samples,
    flat_output,
    grid_for,
    host_fallback,
    per_sample,
    register_gpu,
    upload_table,
)

# Element types with a kernel, by the suffix of its name (noise_<op>_<suffix>)
_SUFFIX = {np.dtype(t): s for t, s in ((np.uint8, "u8"), (np.int8, "i8"), (np.uint16, "u16"), (np.int16, "i16"),
                                       (np.float32, "f32"), (np.float64, "f64"))}
_ITAB, _FTAB = 8, 4  # as in noise.cu
_MAX_GRID_Y = 65535  # one grid row per sample


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


def _run(op, batch, inputs, arg_inputs, kind: str, per_thread: int, sample_row):
    """Launch ``noise_<kind>_<type>`` over the batch, a thread per ``per_thread`` elements;
    ``sample_row(shape, dtype, args)`` gives a sample's ``(ftab row, group)``, raising as the CPU
    operator does."""
    from stoker.backend import cuda
    from stoker.tensors_gpu import TensorListGPU

    x = inputs[0]
    if not isinstance(x, TensorListGPU) or not 0 < len(x) <= _MAX_GRID_Y:
        return host_fallback(op, batch, inputs, arg_inputs)
    dtype = np.dtype(x.samples()[0].dtype)
    if dtype not in _SUFFIX:
        return host_fallback(op, batch, inputs, arg_inputs)
    x = contiguous_samples(x)
    samples = x.samples()
    n = len(samples)
    layout = x.layout() or ""
    shapes = [tuple(int(e) for e in s.shape) for s in samples]

    def row(i):
        return sample_row(shapes[i], dtype, {**op.sample_args(arg_inputs, i), "__layout": layout})

    rows = per_sample(op, batch, n, row)
    itab, ftab = noise_tables(op.op_seed, batch.iteration, [batch.sample_index(i) for i in range(n)], shapes,
                              [r for r, _ in rows], [g for _, g in rows])
    sizes = itab[:, 2]
    buf, offsets, out = flat_output(shapes, sizes, dtype, layout, x.source_info())
    if not sizes.any():
        return [out]
    itab[:, 0] = np.fromiter((s.data.ptr for s in samples), np.int64, n)
    itab[:, 1] = buf.data.ptr + offsets * dtype.itemsize
    grid, block = grid_for(-(-int(sizes.max()) // per_thread), n)
    kernel = cuda.load_kernel("noise", f"noise_{kind}_{_SUFFIX[dtype]}", element_rng.kernel_options())
    kernel(grid, block, (upload_table(itab, batch), upload_table(ftab, batch)))
    return [out]


@register_gpu("noise.gaussian")
def gpu_gaussian_noise(op, batch, inputs, arg_inputs):
    """``fn.noise.gaussian`` on GPU batches: one launch, the CPU's values."""

    def sample_row(shape, dtype, args):
        mean, std = op.params(args)  # float32 values, checked as on the CPU
        return (float(std), float(mean)), (1, 1)

    return _run(op, batch, inputs, arg_inputs, "gaussian", 4, sample_row)


@register_gpu("noise.salt_and_pepper")
def gpu_salt_and_pepper_noise(op, batch, inputs, arg_inputs):
    """``fn.noise.salt_and_pepper`` on GPU batches: one launch, the CPU's values."""
    per_channel = bool(op.args.get("per_channel"))

    def sample_row(shape, dtype, args):
        thr_salt, thr, salt, pepper = op.params(dtype, args)
        group = salt_and_pepper_group(op.layout_of(args), shape, per_channel)
        return (float(thr_salt), float(thr), float(salt), float(pepper)), group

    return _run(op, batch, inputs, arg_inputs, "salt_and_pepper", 1, sample_row)
