"""GPU ``crop`` and ``flip``: whole-pixel copies of interleaved images, one launch per batch.

The windows and flip bits of the whole batch come from NumPy (``crop_windows``, ``flip_flags``),
exactly the per-sample rules' numbers (``crop_window_one``, ``flip_flag_one``, which also find
and name a sample whose arguments are refused), and the kernel's table is built from
``x.geometry()``: no per-sample Python on the host (issue 16)."""

from __future__ import annotations

import numpy as np

from stoker.operators.gpu_registry import flat_offsets, grid_for, host_fallback, register_gpu, upload_table
from stoker.operators.image.geometry import crop_anchor
from stoker.operators.image.geometry_batch import (
    crop_anchors,
    out_of_bounds,
    plan_rows,
    sample_rows,
    sample_scalars,
)
from stoker.operators.image.gpu_crop_mirror_normalize import crop_window


def crop_flip_samples(samples, windows, flips, batch):
    """Copy window (y0, x0, h, w) of each HWC/HW CuPy sample, flipped by ``flips[i]`` (bit 0 x, bit 1 y).

    Any dtype; returns ``(outputs, dense)`` like ``gpu_resize.resize_samples``.
    """
    from stoker.backend import cuda

    cp = cuda.cupy()
    n = len(samples)
    if n == 0:
        return [], None
    dt = samples[0].dtype
    trailing = samples[0].shape[2:]
    bpp = int(np.prod(trailing, dtype=np.int64)) * dt.itemsize
    sizes = [(w[2], w[3]) for w in windows]
    dense = None
    if len(set(sizes)) == 1:
        dense = cp.empty((n, sizes[0][0], sizes[0][1], *trailing), dt)
        outs = [dense[i] for i in range(n)]
    else:
        outs = [cp.empty((h, w, *trailing), dt) for h, w in sizes]
    itab = np.zeros((n, 10), np.int64)
    for i, (s, win, o) in enumerate(zip(samples, windows, outs)):
        if s.strides[1] != bpp:
            s = cp.ascontiguousarray(s)
        itab[i] = (s.data.ptr, s.strides[0], s.shape[0], s.shape[1], win[0], win[1], win[2], win[3],
                   int(flips[i]), o.data.ptr)
    launch_crop_flip(itab, bpp, grid_for(max(h * w for h, w in sizes), n), batch)
    return outs, dense


