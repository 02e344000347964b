"""GPU ``warp_affine`` and ``rotate``: each sample's output size and output-to-input matrix are
the CPU operator's own geometry (``WarpAffine.geometry``, ``Rotate.geometry`` and the matrix
helpers the CPU passes to OpenCV), computed for the whole batch at once with NumPy
(``rotate_plans``, ``warp_affine_plans``: the per-sample rules' numbers to the bit, no Python per
sample, issue 16; the per-sample rules ``rotate_plan`` / ``warp_affine_plan`` name a sample whose
arguments are refused), and the whole batch is warped in one launch
(``kernels/warp_affine.cu``) into one flat buffer. Bilinear sampling is exact in float32 where
OpenCV quantizes source positions to 1/32 pixel, so linear results may differ from the CPU's by a
level or two at sharp edges; nearest-neighbour results are the CPU's. Sequences, cubic
interpolation, a matrix given as a second input, a type change, more than 4 channels or types
other than uint8/float32 take the host fallback; so do volumes (DHWC, DHW, 4D without a layout:
3x4 matrices, ``rotate``'s ``axis``), which the CPU warps (``warp_volume``)."""

from __future__ import annotations

import numpy as np

from stoker import types
from stoker.operators.gpu_registry import (
    contiguous_samples,
    flat_offsets,
    grid_for,
    host_fallback,
    register_gpu,
    upload_table,
)
from stoker.operators.image.geometry import rotation_matrix
from stoker.operators.image.geometry_batch import (
    cos_sin_degrees,
    plan_rows,
    rotated_sizes,
    rotation_matrices,
    sample_rows,
    sample_scalars,
)
from stoker.operators.image.rotate import _half_centre_matrix
from stoker.operators.image.slice import c_cast_array
from stoker.operators.image.warp_affine import inverse_matrix, opencv_matrix

_KERNELS = {np.dtype(np.uint8): "warp_u8", np.dtype(np.float32): "warp_f32"}
# warp_affine.opencv_matrix's half-pixel shifts (DALI's centres at +0.5 -> OpenCV's at integers)
_HALF = np.array([[1.0, 0.0, 0.5], [0.0, 1.0, 0.5], [0.0, 0.0, 1.0]])
_UNHALF = np.array([[1.0, 0.0, -0.5], [0.0, 1.0, -0.5], [0.0, 0.0, 1.0]])


def warp_kernel_takes(op, x) -> bool:
    """True where the warp kernel takes batch ``x`` for ``op`` (a warp_affine or rotate instance):
    2-D images (HWC, HW) of uint8 or float32 with at most 4 channels and no type change."""
    layout = x.layout() or ""
    if len(x) == 0 or layout not in ("", "HWC", "HW") or x.ndim not in (2, 3):
        return False
    dtype = x.element_dtype()
    out = np.dtype(op.dtype) if op.dtype is not None else dtype
    channels = int(x.geometry()[2][0, 2]) if x.ndim == 3 else 1
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
    dtype = x.element_dtype()
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


def rotate_plan(op, arg_inputs, i: int, in_hw, nearest: bool):
    """One sample's ``(matrix row (6,), output (H, W))`` for the rotate kernel, from the CPU
    operator's own geometry: the per-sample rule (errors included) that :func:`rotate_plans`
    computes for the whole batch."""
    h, w = int(in_hw[0]), int(in_hw[1])
    angle, size = op.geometry(op.sample_args(arg_inputs, i), h, w)
    m = _half_centre_matrix(angle, (h, w), size)[:2] if nearest else rotation_matrix(angle, (h, w), size)
    return np.asarray(m, np.float64).reshape(6), np.asarray(size, np.int64)


def rotate_plans(op, arg_inputs, in_hw: np.ndarray, nearest: bool):
    """``(matrices (N, 6) float64, output sizes (N, 2) int64)`` of every sample at once, exactly
    :func:`rotate_plan`'s numbers. Raises ValueError for a bad angle or size (then the
    per-sample rule names the sample) and PerSample for arguments it leaves to that rule."""
    in_hw = np.asarray(in_hw, np.int64).reshape(-1, 2)
    n = in_hw.shape[0]
    angle = sample_scalars(op, arg_inputs, "angle", n)
    if angle is None or not np.isfinite(angle).all():
        raise ValueError("argument 'angle' is required and must be finite")
    size = sample_rows(op, arg_inputs, "size", n)
    cos, sin = cos_sin_degrees(angle)
    if size is not None:
        if n and (size.shape[1] == 0 or not np.isfinite(size).all()):
            raise ValueError("argument 'size' must hold extents (H, W)")
        # round() as the per-sample rule: halves to even
        out_hw = np.rint(size[:, [0, -1]]).astype(np.int64) if n else np.zeros((0, 2), np.int64)
        if (np.rint(size) < 0).any():
            raise ValueError("argument 'size' must hold non-negative extents (H, W)")
    elif op.args["keep_size"]:
        out_hw = in_hw.copy()
    else:
        out_hw = rotated_sizes(in_hw, cos, sin)
    return rotation_matrices(cos, sin, in_hw, out_hw, half_centre=nearest), out_hw


