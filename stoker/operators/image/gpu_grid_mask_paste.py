"""GPU ``grid_mask`` and ``paste``: one kernel launch per batch each (``kernels/grid_mask_paste.cu``).

The geometry is the CPU operators' own, computed for the whole batch at once with NumPy
(``grid_mask_grids``, ``paste_canvases``: no Python per sample, issue 16) to the bit as their
per-sample helpers give it: ``GridMask.grid`` and ``grid_mask_params`` (tile, ratio, angle, shifts,
as float32 constants) and ``Paste.canvas`` / ``Paste.fill`` (canvas size, the image's corner, the
colour in the image's type); a bad shape or argument raises those helpers' errors, for the failing
sample, as the CPU path does.
The device tests each pixel against its sample's grid with the CPU's float32 operations in the
CPU's order (no fused multiply-add), so the zeroed pixels are the same, and paste only moves
values: both outputs equal the CPU's to the bit. Any element type runs on the kernels (they move
bit patterns, by element size). A host batch (only in a direct call: a pipeline uploads it)
takes the host fallback.
"""

from __future__ import annotations

import numpy as np

from stoker import types
from stoker.operators.gpu_registry import (
    contiguous_samples,
    flat_output,
    grid_for,
    host_fallback,
    register_gpu,
    upload_tables,
)
from stoker.operators.image.geometry_batch import plan_rows, sample_scalars
from stoker.operators.image.grid_mask import grid_mask_params

_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}  # element size -> kernel's type
GM_ITAB, PS_ITAB = 5, 8  # as in kernels/grid_mask_paste.cu


def grid_mask_tables(shapes, params):
    """The grid_mask kernel's host tables for HW/HWC samples of ``shapes`` ((n, ndim) ints)
    masked by the grids whose float32 constants ``params[i] = grid_mask_params(...)`` are given:
    ``(itab, ftab)``, ``itab`` (n, GM_ITAB) int64 with the pointers left 0 (the caller sets
    columns 0 and 1), ``ftab`` (n, 5) float32."""
    shapes = np.asarray(shapes, np.int64)
    n = shapes.shape[0]
    itab = np.zeros((n, GM_ITAB), np.int64)
    if n:
        itab[:, 2] = np.prod(shapes, axis=1)
        itab[:, 3] = shapes[:, 1]
        itab[:, 4] = shapes[:, 2] if shapes.shape[1] == 3 else 1
    itab[:, 4] = np.maximum(itab[:, 4], 1)  # no division by 0 channels (such samples hold no element)
    return itab, np.asarray(params, np.float32).reshape(n, 5)


def grid_mask_grids(op, arg_inputs, shapes) -> tuple[np.ndarray]:
    """``(params,)``: every sample's ``grid_mask_params`` ((n, 5) float32) at once, the numbers of
    :func:`grid_mask_grid_one` (``GridMask.grid`` sample by sample). Raises ValueError for a
    bad shape, tile or ratio (the per-sample rule then names the sample)."""
    shapes = np.asarray(shapes, np.int64)
    n = shapes.shape[0]
    if shapes.shape[1] not in (2, 3):
        raise ValueError("grid_mask: expects HW or HWC images")
    tile, ratio, angle, sx, sy = (sample_scalars(op, arg_inputs, k, n)
                                  for k in ("tile", "ratio", "angle", "shift_x", "shift_y"))
    if (tile <= 0).any() or not ((ratio >= 0.0) & (ratio <= 1.0)).all():
        raise ValueError("grid_mask: argument 'tile' must be positive and 'ratio' in [0, 1]")
    # grid_mask_params with arrays: the same float64 and float32 operations, element by element
    inv = (1.0 / tile.astype(np.int64)).astype(np.float32)  # (tile: int(), then 1.0 / tile)
    params = np.empty((n, 5), np.float32)
    params[:, 0] = np.cos(angle).astype(np.float32) * inv
    params[:, 1] = np.sin(angle).astype(np.float32) * inv
    params[:, 2] = sx.astype(np.float32) * inv
    params[:, 3] = sy.astype(np.float32) * inv
    params[:, 4] = ratio.astype(np.float32)
    return (params,)


def grid_mask_grid_one(op, arg_inputs, i: int, shape) -> tuple[np.ndarray]:
    """Sample ``i``'s ``(params,)`` by the per-sample rule (``GridMask.grid``)."""
    return (grid_mask_params(*op.grid(tuple(int(e) for e in shape), op.sample_args(arg_inputs, i))),)


def paste_tables(shapes, canvases, channels: int):
    """The paste kernel's host table for HWC samples of ``shapes`` ((n, 3) ints) placed by
    ``canvases`` ((n, 4): ``Paste.canvas``'s ``(out_h, out_w, y0, x0)`` per sample):
    ``(itab, output shapes)``, ``itab`` (n, PS_ITAB) int64 with the pointers left 0 (the caller
    sets columns 0 and 1)."""
    shapes = np.asarray(shapes, np.int64)
    canvases = np.asarray(canvases, np.int64).reshape(-1, 4)
    n = canvases.shape[0]
    itab = np.zeros((n, PS_ITAB), np.int64)
    out_shapes = np.zeros((n, 3), np.int64)
    out_shapes[:, :2], out_shapes[:, 2] = canvases[:, :2], channels
    itab[:, 2] = canvases[:, 0] * canvases[:, 1] * channels
    itab[:, 3] = canvases[:, 1]
    if n:
        itab[:, 4:6] = shapes[:, :2]
    itab[:, 6:8] = canvases[:, 2:4]
    return itab, out_shapes