def launch_crop_flip(itab: np.ndarray, bpp: int, grid_block, batch) -> None:
    """One launch of ``crop_flip.cu`` over the table ``itab`` (its columns as the kernel reads them),
    copying in the widest words (4, 2 or 1 bytes) that divide the pixel size and every source
    pointer, row stride and destination pointer."""
    from stoker.backend import cuda

    unit = 1
    for size in (4, 2):
        if bpp % size == 0 and not (itab[:, [0, 1, 9]] % size).any():
            unit = size
            break
    name = {1: "crop_flip", 2: "crop_flip_w2", 4: "crop_flip_w4"}[unit]
    cuda.load_kernel("crop_flip", name)(*grid_block, (upload_table(itab, batch), np.int32(bpp // unit)))


def crop_flip_batch(x, windows: np.ndarray, flips: np.ndarray, batch):
    """Copy window ``windows[i] = (y0, x0, h, w)`` of every sample of ``x`` (a TensorListGPU of
    HWC/HW samples, any dtype), flipped by ``flips[i]`` (bit 0 x, bit 1 y), in one launch: the
    table :func:`crop_flip_samples` builds, from ``x.geometry()`` instead of per-sample views.
    Returns the output TensorListGPU: one dense array when every window has one size (as
    before), else one flat buffer."""
    from stoker.backend import cuda
    from stoker.operators.gpu_registry import contiguous_samples
    from stoker.tensors_gpu import TensorListGPU

    cp = cuda.cupy()
    n = len(x)
    if n == 0:
        return TensorListGPU([], x.layout(), x.source_info())
    x = contiguous_samples(x)  # (the kernel copies whole pixels: no channel stride)
    ptrs, row, shapes = x.geometry()
    dt = x.element_dtype()
    trailing = tuple(int(e) for e in shapes[0, 2:])
    bpp = int(np.prod(trailing, dtype=np.int64)) * dt.itemsize
    windows = np.asarray(windows, np.int64).reshape(n, 4)
    hw = windows[:, 2:4]
    if (hw == hw[0]).all():
        dense = cp.empty((n, int(hw[0, 0]), int(hw[0, 1]), *trailing), dt)
        out = TensorListGPU(dense, x.layout(), x.source_info())
        per = int(hw[0, 0] * hw[0, 1]) * bpp
        dst = dense.data.ptr + np.arange(n, dtype=np.int64) * per
    else:
        per = hw[:, 0] * hw[:, 1] * (bpp // dt.itemsize)
        offsets = flat_offsets(per)
        buf = cp.empty(max(int(per.sum()), 1), dt)
        out_shapes = np.column_stack([hw, np.tile(np.asarray(trailing, np.int64), (n, 1))])
        out = TensorListGPU.from_flat(buf, offsets, out_shapes, x.layout(), x.source_info())
        dst = buf.data.ptr + offsets * dt.itemsize
    itab = np.empty((n, 10), np.int64)
    itab[:, 0], itab[:, 1], itab[:, 2:4] = ptrs, row, shapes[:, :2]
    itab[:, 4:8] = windows
    itab[:, 8] = np.asarray(flips, np.int64).reshape(n)
    itab[:, 9] = dst
    launch_crop_flip(itab, bpp, grid_for(int((hw[:, 0] * hw[:, 1]).max()), n), batch)
    return out


def _layout_hw(x) -> bool:
    """Whether the kernel takes ``x``: images with H, W leading (HWC, HW, or 2-3 dims without a
    layout). Volumes (DHWC ...) and other layouts go to the host, which handles them as the CPU does."""
    lay = x.layout()
    return x.ndim in (2, 3) and (not lay or lay.startswith("HW"))


def crop_windows(op, arg_inputs, in_hw: np.ndarray) -> tuple[np.ndarray]:
    """``(windows,)``: every sample's (y0, x0, crop_h, crop_w) at once, exactly
    ``gpu_crop_mirror_normalize.crop_window`` sample by sample (``crop`` before ``crop_h`` /
    ``crop_w``, an extent below one pixel keeps the axis, the anchor rounded or truncated as
    ``rounding`` says). Raises ValueError for values the per-sample rule cannot make whole."""
    in_hw = np.asarray(in_hw, np.int64).reshape(-1, 2)
    n = in_hw.shape[0]
    crop = sample_rows(op, arg_inputs, "crop", n)
    ext = np.zeros((n, 2))
    if crop is None:
        for k, name in enumerate(("crop_h", "crop_w")):
            v = sample_scalars(op, arg_inputs, name, n)
            if v is not None:
                ext[:, k] = v
    elif crop.shape[1] == 1:
        ext[:] = crop[:, :1]
    elif crop.shape[1] >= 2:
        ext[:] = crop[:, -2:]
    if not np.isfinite(ext).all():
        raise ValueError("crop extents must be finite")
    ext = np.trunc(ext).astype(np.int64)  # int(): towards zero
    ext = np.where(ext >= 1, ext, in_hw)  # an extent below one pixel keeps the axis whole, as DALI
    pos = np.stack([sample_scalars(op, arg_inputs, k, n, 0.5) for k in ("crop_pos_y", "crop_pos_x")], 1)
    if not np.isfinite(pos.astype(np.float32)).all():
        raise ValueError("crop positions must be finite")
    anchors = crop_anchors(in_hw, ext, pos, op.args.get("rounding") or "round")
    return (np.concatenate([anchors, ext], axis=1),)


def crop_window_one(op, arg_inputs, i: int, in_hw) -> tuple[np.ndarray]:
    """Sample ``i``'s ``(window,)`` by the per-sample rule (``crop_window``): what
    :func:`crop_windows` computes for the whole batch."""
    args = op.sample_args(arg_inputs, i)
    h, w = int(in_hw[0]), int(in_hw[1])
    win = crop_window(args, h, w)
    if op.args.get("rounding") == "truncate":
        win = _truncated(win, args, (h, w))
    return (np.asarray(win, np.int64),)


def _fill_is_zero(op) -> bool:
    fill = np.asarray(op.args.get("fill_values") if op.args.get("fill_values") is not None else [0.0], np.float64)
    return bool((fill == 0).all())


@register_gpu("crop")
def gpu_crop(op, batch, inputs, arg_inputs):
    """``fn.crop`` on GPU batches."""
    x = inputs[0]
    if not _layout_hw(x):
        return host_fallback(op, batch, inputs, arg_inputs)
    n = len(x)
    if n == 0:
        return [crop_flip_batch(x, np.zeros((0, 4), np.int64), np.zeros(0, np.int64), batch)]
    in_hw = x.geometry()[2][:, :2]
    windows, = plan_rows(op, batch, n, lambda: crop_windows(op, arg_inputs, in_hw),
                         lambda i: crop_window_one(op, arg_inputs, i, in_hw[i]))
    windows, outside = out_of_bounds(op, batch, windows, x.geometry()[2], "crop")
    if outside.any() and op.args.get("out_of_bounds_policy") == "pad" and not _fill_is_zero(op):
        return host_fallback(op, batch, inputs, arg_inputs)  # (the kernel pads with zeros)
    return [crop_flip_batch(x, windows, np.zeros(n, np.int64), batch)]


def _truncated(window, args, shape):
    """The same window with its anchor truncated instead of rounded (``rounding="truncate"``)."""
    _, _, ch, cw = window
    py, px = (float(np.asarray(0.5 if args.get(k) is None else args[k]).reshape(-1)[0])
              for k in ("crop_pos_y", "crop_pos_x"))
    return crop_anchor(shape[0], ch, py, "truncate"), crop_anchor(shape[1], cw, px, "truncate"), ch, cw


def flip_flags(op, arg_inputs, n: int) -> tuple[np.ndarray]:
    """``(flags,)``: every sample's flip bits (1 horizontal, 2 vertical) at once, as
    :func:`flip_flag_one` gives them."""
    hz = sample_scalars(op, arg_inputs, "horizontal", n, 1)
    vt = sample_scalars(op, arg_inputs, "vertical", n, 0)
    return ((hz != 0).astype(np.int64) | np.where(vt != 0, 2, 0),)


def flip_flag_one(op, arg_inputs, i: int) -> tuple[int]:
    """Sample ``i``'s ``(flags,)`` by the per-sample rule."""
    a = op.sample_args(arg_inputs, i)
    hz = int(np.asarray(a.get("horizontal", 1)).reshape(-1)[0])
    vt = int(np.asarray(a.get("vertical", 0)).reshape(-1)[0])
    return ((1 if hz else 0) | (2 if vt else 0),)


@register_gpu("flip")
def gpu_flip(op, batch, inputs, arg_inputs):
    """``fn.flip`` on GPU batches (horizontal/vertical per sample)."""
    x = inputs[0]
    if not _layout_hw(x):
        return host_fallback(op, batch, inputs, arg_inputs)
    n = len(x)
    if n == 0:
        return [crop_flip_batch(x, np.zeros((0, 4), np.int64), np.zeros(0, np.int64), batch)]
    flips, = plan_rows(op, batch, n, lambda: flip_flags(op, arg_inputs, n), lambda i: flip_flag_one(op, arg_inputs, i))
    windows = np.zeros((n, 4), np.int64)
    windows[:, 2:4] = x.geometry()[2][:, :2]
    return [crop_flip_batch(x, windows, flips, batch)]
