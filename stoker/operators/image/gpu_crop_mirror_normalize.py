"""GPU ``crop_mirror_normalize``: crop, mirror, normalize, layout and cast in one launch per batch.

Reads HWC (or HW) uint8 samples of any sizes through a per-sample table and
writes one dense ``(N, C, H, W)`` or ``(N, H, W, C)`` batch. Windows that run
past an image are padded with ``fill_values`` (after normalization).
"""

from __future__ import annotations

import numpy as np

from stoker.operators.gpu_registry import batch_column, grid_for, host_fallback, register_gpu, upload_table
from stoker.operators.image.geometry import crop_anchor
from stoker.operators.image.geometry_batch import crop_anchors

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
    if crop is None:  # crop wins over crop_h/crop_w, as on the CPU (crop.requested_window)
        if args.get("crop_h") is not None:
            ch = float(np.asarray(args["crop_h"]).reshape(-1)[0])
        if args.get("crop_w") is not None:
            cw = float(np.asarray(args["crop_w"]).reshape(-1)[0])
    # an extent below one pixel (0, 0.5, negative) keeps the axis whole, as DALI
    ch = int(ch) if int(ch) >= 1 else in_h
    cw = int(cw) if int(cw) >= 1 else in_w
    py = float(np.asarray(args.get("crop_pos_y", 0.5) if args.get("crop_pos_y") is not None else 0.5).reshape(-1)[0])
    px = float(np.asarray(args.get("crop_pos_x", 0.5) if args.get("crop_pos_x") is not None else 0.5).reshape(-1)[0])
    rounding = args.get("rounding") or "round"
    return crop_anchor(in_h, ch, py, rounding), crop_anchor(in_w, cw, px, rounding), ch, cw


def cmn_samples(samples, windows, mirror, batch, *, mean, std, dtype=np.float32, layout="CHW",
                pad_output=False, scale=1.0, shift=0.0, fill=0.0, normalize=True):
    """Crop ``windows`` (rows y0, x0, h, w; one size for all) out of HWC uint8 ``samples``
    (a TensorListGPU or a list of CuPy arrays).

    Mirrors where ``mirror[i]`` is true, normalizes ``(x - mean) / std * scale + shift``
    and writes one dense batch in ``layout`` ("CHW" or "HWC") and ``dtype``.
    """
    from stoker.backend import cuda
    from stoker.operators.image.gpu_resize import geometry_of

    cp = cuda.cupy()
    ptrs, row, shapes = geometry_of(samples)
    n = len(ptrs)
    windows = np.asarray(windows, dtype=np.int64).reshape(n, 4)
    C = int(shapes[0, 2]) if n and shapes.shape[1] > 2 else 1
    out_c = 4 if pad_output and C == 3 else C
    if n and ((windows[:, 2] != windows[0, 2]) | (windows[:, 3] != windows[0, 3])).any():
        sizes = sorted({(int(h), int(w)) for h, w in windows[:, 2:4]})
        raise ValueError(f"crop_mirror_normalize on the GPU needs one crop size per batch, got {sizes}")
    oh, ow = (int(windows[0, 2]), int(windows[0, 3])) if n else (0, 0)
    dtype = np.dtype(dtype)
    chw = layout.upper().startswith("C")
    shape = (n, out_c, oh, ow) if chw else (n, oh, ow, out_c)
    out = cp.empty(shape, dtype)
    if n == 0:
        return out
    per_sample = oh * ow * out_c * dtype.itemsize
    itab = np.empty((n, 8), np.int64)
    itab[:, 0] = ptrs
    itab[:, 1] = row
    itab[:, 2:4] = shapes[:, :2]
    itab[:, 4:6] = windows[:, :2]
    itab[:, 6] = 0 if mirror is None else np.asarray(mirror, dtype=bool).astype(np.int64)
    itab[:, 7] = out.data.ptr + np.arange(n, dtype=np.int64) * per_sample
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


