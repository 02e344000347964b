"""GPU ``hsv``, ``hue``, ``saturation``, ``color_twist``, ``brightness``, ``contrast`` and
``brightness_contrast``.

Every sample's map is built on the host for the whole batch at once with NumPy (the matrix
operators' ``affine_batch``, bit for bit their per-sample ``affine``; the same float32 constants
for the brightness/contrast formula), and the whole batch is mapped in one kernel launch
(``kernels/linear_color.cu``) into one flat output buffer. No host step runs once per sample
(issue 16: at 20k images/s a batch of 256 has about 12 ms of host time for every operator), except
where the arguments cannot be read in one NumPy step (per-frame values, argument samples of
differing shapes): those batches are planned sample by sample, with the same results. What the
kernels do not take runs through the host fallback, with the CPU operator's checks and errors:
types other than uint8/float32 in and out, sequences (``F`` layouts, where arguments may be per
frame) and, for the matrix operators, anything but channel-last 3-channel samples.
"""

from __future__ import annotations

import numpy as np

from stoker.operators.color._common import half_range, scalar, scalar_column, type_range
from stoker.operators.gpu_registry import (
    contiguous_samples,
    flat_output,
    grid_for,
    host_fallback,
    per_sample,
    plan_batch,
    register_gpu,
    upload_tables,
)

_SUFFIX = {np.dtype(np.uint8): "u8", np.dtype(np.float32): "f32"}


def _out_type(op, x_dtype) -> np.dtype:
    return np.dtype(op.args.get("dtype") or getattr(op, "default_dtype", None) or x_dtype)


def _map_batch(kind: str, x, in_type: np.dtype, out_type: np.dtype, ftab: np.ndarray, batch):
    """Run ``kind`` ("matrix" or "scalar") over batch ``x`` with per-sample parameters ``ftab``
    (n, 12) float32; returns the output TensorListGPU (same shapes, ``out_type``)."""
    from stoker.backend import cuda

    x = contiguous_samples(x)  # the kernel reads each sample as one run of pixels
    ptrs, _, shapes = x.geometry()
    n = len(ptrs)
    sizes = np.prod(shapes, axis=1, dtype=np.int64)
    buf, offsets, out = flat_output(shapes, sizes, out_type, x.layout(), x.source_info())
    counts = sizes // 3 if kind == "matrix" else sizes
    if n == 0 or not counts.any():
        return out
    itab = np.empty((n, 3), np.int64)
    itab[:, 0] = ptrs
    itab[:, 1] = buf.data.ptr + offsets * out_type.itemsize
    itab[:, 2] = counts
    name = f"{kind}_{_SUFFIX[in_type]}_{_SUFFIX[out_type]}"
    grid, block = grid_for(int(counts.max()), n)
    cuda.load_kernel("linear_color", name)(grid, block, tuple(upload_tables(batch, itab, np.asarray(ftab, np.float32))))
    return out


def _takes(x, in_type, out_type) -> bool:
    """Whether the kernels take this batch (else the host fallback runs)."""
    return in_type in _SUFFIX and out_type in _SUFFIX and "F" not in (x.layout() or "")


def _columns(op, arg_inputs, n):
    """``column(name, default)``: an argument's values for the batch (``scalar_column``)."""
    return lambda name, default: scalar_column(op, arg_inputs, name, n, default)


def affine_table(op, batch, arg_inputs, n: int, in_type: np.dtype) -> np.ndarray:
    """The matrix kernel's (n, 12) float32 parameters: each sample's 3x3 matrix, then its offset.
    Planned for the whole batch (``affine_batch``); a bad argument raises the per-sample error
    naming the operator and the sample, as the CPU does."""
    def one(i):
        return op.affine(op.sample_args(arg_inputs, i), in_type)

    ftab = np.zeros((n, 12), np.float32)
    planned = plan_batch(op, batch, n, lambda: op.affine_batch(_columns(op, arg_inputs, n), in_type), one)
    if planned is None:  # per-frame values or argument samples of differing shapes
        for i, (matrix, offset) in enumerate(per_sample(op, batch, n, one)):
            ftab[i, :9] = np.asarray(matrix, np.float64).reshape(9)
            ftab[i, 9:] = np.asarray(offset, np.float64).reshape(3)
        return ftab
    matrices, offsets = planned
    ftab[:, :9] = matrices.reshape(n, 9)
    ftab[:, 9:] = offsets
    return ftab


