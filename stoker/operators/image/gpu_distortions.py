"""GPU ``water``, ``sphere`` and ``jitter``: one launch per batch (``kernels/distortions.cu``), the
output in one flat buffer, equal to the CPU operator's output to the bit (linear: given OpenCV's
float remap, OpenCV 4.11 and later; older ones quantize the weights to 1/32 pixel).

The kernel computes each output pixel's source point in float32 in the CPU's order. The host plans
the whole batch with NumPy, no Python step per sample: the per-sample ``mask`` as one column
(:func:`sample_masks`, the CPU's checks), and the kernel's tables from the CPU operator's batch
helpers, equal to its per-sample ones: ``water_waves_batch`` (the sine and cosine waves, whose last
bit CUDA's sinf/cosf would not reproduce) and ``sphere_constants_batch``. Jitter uploads no shifts:
the kernel draws every pixel's shift itself from the sample's Philox key
(``element_rng.batch_keys``, the key the CPU takes from the sample's stream), word for word as the
CPU's ``jitter_offsets`` does. ``mask`` 0 copies a sample.

Nearest neighbour takes any element type of 1, 2, 4 or 8 bytes. Linear reproduces OpenCV's float
``remap`` (the CPU's path for uint8, uint16 and float32 images with 1, 3 or 4 channels per group of
four). The host fallback takes the rest: linear on other types (OpenCV's int16 remap and the
CPU's float32 detour), linear with a group of two channels (OpenCV remaps those with weights
quantized to 1/32 pixel), images with no channels and samples that are not 3-D (the CPU raises its
error there).
"""

from __future__ import annotations

import numpy as np

from stoker import types
from stoker.operators.filters import element_rng
from stoker.operators.gpu_registry import (
    contiguous_samples,
    flat_output,
    grid_for,
    host_fallback,
    plan_batch,
    register_gpu,
    upload_table,
)
from stoker.operators.image.distortions import sphere_constants_batch, water_waves_batch
from stoker.operators.image.slice import c_cast_array

_OPS = {"water": 0, "sphere": 1, "jitter": 2}  # as OP_* in kernels/distortions.cu
_LINEAR = {np.dtype(np.uint8): "u8", np.dtype(np.uint16): "u16", np.dtype(np.float32): "f32"}
_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}  # element size -> bit pattern type
_ITAB = 10  # columns of the kernel's sample table, as ITAB in kernels/distortions.cu


def _kernel_takes(op, x) -> bool:
    """Whether the kernel takes batch ``x`` (else the host fallback runs)."""
    from stoker.tensors_gpu import TensorListGPU

    if not isinstance(x, TensorListGPU) or len(x) == 0 or x.ndim != 3:
        return False
    channels = x.geometry()[2][:, 2]
    dtype = x.element_dtype()
    if (channels == 0).any() or dtype.itemsize not in _UINT:
        return False
    if op.args["interp_type"] == types.INTERP_LINEAR:
        return dtype in _LINEAR and not (channels % 4 == 2).any()
    return True


def linear_border(fill: float, dtype) -> np.float32:
    """The value OpenCV's remap gives points outside the image for the border value ``fill``:
    rounded to nearest even and saturated for integer types (a value beyond int32, or NaN, first
    becomes INT_MIN, as cvRound gives it), as is for float32."""
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return np.float32(fill)
    v = np.rint(np.float64(fill))
    if not -2.0**31 <= v < 2.0**31:  # NaN fails this too
        v = -2.0**31
    info = np.iinfo(dtype)
    return np.float32(min(max(v, info.min), info.max))


def sample_indices(batch, n: int) -> np.ndarray:
    """int64 (n,): the index that keys each sample's random stream (``batch.sample_index(i)`` for
    every i at once)."""
    if batch.sample_ids is not None:
        return np.asarray(batch.sample_ids, np.int64).reshape(-1)[:n]
    return np.arange(n, dtype=np.int64) + int(batch.index_offset)


def sample_masks(op, batch, arg_inputs, n: int) -> np.ndarray:
    """bool (n,): whether each sample is distorted, ``int(mask)`` as the CPU reads it. A per-sample
    ``mask`` is checked for all samples at once (numbers, one value each, whole); when one fails,
    the CPU's conversion (``Arg.sample_value``) runs sample by sample and raises that sample's
    error, naming the operator and the sample's source (:func:`plan_batch`)."""
    if "mask" not in arg_inputs:
        static = op.args.get("mask")
        return np.full(n, bool(int(1 if static is None else static)))
    values = arg_inputs["mask"]
    spec = op.schema.arg("mask")

    def one(i):
        return int(spec.sample_value(values[i]))

    def whole():
        try:  # one C-level step when every sample holds one number of one shape (the usual case)
            a = np.asarray(values).reshape(n, -1)
        except ValueError:
            a = None
        if a is None or a.dtype.kind not in "biuf" or a.shape[1] != 1:
            # unusual but maybe valid (samples of shapes () and (1,) mixed): the CPU's rule,
            # sample by sample; it raises for a bad sample
            return np.array([one(i) for i in range(n)], np.int64)
        a = a[:, 0]
        if a.dtype.kind == "f" and not (np.isfinite(a) & (a == np.floor(a))).all():
            raise ValueError("argument 'mask' takes whole numbers per sample")
        return a

    return plan_batch(op, batch, n, whole, one) != 0