def paste_canvases(op, arg_inputs, shapes) -> tuple[np.ndarray]:
    """``(canvases,)``: every sample's ``Paste.canvas`` ((n, 4) int64: canvas H, W, the image's
    row and column) at once, with its float32 products. Raises ValueError for a bad shape,
    ratio or position (the per-sample rule then names the sample)."""
    shapes = np.asarray(shapes, np.int64)
    n = shapes.shape[0]
    nc = op.args["n_channels"]
    if n and (shapes.shape[1] != 3 or (shapes[:, 2] != nc).any()):
        raise ValueError(f"paste: expects HWC images with n_channels={nc} channels")
    ratio = sample_scalars(op, arg_inputs, "ratio", n)
    px, py = (sample_scalars(op, arg_inputs, k, n, 0.5) for k in ("paste_x", "paste_y"))
    least = sample_scalars(op, arg_inputs, "min_canvas_size", n, 0.0)
    if ratio is None or not (ratio >= 1).all() or not ((px >= 0) & (px <= 1) & (py >= 0) & (py <= 1)).all():
        raise ValueError("paste: argument 'ratio' must be at least 1 and 'paste_x'/'paste_y' in [0, 1]")
    out = np.zeros((n, 4), np.int64)
    if not n:
        return (out,)
    f32 = np.float32
    for k in (0, 1):  # floor(max(float(F32(extent) * F32(ratio)), least)), as Paste.canvas
        grown = (shapes[:, k].astype(f32) * ratio.astype(f32)).astype(np.float64)
        grown = np.where(least > grown, least, grown)  # (Python's max(a, b): b only where b > a)
        if not np.isfinite(grown).all():
            raise ValueError("paste: the canvas size is not finite")
        out[:, k] = np.floor(grown).astype(np.int64)
    for k, p in ((2, py), (3, px)):  # floor(float(F32(pos) * F32(canvas - extent)))
        out[:, k] = np.floor((p.astype(f32) * (out[:, k - 2] - shapes[:, k - 2]).astype(f32))
                             .astype(np.float64)).astype(np.int64)
    return (out,)


def paste_canvas_one(op, arg_inputs, i: int, shape) -> tuple[np.ndarray]:
    """Sample ``i``'s ``(canvas,)`` by the per-sample rule (``Paste.canvas``)."""
    return (np.asarray(op.canvas(tuple(int(e) for e in shape), op.sample_args(arg_inputs, i)), np.int64),)


def _one_launch(op, batch, inputs, arg_inputs, kernel: str, tables):
    """The shared frame of both operators: the batch (made contiguous) into one flat output
    buffer, one launch of ``grid_mask_paste.<kernel>_<element size>``. ``tables(x, shapes, dtype)``
    returns ``(itab, output shapes, host tables, scalars)``: the kernel's arguments are ``itab`` and
    the host tables (uploaded here in one copy) followed by the scalars; ``itab`` holds each
    sample's output element count in column 2 and its pointers (set here) in columns 0 and 1."""
    from stoker.backend import cuda
    from stoker.tensors_gpu import TensorListGPU

    x = inputs[0]
    if not isinstance(x, TensorListGPU):  # a host batch (only in a direct call)
        return host_fallback(op, batch, inputs, arg_inputs)
    layout = op.output_layouts([x.layout()])[0]
    if len(x) == 0:
        return [TensorListGPU([], layout, [])]
    x = contiguous_samples(x)
    shapes = x.geometry()[2]
    dtype = np.dtype(types.to_numpy_type(x.dtype))
    itab, out_shapes, host_tables, scalars = tables(x, shapes, dtype)
    sizes = itab[:, 2]
    buf, offsets, out = flat_output(out_shapes, sizes, dtype, layout, x.source_info())
    if not sizes.any():
        return [out]
    itab[:, 0] = x.geometry()[0]
    itab[:, 1] = buf.data.ptr + offsets * dtype.itemsize
    grid, block = grid_for(int(sizes.max()), len(x))
    launch = cuda.load_kernel("grid_mask_paste", f"{kernel}_{dtype.itemsize}")
    launch(grid, block, (*upload_tables(batch, itab, *host_tables), *scalars))
    return [out]


@register_gpu("grid_mask")
def gpu_grid_mask(op, batch, inputs, arg_inputs):
    """``fn.grid_mask`` on GPU batches: one flat output buffer, one launch."""

    def tables(x, shapes, dtype):
        params, = plan_rows(op, batch, len(x), lambda: grid_mask_grids(op, arg_inputs, shapes),
                            lambda i: grid_mask_grid_one(op, arg_inputs, i, shapes[i]))
        itab, ftab = grid_mask_tables(shapes, params)
        return itab, shapes, [ftab], ()

    return _one_launch(op, batch, inputs, arg_inputs, "grid_mask", tables)


@register_gpu("paste")
def gpu_paste(op, batch, inputs, arg_inputs):
    """``fn.paste`` on GPU batches: every canvas in one flat output buffer, one launch."""

    def tables(x, shapes, dtype):
        canvases, = plan_rows(op, batch, len(x), lambda: paste_canvases(op, arg_inputs, shapes),
                              lambda i: paste_canvas_one(op, arg_inputs, i, shapes[i]))
        channels = int(op.args["n_channels"])
        itab, out_shapes = paste_tables(shapes, canvases, channels)
        return itab, out_shapes, [op.fill(dtype).view(_UINT[dtype.itemsize])], (np.int32(channels),)

    return _one_launch(op, batch, inputs, arg_inputs, "paste", tables)