def gpu_linear_color(op, batch, inputs, arg_inputs):
    """``hsv``, ``hue``, ``saturation``, ``color_twist`` on GPU batches of 3-channel pixels."""
    x = inputs[0]
    n = len(x)
    if n == 0:
        return host_fallback(op, batch, inputs, arg_inputs)
    in_type = x.element_dtype()
    out_type = _out_type(op, in_type)
    layout = x.layout() or ""
    shapes = x.geometry()[2]
    channel_last = layout.endswith("C") or (not layout and shapes.shape[1] == 3)
    if not (_takes(x, in_type, out_type) and channel_last and shapes.shape[1] >= 2 and (shapes[:, -1] == 3).all()):
        return host_fallback(op, batch, inputs, arg_inputs)
    ftab = affine_table(op, batch, arg_inputs, n, in_type)
    return [_map_batch("matrix", x, in_type, out_type, ftab, batch)]


def _constants(op, args, in_type, add_unit):
    """One sample's float32 constants, as the CPU operator makes them: brightness, contrast,
    centre, shift * range."""
    return (np.float32(scalar(op, args, "brightness", 1.0)), np.float32(scalar(op, args, "contrast", 1.0)),
            np.float32(scalar(op, args, "contrast_center", half_range(in_type))),
            np.float32(scalar(op, args, "brightness_shift", 0.0) * add_unit))


def _constants_batch(op, arg_inputs, n, in_type, add_unit):
    """:func:`_constants` for every sample: a (n, 4) float32 array (the same float64 values,
    rounded to float32 alike), or None where the arguments cannot be read in one step."""
    cols = [scalar_column(op, arg_inputs, name, n, default) for name, default in
            (("brightness", 1.0), ("contrast", 1.0), ("contrast_center", half_range(in_type)),
             ("brightness_shift", 0.0))]
    if any(c is None for c in cols):
        return None
    cols[3] = cols[3] * add_unit
    return np.stack(cols, axis=1).astype(np.float32)


def brightness_contrast_table(op, batch, arg_inputs, n: int, in_type: np.dtype, out_type: np.dtype) -> np.ndarray:
    """The scalar kernel's (n, 12) float32 parameters (columns 0-3: :func:`_constants`)."""
    add_unit = type_range(out_type)

    def one(i):
        return _constants(op, op.sample_args(arg_inputs, i), in_type, add_unit)

    ftab = np.zeros((n, 12), np.float32)
    planned = plan_batch(op, batch, n, lambda: _constants_batch(op, arg_inputs, n, in_type, add_unit), one)
    ftab[:, :4] = per_sample(op, batch, n, one) if planned is None else planned
    return ftab


def gpu_brightness_contrast(op, batch, inputs, arg_inputs):
    """``brightness``, ``contrast``, ``brightness_contrast`` on GPU batches (any shape)."""
    x = inputs[0]
    n = len(x)
    if n == 0:
        return host_fallback(op, batch, inputs, arg_inputs)
    in_type = x.element_dtype()
    out_type = _out_type(op, in_type)
    if not _takes(x, in_type, out_type):
        return host_fallback(op, batch, inputs, arg_inputs)
    ftab = brightness_contrast_table(op, batch, arg_inputs, n, in_type, out_type)
    return [_map_batch("scalar", x, in_type, out_type, ftab, batch)]


for _name in ("hsv", "hue", "saturation", "color_twist"):
    register_gpu(_name)(gpu_linear_color)
for _name in ("brightness", "contrast", "brightness_contrast"):
    register_gpu(_name)(gpu_brightness_contrast)
