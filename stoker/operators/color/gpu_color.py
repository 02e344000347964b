"""GPU ``hsv``, ``hue``, ``saturation``, ``color_twist``, ``brightness``, ``contrast`` and
``brightness_contrast``.

Each sample's map is built on the host by the CPU operator's own code (``affine`` of the
matrix operators, the same float32 constants for the brightness/contrast formula), and the
whole batch is mapped in one kernel launch (``kernels/linear_color.cu``) into one flat output
buffer. What the kernels do not take runs through the host fallback, with the CPU operator's
checks and errors: types other than uint8/float32 in and out, sequences (``F`` layouts, where
arguments may be per frame) and, for the matrix operators, anything but channel-last 3-channel
samples.
"""

from __future__ import annotations

import numpy as np

from stoker.operators.color._common import half_range, scalar, type_range
from stoker.operators.gpu_registry import (
    flat_offsets,
    grid_for,
    host_fallback,
    per_sample,
    register_gpu,
    upload_table,
)

_SUFFIX = {np.dtype(np.uint8): "u8", np.dtype(np.float32): "f32"}


def _out_type(op, x_dtype) -> np.dtype:
    return np.dtype(op.args.get("dtype") or getattr(op, "default_dtype", None) or x_dtype)


def _map_batch(kind: str, x, out_type: np.dtype, ftab: np.ndarray, batch):
    """Run ``kind`` ("matrix" or "scalar") over batch ``x`` with per-sample parameters ``ftab``
    (n, 12) float32; returns the output TensorListGPU (same shapes, ``out_type``)."""
    from stoker.backend import cuda
    from stoker.tensors_gpu import TensorListGPU

    cp = cuda._cupy()
    samples = [s if s.flags.c_contiguous else cp.ascontiguousarray(s) for s in x.samples()]
    n = len(samples)
    sizes = np.fromiter((s.size for s in samples), np.int64, n)
    offsets = flat_offsets(sizes)
    buf = cp.empty(max(int(sizes.sum()), 1), out_type)
    shapes = np.asarray([s.shape for s in samples], np.int64).reshape(n, -1)
    out = TensorListGPU.from_flat(buf, offsets, shapes, x.layout(), x.source_info())
    counts = sizes // 3 if kind == "matrix" else sizes
    if n == 0 or not counts.any():
        return out
    itab = np.empty((n, 3), np.int64)
    itab[:, 0] = np.fromiter((s.data.ptr for s in samples), np.int64, n)
    itab[:, 1] = buf.data.ptr + offsets * out_type.itemsize
    itab[:, 2] = counts
    name = f"{kind}_{_SUFFIX[np.dtype(samples[0].dtype)]}_{_SUFFIX[out_type]}"
    grid, block = grid_for(int(counts.max()), n)
    cuda.load_kernel("linear_color", name)(grid, block, (upload_table(itab, batch),
                                                         upload_table(np.ascontiguousarray(ftab, np.float32), batch)))
    return out


def _in_type(x) -> np.dtype:
    return np.dtype(x.samples()[0].dtype)


def _takes(x, out_type) -> bool:
    """Whether the kernels take this batch (else the host fallback runs)."""
    return _in_type(x) in _SUFFIX and out_type in _SUFFIX and "F" not in (x.layout() or "")


def gpu_linear_color(op, batch, inputs, arg_inputs):
    """``hsv``, ``hue``, ``saturation``, ``color_twist`` on GPU batches of 3-channel pixels."""
    x = inputs[0]
    if len(x) == 0:
        return host_fallback(op, batch, inputs, arg_inputs)
    in_type = _in_type(x)
    out_type = _out_type(op, in_type)
    layout = x.layout() or ""
    shapes = x.shape()
    channel_last = (layout.endswith("C") or (not layout and len(shapes[0]) == 3))
    if not (_takes(x, out_type) and channel_last and all(len(s) >= 2 and s[-1] == 3 for s in shapes)):
        return host_fallback(op, batch, inputs, arg_inputs)
    ftab = np.zeros((len(x), 12), np.float32)
    for i, (matrix, offset) in enumerate(per_sample(op, batch, len(x),
                                                    lambda i: op.affine(op.sample_args(arg_inputs, i), in_type))):
        ftab[i, :9] = np.asarray(matrix, np.float64).reshape(9)
        ftab[i, 9:] = np.asarray(offset, np.float64).reshape(3)
    return [_map_batch("matrix", x, out_type, ftab, batch)]


def gpu_brightness_contrast(op, batch, inputs, arg_inputs):
    """``brightness``, ``contrast``, ``brightness_contrast`` on GPU batches (any shape)."""
    x = inputs[0]
    if len(x) == 0:
        return host_fallback(op, batch, inputs, arg_inputs)
    in_type = _in_type(x)
    out_type = _out_type(op, in_type)
    if not _takes(x, out_type):
        return host_fallback(op, batch, inputs, arg_inputs)
    add_unit = type_range(out_type)

    def constants(i):  # the CPU operator's float32 constants: brightness, contrast, centre, shift * range
        args = op.sample_args(arg_inputs, i)
        return (np.float32(scalar(op, args, "brightness", 1.0)), np.float32(scalar(op, args, "contrast", 1.0)),
                np.float32(scalar(op, args, "contrast_center", half_range(in_type))),
                np.float32(scalar(op, args, "brightness_shift", 0.0) * add_unit))

    ftab = np.zeros((len(x), 12), np.float32)
    ftab[:, :4] = per_sample(op, batch, len(x), constants)
    return [_map_batch("scalar", x, out_type, ftab, batch)]


for _name in ("hsv", "hue", "saturation", "color_twist"):
    register_gpu(_name)(gpu_linear_color)
for _name in ("brightness", "contrast", "brightness_contrast"):
    register_gpu(_name)(gpu_brightness_contrast)
