"""GPU ``crop_mirror_normalize``: crop, mirror, normalize, layout and cast in one launch per batch.

Reads HWC (or HW) uint8 samples of any sizes through a per-sample table and
writes one dense ``(N, C, H, W)`` or ``(N, H, W, C)`` batch. Windows that run
past an image are padded with ``fill_values`` (after normalization).
"""

from __future__ import annotations

import numpy as np

from stoker.operators.gpu_registry import grid_for, register_gpu, sample_geometry, upload_table
from stoker.operators.image.geometry import crop_anchor

_KERNELS = {np.dtype(np.float32): "cmn_f32", np.dtype(np.float16): "cmn_f16",
            np.dtype(np.uint8): "cmn_u8", np.dtype(np.int8): "cmn_i8"}


def _vec(v, n, default):
    if v is None:
        return [default] * n
    a = np.asarray(v, dtype=np.float64).reshape(-1)
    if a.size == 0:
        return [default] * n
    return [float(a[min(i, a.size - 1)]) for i in range(n)]


def crop_window(args: dict, in_h: int, in_w: int):
    """(y0, x0, crop_h, crop_w) of one sample from ``crop``/``crop_h``/``crop_w`` and ``crop_pos_*``."""
    ch = cw = 0
    crop = args.get("crop")
    if crop is not None:
        c = np.asarray(crop, dtype=np.float64).reshape(-1)
        if c.size == 1:
            ch = cw = c[0]
        elif c.size >= 2:
            ch, cw = c[-2], c[-1]
    if args.get("crop_h") is not None and float(np.asarray(args["crop_h"]).reshape(-1)[0]) > 0:
        ch = float(np.asarray(args["crop_h"]).reshape(-1)[0])
    if args.get("crop_w") is not None and float(np.asarray(args["crop_w"]).reshape(-1)[0]) > 0:
        cw = float(np.asarray(args["crop_w"]).reshape(-1)[0])
    ch = int(ch) if ch > 0 else in_h
    cw = int(cw) if cw > 0 else in_w
    py = float(np.asarray(args.get("crop_pos_y", 0.5) if args.get("crop_pos_y") is not None else 0.5).reshape(-1)[0])
    px = float(np.asarray(args.get("crop_pos_x", 0.5) if args.get("crop_pos_x") is not None else 0.5).reshape(-1)[0])
    return crop_anchor(in_h, ch, py), crop_anchor(in_w, cw, px), ch, cw


def cmn_samples(samples, windows, mirror, batch, *, mean, std, dtype=np.float32, layout="CHW",
                pad_output=False, scale=1.0, shift=0.0, fill=0.0, normalize=True):
    """Crop ``windows`` (y0, x0, h, w; one size for all) out of CuPy HWC uint8 ``samples``.

    Mirrors where ``mirror[i]`` is true, normalizes ``(x - mean) / std * scale + shift``
    and writes one dense batch in ``layout`` ("CHW" or "HWC") and ``dtype``.
    """
    from stoker.backend import cuda

    cp = cuda._cupy()
    n = len(samples)
    geo = [sample_geometry(s) for s in samples]
    C = geo[0][4] if geo else 3
    out_c = 4 if pad_output and C == 3 else C
    sizes = {(w[2], w[3]) for w in windows}
    if len(sizes) > 1:
        raise ValueError(f"crop_mirror_normalize on the GPU needs one crop size per batch, got {sorted(sizes)}")
    oh, ow = sizes.pop() if sizes else (0, 0)
    dtype = np.dtype(dtype)
    chw = layout.upper().startswith("C")
    shape = (n, out_c, oh, ow) if chw else (n, oh, ow, out_c)
    out = cp.empty(shape, dtype)
    if n == 0:
        return out
    per_sample = oh * ow * out_c * dtype.itemsize
    itab = np.zeros((n, 8), np.int64)
    for i, ((ptr, stride, h, w, _), win) in enumerate(zip(geo, windows)):
        flags = 1 if mirror is not None and mirror[i] else 0
        itab[i] = (ptr, stride, h, w, win[0], win[1], flags, out.data.ptr + i * per_sample)
    norm = np.zeros(16, np.float32)
    norm[:8] = _vec(mean, 8, 0.0)
    norm[8:] = [1.0 / s for s in _vec(std, 8, 1.0)]
    it, nt = upload_table(itab, batch), upload_table(norm, batch)
    name = _KERNELS.get(dtype)
    if name is None:
        raise ValueError(f"crop_mirror_normalize on the GPU: dtype {dtype} is not supported")
    kern = cuda.load_kernel("crop_mirror_normalize", name)
    grid, block = grid_for(oh * ow, n)
    kern(grid, block, (it, nt, np.int32(C), np.int32(oh), np.int32(ow), np.int32(out_c), np.int32(chw),
                       np.float32(scale), np.float32(shift), np.float32(fill), np.int32(normalize)))
    return out


@register_gpu("crop_mirror_normalize")
def gpu_crop_mirror_normalize(op, batch, inputs, arg_inputs):
    """``fn.crop_mirror_normalize`` on GPU batches (HWC uint8 in)."""
    from stoker.tensors_gpu import TensorListGPU

    x = inputs[0]
    samples = x.samples()
    windows, mirror = [], []
    for i, s in enumerate(samples):
        args = op.sample_args(arg_inputs, i)
        windows.append(crop_window(args, s.shape[0], s.shape[1]))
        m = args.get("mirror")
        mirror.append(bool(np.asarray(m).reshape(-1)[0]) if m is not None else False)
    a = op.args
    dtype = a.get("dtype") if a.get("dtype") is not None else np.float32
    layout = a.get("output_layout") or "CHW"
    fill = _vec(a.get("fill_values"), 1, 0.0)[0]
    out = cmn_samples(samples, windows, mirror, batch, mean=a.get("mean"), std=a.get("std"), dtype=dtype,
                      layout=layout, pad_output=bool(a.get("pad_output")), scale=float(a.get("scale") or 1.0),
                      shift=float(a.get("shift") or 0.0), fill=fill)
    return [TensorListGPU(out, layout, x.source_info())]
