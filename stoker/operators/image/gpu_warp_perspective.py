"""GPU ``warp_perspective`` (and its DALI name ``experimental.warp_perspective``): each sample's
homography and output size are those of the CPU operator's own ``WarpPerspective.geometry`` (the
same matrix it hands to OpenCV), computed for the whole batch at once with NumPy
(``perspective_plans``; geometry itself runs per sample only to name a sample whose arguments
are refused, or for values NumPy cannot read at once: issue 16), and the whole batch is warped in
one launch (``perspective_*`` in ``kernels/warp_perspective.cu``), one table row per image: a
sample, or each frame of a sequence. HW, HWC, CHW, FHWC and FCHW samples of uint8 or float32 with up to 4
channels, nearest or linear interpolation and every border mode of the CPU operator.

The kernel computes source points and bilinear weights in float32 in the order of OpenCV's
vectorised warpPerspective (OpenCV >= 4.11), so nearest-neighbour results equal the CPU's and
linear ones equal them but for float32 rounding where OpenCV takes its scalar path (the last
columns of a row) or where an older OpenCV quantizes source points to 1/32 pixel. A matrix given
as a second input, per-frame matrices (fn.per_frame), cubic interpolation, other types, more than
4 channels and samples OpenCV would refuse (an empty source) take the host fallback."""

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
from stoker.operators.image.geometry_batch import plan_rows
from stoker.operators.per_frame import has_frame_values

_KERNELS = {np.dtype(np.uint8): "perspective_u8", np.dtype(np.float32): "perspective_f32"}
_BORDER = {"constant": 0, "replicate": 1, "reflect": 2, "reflect_101": 3, "wrap": 4}  # as in the .cu
_MAX_ROWS = 65535  # images per launch: the grid's y dimension


def sample_form(layout: str, ndim: int) -> tuple[bool, bool] | None:
    """(has frames, channels first) of a sample, read as the CPU operator reads it (CHW, FCHW and
    FHWC, or 4 dims without a layout, are frames; anything else of 2 or 3 dims is HW / HWC); None
    where the CPU would fail on the sample's dimensions (the host then raises its error)."""
    if layout in ("CHW", "FCHW", "FHWC") or (not layout and ndim == 4):
        return (ndim == 4, layout.endswith("CHW")) if ndim == (3 if layout == "CHW" else 4) else None
    return (False, False) if ndim in (2, 3) else None


def image_dims(shapes: np.ndarray, frames: bool, planar: bool) -> tuple[np.ndarray, ...]:
    """(frames, H, W, channels) of every sample of ``shapes`` (N, ndim) as int64 arrays."""
    n = len(shapes)
    f = shapes[:, 0] if frames else np.ones(n, np.int64)
    s = shapes[:, 1:] if frames else shapes
    if planar:
        return f, s[:, 1], s[:, 2], s[:, 0]
    c = s[:, 2] if s.shape[1] > 2 else np.ones(n, np.int64)
    return f, s[:, 0], s[:, 1], c


def perspective_tables(ptrs, dims, out_hw, matrices, fill, dtype, planar: bool, out_ptrs):
    """The kernel's per-image tables (itab int64 (R, 16), ftab float32 (R, 16)) for samples at
    ``ptrs`` (contiguous) of ``dims`` = (frames, H, W, C), warped by ``matrices`` (N, 3, 3) into
    ``out_hw`` (N, 2) at ``out_ptrs`` (bytes); ``fill`` holds one value per channel."""
    dtype = np.dtype(dtype)
    item = dtype.itemsize
    f, h, w, c = (np.asarray(d, np.int64) for d in dims)
    dh, dw = np.asarray(out_hw, np.int64).reshape(-1, 2).T
    s = np.repeat(np.arange(len(f)), f)  # the sample of every image
    k = np.arange(len(s), dtype=np.int64) - np.repeat(flat_offsets(f), f)  # its frame
    itab = np.zeros((len(s), 16), np.int64)
    itab[:, 0] = np.asarray(ptrs, np.int64)[s] + k * (h * w * c)[s] * item
    itab[:, 4], itab[:, 5] = h[s], w[s]
    itab[:, 6] = np.asarray(out_ptrs, np.int64)[s] + k * (dh * dw * c)[s] * item
    itab[:, 10], itab[:, 11] = dh[s], dw[s]
    if planar:  # CHW: rows of W elements, channel planes of H * W
        itab[:, 1], itab[:, 2], itab[:, 3] = w[s] * item, 1, (h * w)[s]
        itab[:, 7], itab[:, 8], itab[:, 9] = dw[s], 1, (dh * dw)[s]
    else:  # HWC: interleaved
        itab[:, 1], itab[:, 2], itab[:, 3] = (w * c)[s] * item, c[s], 1
        itab[:, 7], itab[:, 8], itab[:, 9] = (dw * c)[s], c[s], 1
    ftab = np.zeros((len(s), 16), np.float32)
    ftab[:, :9] = np.asarray(matrices, np.float64).reshape(-1, 9)[s]  # OpenCV casts its matrix alike
    ftab[:, 9:9 + len(fill)] = border_values(fill, dtype)
    return itab, ftab


