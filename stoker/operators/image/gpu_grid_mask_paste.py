"""GPU ``grid_mask`` and ``paste``: one kernel launch per batch each (``kernels/grid_mask_paste.cu``).

The geometry comes from the CPU operators' own helpers, sample by sample on the host:
``GridMask.grid`` and ``grid_mask_params`` (tile, ratio, angle, shifts, as float32 constants) and
``Paste.canvas`` / ``Paste.fill`` (canvas size, the image's corner, the colour in the image's
type); a bad shape or argument raises their errors, for the failing sample, as the CPU path does.
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
    per_sample,
    register_gpu,
    upload_table,
)
from stoker.operators.image.grid_mask import grid_mask_params

_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}  # element size -> kernel's type
GM_ITAB, PS_ITAB = 5, 8  # as in kernels/grid_mask_paste.cu


def grid_mask_tables(shapes, grids):
    """The grid_mask kernel's host tables for HW/HWC samples of ``shapes`` masked by
    ``grids[i] = GridMask.grid(...)``: ``(itab, ftab)``, ``itab`` (n, GM_ITAB) int64 with the
    pointers left 0 (the caller sets columns 0 and 1), ``ftab`` (n, 5) float32 of
    ``grid_mask_params``."""
    n = len(shapes)
    itab = np.zeros((n, GM_ITAB), np.int64)
    ftab = np.zeros((n, 5), np.float32)
    for i, (shape, grid) in enumerate(zip(shapes, grids)):
        itab[i, 2] = int(np.prod(shape, dtype=np.int64))
        itab[i, 3] = shape[1]
        itab[i, 4] = shape[2] if len(shape) == 3 else 1
        ftab[i] = grid_mask_params(*grid)
    itab[:, 4] = np.maximum(itab[:, 4], 1)  # no division by 0 channels (such samples hold no element)
    return itab, ftab


def paste_tables(shapes, canvases, channels: int):
    """The paste kernel's host table for HWC samples of ``shapes`` placed by
    ``canvases[i] = Paste.canvas(...)``: ``(itab, output shapes)``, ``itab`` (n, PS_ITAB) int64
    with the pointers left 0 (the caller sets columns 0 and 1)."""
    n = len(shapes)
    itab = np.zeros((n, PS_ITAB), np.int64)
    out_shapes = np.zeros((n, 3), np.int64)
    for i, (shape, (out_h, out_w, y0, x0)) in enumerate(zip(shapes, canvases)):
        out_shapes[i] = (out_h, out_w, channels)
        itab[i, 2:] = (out_h * out_w * channels, out_w, shape[0], shape[1], y0, x0)
    return itab, out_shapes


def _one_launch(op, batch, inputs, arg_inputs, kernel: str, tables):
    """The shared frame of both operators: the batch (made contiguous) into one flat output
    buffer, one launch of ``grid_mask_paste.<kernel>_<element size>``. ``tables(x, shapes, dtype)``
    returns ``(itab, output shapes, extra)``, ``extra()`` the further kernel arguments (made only when
    there is something to launch), ``itab`` with each sample's output
    element count in column 2 and its pointers (set here) in columns 0 and 1."""
    from stoker.backend import cuda
    from stoker.tensors_gpu import TensorListGPU

    x = inputs[0]
    if not isinstance(x, TensorListGPU):  # a host batch (only in a direct call)
        return host_fallback(op, batch, inputs, arg_inputs)
    layout = op.output_layouts([x.layout()])[0]
    if len(x) == 0:
        return [TensorListGPU([], layout, [])]
    x = contiguous_samples(x)
    shapes = [tuple(int(e) for e in s) for s in x.shape()]
    dtype = np.dtype(types.to_numpy_type(x.dtype))
    itab, out_shapes, extra = tables(x, shapes, dtype)
    sizes = itab[:, 2]
    buf, offsets, out = flat_output(out_shapes, sizes, dtype, layout, x.source_info())
    if not sizes.any():
        return [out]
    itab[:, 0] = x.geometry()[0]
    itab[:, 1] = buf.data.ptr + offsets * dtype.itemsize
    grid, block = grid_for(int(sizes.max()), len(x))
    launch = cuda.load_kernel("grid_mask_paste", f"{kernel}_{dtype.itemsize}")
    launch(grid, block, (upload_table(itab, batch), *extra()))
    return [out]


@register_gpu("grid_mask")
def gpu_grid_mask(op, batch, inputs, arg_inputs):
    """``fn.grid_mask`` on GPU batches: one flat output buffer, one launch."""

    def tables(x, shapes, dtype):
        grids = per_sample(op, batch, len(x), lambda i: op.grid(shapes[i], op.sample_args(arg_inputs, i)))
        itab, ftab = grid_mask_tables(shapes, grids)
        return itab, shapes, lambda: (upload_table(ftab, batch),)

    return _one_launch(op, batch, inputs, arg_inputs, "grid_mask", tables)


@register_gpu("paste")
def gpu_paste(op, batch, inputs, arg_inputs):
    """``fn.paste`` on GPU batches: every canvas in one flat output buffer, one launch."""

    def tables(x, shapes, dtype):
        canvases = per_sample(op, batch, len(x), lambda i: op.canvas(shapes[i], op.sample_args(arg_inputs, i)))
        channels = int(op.args["n_channels"])
        itab, out_shapes = paste_tables(shapes, canvases, channels)
        return itab, out_shapes, lambda: (upload_table(op.fill(dtype).view(_UINT[dtype.itemsize]), batch),
                                          np.int32(channels))

    return _one_launch(op, batch, inputs, arg_inputs, "paste", tables)