def distort_batch(op, batch, x, mode, ftab, first, keys=None):
    """Run the kernel of ``op`` over ``x`` (3-D samples the kernel takes, see ``_kernel_takes``).

    ``mode`` (n,): 1 distorts sample i, 0 copies it; ``ftab``: float32 values of every sample's
    table (water's waves, sphere's constants), sample i's from ``first[i]``; ``keys`` (n, 2): the
    samples' Philox keys (jitter). Returns the output TensorListGPU (the input's shapes, type and
    layout)."""
    from stoker.backend import cuda

    x = contiguous_samples(x)
    n = len(x)
    ptrs, row, shapes = x.geometry()
    dtype = x.element_dtype()
    sizes = np.prod(shapes, axis=1)
    buf, offsets, out = flat_output(shapes, sizes, dtype, x.layout(), x.source_info())
    pixels = shapes[:, 0] * shapes[:, 1]
    if not sizes.any():
        return out
    itab = np.zeros((n, _ITAB), np.int64)
    itab[:, 0], itab[:, 1], itab[:, 2] = ptrs, row, buf.data.ptr + offsets * dtype.itemsize
    itab[:, 3:6] = shapes
    itab[:, 6] = mode
    itab[:, 7] = first
    if keys is not None:  # 53-bit values: they fit int64 as they are
        itab[:, 8:10] = np.asarray(keys, np.uint64).astype(np.int64)
    ftab = np.ascontiguousarray(ftab, np.float32).reshape(-1)
    if ftab.size == 0:
        ftab = np.zeros(1, np.float32)
    half = np.int64(op.args["nDegree"] // 2 if op.schema.name == "jitter" else 0)
    fill = float(op.args["fill_value"])
    options = element_rng.kernel_options()  # the source includes the shared Philox header
    if op.args["interp_type"] == types.INTERP_LINEAR:
        kernel = cuda.load_kernel("distortions", f"distort_linear_{_LINEAR[dtype]}", options)
        last = linear_border(fill, dtype)
    else:
        kernel = cuda.load_kernel("distortions", f"distort_nn_{dtype.itemsize}", options)
        # the C cast of the fill value (DALI's), as its bit pattern
        last = np.uint64(c_cast_array(np.asarray(fill), dtype).reshape(1).view(_UINT[dtype.itemsize])[0])
    grid, block = grid_for(int(pixels.max()), n)
    kernel(grid, block, (upload_table(itab, batch), upload_table(ftab, batch),
                         np.int32(_OPS[op.schema.name]), half, last))
    return out


def _plan(op, batch, inputs, arg_inputs):
    """``(x, shapes, mode)`` for a batch the kernel takes (None otherwise): mode 1 for the samples
    to distort (mask 1, not empty)."""
    x = inputs[0]
    if not _kernel_takes(op, x):
        return None
    shapes = x.geometry()[2]
    mode = sample_masks(op, batch, arg_inputs, len(x)) & (shapes[:, 0] > 0) & (shapes[:, 1] > 0)
    return x, shapes, mode


@register_gpu("water")
def gpu_water(op, batch, inputs, arg_inputs):
    """``fn.water`` on GPU batches: HWC, the waves from the CPU's ``water_waves_batch``."""
    planned = _plan(op, batch, inputs, arg_inputs)
    if planned is None:
        return host_fallback(op, batch, inputs, arg_inputs)
    x, shapes, mode = planned
    a = op.args
    params = tuple(a[k] for k in ("ampl_x", "ampl_y", "freq_x", "freq_y", "phase_x", "phase_y"))
    ftab, first = water_waves_batch(shapes[:, 0], shapes[:, 1], *params)
    return [distort_batch(op, batch, x, mode, ftab, first)]


@register_gpu("sphere")
def gpu_sphere(op, batch, inputs, arg_inputs):
    """``fn.sphere`` on GPU batches: HWC, the radius and centre from the CPU's
    ``sphere_constants_batch``."""
    planned = _plan(op, batch, inputs, arg_inputs)
    if planned is None:
        return host_fallback(op, batch, inputs, arg_inputs)
    x, shapes, mode = planned
    first = np.arange(len(x), dtype=np.int64) * 3
    return [distort_batch(op, batch, x, mode, sphere_constants_batch(shapes[:, 0], shapes[:, 1]), first)]


@register_gpu("jitter")
def gpu_jitter(op, batch, inputs, arg_inputs):
    """``fn.jitter`` on GPU batches: the kernel draws every pixel's shift from the sample's Philox
    key, the key the CPU takes from the sample's stream (``element_rng.batch_keys``)."""
    planned = _plan(op, batch, inputs, arg_inputs)
    if planned is None:
        return host_fallback(op, batch, inputs, arg_inputs)
    x, _, mode = planned
    n = len(x)
    keys = element_rng.batch_keys(op.op_seed, batch.iteration, sample_indices(batch, n))
    return [distort_batch(op, batch, x, mode, np.zeros(1, np.float32), np.zeros(n, np.int64), keys)]
