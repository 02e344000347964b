"""GPU ``water``, ``sphere`` and ``jitter``: one launch per batch (``kernels/distortions.cu``), the
output in one flat buffer, equal to the CPU operator's output to the bit (linear: given OpenCV's
float remap, OpenCV 4.11 and later; older ones quantize the weights to 1/32 pixel).

The kernel computes each output pixel's source point in float32 in the CPU's order, from per-sample
tables the host builds with the CPU operator's own helpers: ``water_waves`` (the sine and cosine
waves, whose last bit CUDA's sinf/cosf would not reproduce), ``sphere_constants``, and
``jitter_offsets`` (every pixel's shift, drawn from the sample's own random stream, as the CPU
draws it, and uploaded as int8 or int16). ``mask`` 0 copies a sample.

Nearest neighbour takes any element type of 1, 2, 4 or 8 bytes. Linear reproduces OpenCV's float
``remap`` (the CPU's path for uint8, uint16 and float32 images with 1, 3 or 4 channels per group of
four). The host fallback takes the rest: linear on other types (OpenCV's int16 remap and the
CPU's float32 detour), linear with a group of two channels (OpenCV remaps those with weights
quantized to 1/32 pixel), images with no channels, samples that are not 3-D (the CPU raises its
error there), and jitter shifts beyond int16.
"""

from __future__ import annotations

import numpy as np

from stoker import types
from stoker.operators.gpu_registry import (
    contiguous_samples,
    flat_offsets,
    flat_output,
    grid_for,
    host_fallback,
    per_sample,
    register_gpu,
    upload_table,
)
from stoker.operators.image.distortions import jitter_offsets, sphere_constants, water_waves
from stoker.operators.image.slice import c_cast_array

_OPS = {"water": 0, "sphere": 1, "jitter": 2}  # as OP_* in kernels/distortions.cu
_LINEAR = {np.dtype(np.uint8): "u8", np.dtype(np.uint16): "u16", np.dtype(np.float32): "f32"}
_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}  # element size -> bit pattern type


def _dtype(x) -> np.dtype:
    parts = x.flat_parts()
    return np.dtype(parts[0].dtype if parts is not None else x.samples()[0].dtype)


def _kernel_takes(op, x) -> bool:
    """Whether the kernel takes batch ``x`` (else the host fallback runs)."""
    from stoker.tensors_gpu import TensorListGPU

    if not isinstance(x, TensorListGPU) or len(x) == 0 or x.ndim != 3:
        return False
    channels = x.geometry()[2][:, 2]
    dtype = _dtype(x)
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


def distort_batch(op, batch, x, tables, jbytes: int):
    """Run the kernel of ``op`` over ``x`` (3-D samples the kernel takes, see ``_kernel_takes``).

    ``tables[i]`` is sample i's table (a float32 vector for water and sphere, an int8/int16
    (2, H, W) array for jitter, of ``jbytes`` bytes) or None to copy the sample. Returns the output
    TensorListGPU (the input's shapes, type and layout)."""
    from stoker.backend import cuda

    x = contiguous_samples(x)
    n = len(x)
    ptrs, row, shapes = x.geometry()
    dtype = _dtype(x)
    sizes = np.prod(shapes, axis=1)
    buf, offsets, out = flat_output(shapes, sizes, dtype, x.layout(), x.source_info())
    pixels = shapes[:, 0] * shapes[:, 1]
    if not sizes.any():
        return out
    itab = np.zeros((n, 8), np.int64)
    itab[:, 0], itab[:, 1], itab[:, 2] = ptrs, row, buf.data.ptr + offsets * dtype.itemsize
    itab[:, 3:6] = shapes
    itab[:, 6] = [t is not None for t in tables]
    itab[:, 7] = flat_offsets([0 if t is None else t.size for t in tables])
    kept = [t.reshape(-1) for t in tables if t is not None]
    if op.schema.name == "jitter":
        jtab = np.concatenate(kept) if kept else np.zeros(1, np.int8)
        ftab = np.zeros(1, np.float32)
    else:
        ftab = np.concatenate(kept).astype(np.float32, copy=False) if kept else np.zeros(1, np.float32)
        jtab = np.zeros(1, np.int8)
    fill = float(op.args["fill_value"])
    if op.args["interp_type"] == types.INTERP_LINEAR:
        kernel = cuda.load_kernel("distortions", f"distort_linear_{_LINEAR[dtype]}")
        last = linear_border(fill, dtype)
    else:
        kernel = cuda.load_kernel("distortions", f"distort_nn_{dtype.itemsize}")
        # the C cast of the fill value (DALI's), as its bit pattern
        last = np.uint64(c_cast_array(np.asarray(fill), dtype).reshape(1).view(_UINT[dtype.itemsize])[0])
    grid, block = grid_for(int(pixels.max()), n)
    kernel(grid, block, (upload_table(itab, batch), upload_table(ftab, batch), upload_table(jtab, batch),
                         np.int32(_OPS[op.schema.name]), np.int32(jbytes), last))
    return out


def _gpu_distortion(op, batch, inputs, arg_inputs, table, jbytes: int = 1):
    """The GPU path shared by the three operators: ``table(i, h, w)`` is sample i's kernel table
    when the sample is distorted (mask 1, not empty)."""
    x = inputs[0]
    if not _kernel_takes(op, x):
        return host_fallback(op, batch, inputs, arg_inputs)
    shapes = x.geometry()[2]

    def plan(i):
        h, w = int(shapes[i, 0]), int(shapes[i, 1])
        if not int(op.sample_args(arg_inputs, i).get("mask", 1)) or h == 0 or w == 0:
            return None
        return table(i, h, w)

    return [distort_batch(op, batch, x, per_sample(op, batch, len(x), plan), jbytes)]


@register_gpu("water")
def gpu_water(op, batch, inputs, arg_inputs):
    """``fn.water`` on GPU batches: HWC, the waves from the CPU's ``water_waves``."""
    a = op.args
    params = tuple(a[k] for k in ("ampl_x", "ampl_y", "freq_x", "freq_y", "phase_x", "phase_y"))
    return _gpu_distortion(op, batch, inputs, arg_inputs,
                           lambda i, h, w: np.concatenate(water_waves(h, w, *params)))


@register_gpu("sphere")
def gpu_sphere(op, batch, inputs, arg_inputs):
    """``fn.sphere`` on GPU batches: HWC, the radius and centre from the CPU's ``sphere_constants``."""
    return _gpu_distortion(op, batch, inputs, arg_inputs,
                           lambda i, h, w: np.asarray(sphere_constants(h, w), np.float32))


@register_gpu("jitter")
def gpu_jitter(op, batch, inputs, arg_inputs):
    """``fn.jitter`` on GPU batches: every pixel's shift drawn on the host from the sample's random
    stream (``jitter_offsets``, as on the CPU), uploaded as int8 (int16 for nDegree over 255)."""
    from stoker.operators.base import SampleContext

    half = op.args["nDegree"] // 2
    if half > np.iinfo(np.int16).max:
        return host_fallback(op, batch, inputs, arg_inputs)
    small = half <= np.iinfo(np.int8).max
    jdtype = np.int8 if small else np.int16

    def table(i, h, w):
        # the stream run_cpu gives this sample (SampleContext.rng): the same shifts as on the CPU
        ctx = SampleContext(batch.sample_index(i), batch.iteration, op.op_seed, batch.source(i))
        return jitter_offsets(ctx.rng, op.args["nDegree"], h, w).astype(jdtype)

    return _gpu_distortion(op, batch, inputs, arg_inputs, table, 1 if small else 2)