def batch_windows(op, x, arg_inputs):
    """(N, 4) crop windows (y0, x0, h, w) and (N,) mirror flags of a batch, without a loop per sample."""
    n = len(x)
    shapes = x.geometry()[2] if n else np.zeros((0, 3), np.int64)
    in_h, in_w = shapes[:, 0], shapes[:, 1]
    ch = np.zeros(n)
    cw = np.zeros(n)
    crop = op.args.get("crop")
    if crop is not None:
        c = np.asarray(crop, dtype=np.float64).reshape(-1)
        if c.size == 1:
            ch[:] = cw[:] = c[0]
        elif c.size >= 2:
            ch[:], cw[:] = c[-2], c[-1]
    else:  # crop wins over crop_h/crop_w, as on the CPU (crop.requested_window)
        ch, cw = batch_column(op, arg_inputs, "crop_h", n, 0.0), batch_column(op, arg_inputs, "crop_w", n, 0.0)
    # an extent below one pixel (0, 0.5, negative) keeps the axis whole, as DALI
    ch = np.where(np.trunc(ch) >= 1, np.trunc(ch).astype(np.int64), in_h)
    cw = np.where(np.trunc(cw) >= 1, np.trunc(cw).astype(np.int64), in_w)
    py, px = batch_column(op, arg_inputs, "crop_pos_y", n, 0.5), batch_column(op, arg_inputs, "crop_pos_x", n, 0.5)
    rounding = op.args.get("rounding") or "round"
    windows = np.column_stack([crop_anchors(in_h, ch, py, rounding), crop_anchors(in_w, cw, px, rounding),
                               ch, cw]).astype(np.int64)
    mirror = batch_column(op, arg_inputs, "mirror", n, 0.0) != 0
    return windows, mirror


# Per-sample arguments the whole-batch path reads; others (mean/std per sample) run on the host.
_BATCH_ARGS = {"crop_h", "crop_w", "crop_pos_x", "crop_pos_y", "mirror"}


def _images(x) -> bool:
    """Whether the kernel takes ``x``: HWC images (or 3 dims without a layout). Sequences (FHWC)
    and volumes go to the host, which crops each frame as the CPU does."""
    lay = x.layout()
    return x.ndim == 3 and (not lay or lay.startswith("HW"))


@register_gpu("crop_mirror_normalize")
def gpu_crop_mirror_normalize(op, batch, inputs, arg_inputs):
    """``fn.crop_mirror_normalize`` on GPU batches (HWC uint8 in)."""
    from stoker.tensors_gpu import TensorListGPU

    x = inputs[0]
    if not set(arg_inputs) <= _BATCH_ARGS or not _images(x):
        return host_fallback(op, batch, inputs, arg_inputs)
    windows, mirror = batch_windows(op, x, arg_inputs)
    if len(windows):
        from stoker.operators.image.geometry_batch import out_of_bounds

        windows, outside = out_of_bounds(op, batch, windows, x.geometry()[2], "crop_mirror_normalize")
        fills = np.asarray(op.args.get("fill_values") if op.args.get("fill_values") is not None else [0.0])
        several = fills.size > 1 and (fills != fills.flat[0]).any()
        if outside.any() and op.args.get("out_of_bounds_policy") == "pad" and several:
            return host_fallback(op, batch, inputs, arg_inputs)  # (the kernel pads with one value)
    if len(windows) and ((windows[:, 2:4] != windows[0, 2:4]).any()):
        # Crops of several sizes (a ragged batch and no crop argument): the kernel writes one
        # dense batch, so the host path makes the ragged output, as DALI gives it.
        return host_fallback(op, batch, inputs, arg_inputs)
    a = op.args
    dtype = a.get("dtype") if a.get("dtype") is not None else np.float32
    layout = a.get("output_layout") or "CHW"
    fill = _vec(a.get("fill_values"), 1, 0.0)[0]
    out = cmn_samples(x, windows, mirror, batch, mean=a.get("mean"), std=a.get("std"), dtype=dtype,
                      layout=layout, pad_output=bool(a.get("pad_output")), scale=float(a.get("scale") or 1.0),
                      shift=float(a.get("shift") or 0.0), fill=fill)
    return [TensorListGPU(out, layout, x.source_info())]