def border_values(fill, dtype) -> np.ndarray:
    """The constant border's values as OpenCV converts them to the image type (round half to even
    and saturate for uint8), as float32."""
    v = np.asarray(fill, np.float64)
    if np.dtype(dtype) == np.uint8:
        v = np.clip(np.rint(v), 0, 255)
    return v.astype(np.float32)


def _has_frame_values(arg_inputs) -> bool:
    """Whether some argument input holds per-frame values (C-level: no Python step per sample)."""
    return has_frame_values(arg_inputs)


def _kernel_takes(dtype, dims, interp, fill) -> bool:
    """Whether the kernel warps these images. OpenCV interpolates 2-channel images with its older
    fixed-point code (1/32-pixel source points), which the kernel does not follow; the host also
    raises the CPU's errors (fill values per channel, no frames) and warps empty sources as the
    CPU does."""
    f, h, w, c = dims
    nc = int(c[0])
    return bool(dtype in _KERNELS and (c == nc).all() and nc <= 4 and (nc != 2 or interp == types.INTERP_NN)
                and len(fill) in (1, nc) and f.all() and int(f.sum()) <= _MAX_ROWS and h.all() and w.all())


def output_shapes(dims, out_hw, frames: bool, planar: bool, channels: bool) -> np.ndarray:
    """(N, ndim) output shapes: the input's layout with H, W replaced by ``out_hw``."""
    f, _, _, c = dims
    cols = [out_hw[:, 0], out_hw[:, 1]]
    if planar:
        cols = [c, *cols]
    elif channels:
        cols = [*cols, c]
    return np.stack([f, *cols] if frames else cols, axis=1).astype(np.int64)


def perspective_plans(op, arg_inputs, in_hw) -> tuple[np.ndarray, np.ndarray]:
    """``(matrices (N, 3, 3), out_hw (N, 2))`` of every image size ``in_hw`` (N, 2) at once:
    ``WarpPerspective.geometries``, the numbers :func:`perspective_plan_one` gives sample by
    sample."""
    return op.geometries(arg_inputs, in_hw)


def perspective_plan_one(op, arg_inputs, i: int, in_hw) -> tuple[np.ndarray, tuple[int, int]]:
    """Sample ``i``'s ``(matrix, (out_h, out_w))`` by the CPU operator's rule (``geometry``)."""
    m, oh, ow = op.geometry(op.sample_args(arg_inputs, i), None, (int(in_hw[0]), int(in_hw[1])))
    return m, (oh, ow)


@register_gpu("warp_perspective")
@register_gpu("experimental.warp_perspective")
def gpu_warp_perspective(op, batch, inputs, arg_inputs):
    """``fn.warp_perspective`` / ``fn.experimental.warp_perspective`` on GPU batches."""
    from stoker.backend import cuda
    from stoker.tensors_gpu import TensorListGPU

    x = inputs[0]
    n = len(x)
    interp = op.args["interp_type"]
    form = sample_form(x.layout() or "", x.ndim) if n else None
    if (form is None or len(inputs) > 1 or interp not in (types.INTERP_NN, types.INTERP_LINEAR)
            or _has_frame_values(arg_inputs)):
        return host_fallback(op, batch, inputs, arg_inputs)
    frames, planar = form
    dtype = x.element_dtype()
    dims = image_dims(x.geometry()[2], frames, planar)
    fill = op.args["fill_value"] or [0.0]
    if not _kernel_takes(dtype, dims, interp, fill):
        return host_fallback(op, batch, inputs, arg_inputs)
    f, h, w, c = dims
    nc = int(c[0])

    in_hw = np.stack([h, w], axis=1)
    matrices, out_hw = plan_rows(op, batch, n, lambda: perspective_plans(op, arg_inputs, in_hw),
                                 lambda i: perspective_plan_one(op, arg_inputs, i, in_hw[i]))
    out_hw = np.asarray(out_hw, np.int64).reshape(n, 2)
    if not out_hw.all():  # the CPU operator fails on an empty output size: the host raises its error
        return host_fallback(op, batch, inputs, arg_inputs)
    cp = cuda.cupy()
    x = contiguous_samples(x)
    ptrs, _, _ = x.geometry()
    sizes = f * out_hw[:, 0] * out_hw[:, 1] * nc
    offsets = flat_offsets(sizes)
    buf = cp.empty(max(int(sizes.sum()), 1), dtype)
    shapes = output_shapes(dims, out_hw, frames, planar, channels=x.ndim - frames == 3)
    out = TensorListGPU.from_flat(buf, offsets, shapes, x.layout(), x.source_info())
    itab, ftab = perspective_tables(ptrs, dims, out_hw, np.asarray(matrices), fill * nc if len(fill) == 1 else fill,
                                    dtype, planar, buf.data.ptr + offsets * dtype.itemsize)
    grid, block = grid_for(int((out_hw[:, 0] * out_hw[:, 1]).max()), len(itab))
    cuda.load_kernel("warp_perspective", _KERNELS[dtype])(
        grid, block, (upload_table(itab, batch), upload_table(ftab, batch), np.int32(nc),
                      np.int32(interp == types.INTERP_NN), np.int32(_BORDER[op.args["border_mode"]])))
    return [out]
