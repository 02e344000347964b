"""GPU ``warp_affine`` and ``rotate``: each sample's output size and output-to-input matrix come
from the CPU operator's own geometry (``WarpAffine.geometry``, ``Rotate.geometry`` and the matrix
helpers the CPU passes to OpenCV), and the whole batch is warped in one launch
(``kernels/warp_affine.cu``) into one flat buffer. Bilinear sampling is exact in float32 where
OpenCV quantizes source positions to 1/32 pixel, so linear results may differ from the CPU's by a
level or two at sharp edges; nearest-neighbour results are the CPU's. Sequences, cubic
interpolation, a matrix given as a second input, a type change, more than 4 channels or types
other than uint8/float32 take the host fallback."""

from __future__ import annotations

import numpy as np

from stoker import types
from stoker.operators.gpu_registry import (
    contiguous_samples,
    flat_offsets,
    grid_for,
    host_fallback,
    per_sample,
    register_gpu,
    upload_table,
)
from stoker.operators.image.geometry import rotation_matrix
from stoker.operators.image.rotate import _half_centre_matrix
from stoker.operators.image.slice import c_cast_array
from stoker.operators.image.warp_affine import inverse_matrix, opencv_matrix

_KERNELS = {np.dtype(np.uint8): "warp_u8", np.dtype(np.float32): "warp_f32"}


def _kernel_takes(op, x) -> bool:
    layout = x.layout() or ""
    if len(x) == 0 or layout not in ("", "HWC", "HW") or x.ndim not in (2, 3):
        return False
    dtype = np.dtype(x.samples()[0].dtype)
    out = np.dtype(op.dtype) if op.dtype is not None else dtype
    channels = x.shape()[0][2] if x.ndim == 3 else 1
    return dtype in _KERNELS and out == dtype and channels <= 4


def warp_batch(x, matrices: np.ndarray, out_hw: np.ndarray, nearest: bool, fill, batch):
    """Warp every sample of ``x`` (HWC/HW, contiguous pixels) by its 2x3 ``matrices[i]`` to
    ``out_hw[i]``; returns the output TensorListGPU (the input's type and layout)."""
    from stoker.backend import cuda
    from stoker.tensors_gpu import TensorListGPU

    cp = cuda._cupy()
    x = contiguous_samples(x)
    n = len(x)
    ptrs, row, shapes = x.geometry()
    channels = int(shapes[0, 2]) if shapes.shape[1] > 2 else 1
    dtype = np.dtype(x.samples()[0].dtype)
    out_hw = np.asarray(out_hw, np.int64).reshape(n, 2)
    sizes = out_hw[:, 0] * out_hw[:, 1] * channels
    offsets = flat_offsets(sizes)
    buf = cp.empty(max(int(sizes.sum()), 1), dtype)
    out_shapes = out_hw if x.ndim == 2 else np.column_stack([out_hw, np.full(n, channels, np.int64)])
    out = TensorListGPU.from_flat(buf, offsets, out_shapes, x.layout(), x.source_info())
    if not sizes.any():
        return out
    itab = np.zeros((n, 8), np.int64)
    itab[:, 0], itab[:, 1], itab[:, 2:4] = ptrs, row, shapes[:, :2]
    itab[:, 4] = buf.data.ptr + offsets * dtype.itemsize
    itab[:, 5:7] = out_hw
    ftab = np.zeros((n, 8), np.float32)
    ftab[:, :6] = np.asarray(matrices, np.float64).reshape(n, 6)
    fill_value = 0.0 if fill is None else float(fill)
    fill_out = c_cast_array(np.asarray(fill_value), dtype)[()]  # DALI's cast of fill values
    grid, block = grid_for(int((out_hw[:, 0] * out_hw[:, 1]).max()), n)
    cuda.load_kernel("warp_affine", _KERNELS[dtype])(
        grid, block, (upload_table(itab, batch), upload_table(ftab, batch), np.int32(channels),
                      np.int32(nearest), np.int32(fill is not None), np.float32(fill_value), fill_out))
    return out


@register_gpu("rotate")
def gpu_rotate(op, batch, inputs, arg_inputs):
    """``fn.rotate`` on GPU batches."""
    x = inputs[0]
    if not _kernel_takes(op, x):
        return host_fallback(op, batch, inputs, arg_inputs)
    nearest = types.DALIInterpType(int(op.args["interp_type"])) == types.INTERP_NN
    shapes = x.shape()

    def plan(i):
        h, w = shapes[i][0], shapes[i][1]
        angle, size = op.geometry(op.sample_args(arg_inputs, i), h, w)
        m = _half_centre_matrix(angle, (h, w), size)[:2] if nearest else rotation_matrix(angle, (h, w), size)
        return np.asarray(m, np.float64).reshape(6), size

    matrices, out_hw = zip(*per_sample(op, batch, len(x), plan))
    return [warp_batch(x, np.asarray(matrices), np.asarray(out_hw), nearest, op.args["fill_value"], batch)]


@register_gpu("warp_affine")
def gpu_warp_affine(op, batch, inputs, arg_inputs):
    """``fn.warp_affine`` on GPU batches (matrix as an argument)."""
    x = inputs[0]
    interp = op.args["interp_type"]
    if len(inputs) > 1 or interp not in (types.INTERP_NN, types.INTERP_LINEAR) or not _kernel_takes(op, x):
        return host_fallback(op, batch, inputs, arg_inputs)
    nearest = interp == types.INTERP_NN
    inverse_map = op.args["inverse_map"]
    shapes = x.shape()

    def plan(i):
        m, oh, ow = op.geometry(op.sample_args(arg_inputs, i), None, (shapes[i][0], shapes[i][1]))
        full = inverse_matrix(m, inverse_map)[:2] if nearest else opencv_matrix(m, inverse_map)
        return np.asarray(full, np.float64).reshape(6), (oh, ow)

    matrices, out_hw = zip(*per_sample(op, batch, len(x), plan))
    return [warp_batch(x, np.asarray(matrices), np.asarray(out_hw), nearest, op.args["fill_value"], batch)]