@register_gpu("rotate")
def gpu_rotate(op, batch, inputs, arg_inputs):
    """``fn.rotate`` on GPU batches."""
    x = inputs[0]
    if not warp_kernel_takes(op, x) or op.args.get("axis") is not None or "axis" in arg_inputs:
        # volumes (DHWC ...) rotate on the host; so does an image with an axis, which the host refuses
        return host_fallback(op, batch, inputs, arg_inputs)
    nearest = types.DALIInterpType(int(op.args["interp_type"])) == types.INTERP_NN
    in_hw = x.geometry()[2][:, :2]
    matrices, out_hw = plan_rows(op, batch, len(x), lambda: rotate_plans(op, arg_inputs, in_hw, nearest),
                                 lambda i: rotate_plan(op, arg_inputs, i, in_hw[i], nearest))
    return [warp_batch(x, matrices, out_hw, nearest, op.args["fill_value"], batch)]


def warp_affine_plan(op, arg_inputs, i: int, in_hw, nearest: bool):
    """One sample's ``(matrix row (6,), output (H, W))`` for the warp kernel (the matrix as an
    argument), from ``WarpAffine.geometry``: the per-sample rule of :func:`warp_affine_plans`."""
    m, oh, ow = op.geometry(op.sample_args(arg_inputs, i), None, (int(in_hw[0]), int(in_hw[1])))
    inverse_map = op.args["inverse_map"]
    full = inverse_matrix(m, inverse_map)[:2] if nearest else opencv_matrix(m, inverse_map)
    return np.asarray(full, np.float64).reshape(6), np.asarray((oh, ow), np.int64)


def warp_affine_plans(op, arg_inputs, in_hw: np.ndarray, nearest: bool):
    """``(matrices (N, 6) float64, output sizes (N, 2) int64)`` of every sample at once, exactly
    :func:`warp_affine_plan`'s numbers (the same 3x3 products and inverses, stacked). Raises
    ValueError for a missing, short or singular matrix or a bad size."""
    in_hw = np.asarray(in_hw, np.int64).reshape(-1, 2)
    n = in_hw.shape[0]
    m = sample_rows(op, arg_inputs, "matrix", n)
    if m is None or (n and m.shape[1] not in (6, 9)):
        raise ValueError("warp_affine: argument 'matrix' needs 6 values (2x3)")
    size = sample_rows(op, arg_inputs, "size", n)
    if size is None or size.shape[1] == 0:
        out_hw = in_hw.copy()
    else:
        if size.shape[1] < 2 or not np.isfinite(size[:, :2]).all():
            raise ValueError("warp_affine: argument 'size' needs (H, W)")
        out_hw = np.trunc(size[:, :2]).astype(np.int64)  # int(): towards zero
    full = np.zeros((n, 3, 3))
    full[:, :2] = m[:, :6].reshape(n, 2, 3)
    full[:, 2, 2] = 1.0
    if not op.args["inverse_map"]:
        try:
            full = np.linalg.inv(full)
        except np.linalg.LinAlgError:
            raise ValueError("warp_affine: argument 'matrix' is not invertible") from None
    if not nearest:  # OpenCV's integer centres (opencv_matrix): the same 3x3 products, stacked
        full = np.matmul(np.matmul(_UNHALF, full), _HALF)
    return np.ascontiguousarray(full[:, :2]).reshape(n, 6), out_hw


@register_gpu("warp_affine")
def gpu_warp_affine(op, batch, inputs, arg_inputs):
    """``fn.warp_affine`` on GPU batches (matrix as an argument)."""
    x = inputs[0]
    interp = op.args["interp_type"]
    if len(inputs) > 1 or interp not in (types.INTERP_NN, types.INTERP_LINEAR) or not warp_kernel_takes(op, x):
        return host_fallback(op, batch, inputs, arg_inputs)
    nearest = interp == types.INTERP_NN
    in_hw = x.geometry()[2][:, :2]
    matrices, out_hw = plan_rows(op, batch, len(x), lambda: warp_affine_plans(op, arg_inputs, in_hw, nearest),
                                 lambda i: warp_affine_plan(op, arg_inputs, i, in_hw[i], nearest))
    return [warp_batch(x, matrices, out_hw, nearest, op.args["fill_value"], batch)]
