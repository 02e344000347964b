"""GPU ``crop`` and ``flip``: whole-pixel copies of interleaved images, one launch per batch."""

from __future__ import annotations

import numpy as np

from stoker.operators.gpu_registry import grid_for, register_gpu, upload_table
from stoker.operators.image.geometry import crop_anchor
from stoker.operators.image.gpu_crop_mirror_normalize import crop_window


def crop_flip_samples(samples, windows, flips, batch):
    """Copy window (y0, x0, h, w) of each HWC/HW CuPy sample, flipped by ``flips[i]`` (bit 0 x, bit 1 y).

    Any dtype; returns ``(outputs, dense)`` like ``gpu_resize.resize_samples``.
    """
    from stoker.backend import cuda

    cp = cuda._cupy()
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
    it = upload_table(itab, batch)
    grid, block = grid_for(max(h * w for h, w in sizes), n)
    cuda.load_kernel("crop_flip", "crop_flip")(grid, block, (it, np.int32(bpp)))
    return outs, dense


def _wrap(outs, dense, x):
    from stoker.tensors_gpu import TensorListGPU

    return TensorListGPU(dense if dense is not None else outs, x.layout(), x.source_info())


def _layout_hw(x):
    lay = x.layout() or "HWC"
    if not lay.startswith("HW"):
        raise ValueError(f"GPU crop/flip supports HW-leading layouts (HWC, HW), got {lay!r}")


@register_gpu("crop")
def gpu_crop(op, batch, inputs, arg_inputs):
    """``fn.crop`` on GPU batches."""
    x = inputs[0]
    _layout_hw(x)
    samples = x.samples()
    windows = [crop_window(op.sample_args(arg_inputs, i), s.shape[0], s.shape[1]) for i, s in enumerate(samples)]
    if op.args.get("rounding") == "truncate":
        windows = [_truncated(win, op.sample_args(arg_inputs, i), s.shape) for i, (win, s) in
                   enumerate(zip(windows, samples))]
    return [_wrap(*crop_flip_samples(samples, windows, [0] * len(samples), batch), x)]


def _truncated(window, args, shape):
    """The same window with its anchor truncated instead of rounded (``rounding="truncate"``)."""
    _, _, ch, cw = window
    py, px = (float(np.asarray(0.5 if args.get(k) is None else args[k]).reshape(-1)[0])
              for k in ("crop_pos_y", "crop_pos_x"))
    return crop_anchor(shape[0], ch, py, "truncate"), crop_anchor(shape[1], cw, px, "truncate"), ch, cw


@register_gpu("flip")
def gpu_flip(op, batch, inputs, arg_inputs):
    """``fn.flip`` on GPU batches (horizontal/vertical per sample)."""
    x = inputs[0]
    _layout_hw(x)
    samples = x.samples()
    flips = []
    for i in range(len(samples)):
        a = op.sample_args(arg_inputs, i)
        hz = int(np.asarray(a.get("horizontal", 1)).reshape(-1)[0])
        vt = int(np.asarray(a.get("vertical", 0)).reshape(-1)[0])
        flips.append((1 if hz else 0) | (2 if vt else 0))
    windows = [(0, 0, s.shape[0], s.shape[1]) for s in samples]
    return [_wrap(*crop_flip_samples(samples, windows, flips, batch), x)]
