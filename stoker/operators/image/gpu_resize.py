"""GPU ``resize``: every sample of a batch resampled in one kernel launch.

The kernel (``kernels/resize.cu``) filters with a triangle whose radius is the
scale factor when shrinking (antialiasing, as DALI's default linear resize
does) and interpolates bilinearly when enlarging. Output sizes follow DALI's
rules (:func:`plan`); with ``subpixel_scale`` the source window is adjusted so
that the scale matches the unrounded output size.
"""

from __future__ import annotations

import numpy as np

from stoker.operators.gpu_registry import grid_for, host_fallback, register_gpu, sample_geometry, upload_table
from stoker.operators.image.geometry import resize_plan


def _arg(args, name, default=None):
    v = args.get(name)
    return default if v is None else v


def _scalar(v):
    a = np.asarray(v, dtype=np.float64).reshape(-1)
    return float(a[0]) if a.size else 0.0


def _list(v):
    return None if v is None else [float(x) for x in np.asarray(v, dtype=np.float64).reshape(-1)]


def plan(args: dict, in_h: int, in_w: int):
    """Output size and source mapping of one sample: (out_h, out_w, lo_y, lo_x, scale_y, scale_x).

    Output pixel ``j`` samples the source at ``lo + (j + 0.5) * scale``. The
    size and region come from :func:`stoker.operators.image.geometry.resize_plan`,
    the function the CPU ``resize`` uses, so both devices sample the same points.
    """
    rx, ry = _scalar(_arg(args, "resize_x", 0)), _scalar(_arg(args, "resize_y", 0))
    size = _list(args.get("size"))
    if size:
        ry, rx = (size[0], size[-1]) if len(size) >= 2 else (size[0], size[0])
    p = resize_plan((in_h, in_w), (ry, rx), mode=_arg(args, "mode", "default"),
                    max_size=_list(args.get("max_size")),
                    resize_shorter=_scalar(_arg(args, "resize_shorter", 0)),
                    resize_longer=_scalar(_arg(args, "resize_longer", 0)),
                    roi_start=_list(args.get("roi_start")), roi_end=_list(args.get("roi_end")),
                    roi_relative=bool(_arg(args, "roi_relative", False)),
                    subpixel_scale=bool(_arg(args, "subpixel_scale", True)))
    oh, ow = p.out_size
    return oh, ow, p.lo[0], p.lo[1], (p.hi[0] - p.lo[0]) / oh, (p.hi[1] - p.lo[1]) / ow


def resize_samples(samples, plans, batch, mirror=None, out=None):
    """Resample CuPy HWC uint8 ``samples`` by ``plans`` (see :func:`plan`) into uint8 outputs.

    Returns ``(outputs, dense)``: a list of CuPy arrays, views of one dense
    ``(N, H, W, C)`` array (returned as ``dense``) when every output has one
    size, else views of one flat buffer (``dense`` None).
    """
    from stoker.backend import cuda

    cp = cuda._cupy()
    n = len(samples)
    geo = [sample_geometry(s) for s in samples]
    C = geo[0][4] if geo else 3
    sizes = [(p[0], p[1]) for p in plans]
    dense = None
    if out is None:
        if len(set(sizes)) == 1 and n:
            dense = cp.empty((n, sizes[0][0], sizes[0][1], C), cp.uint8)
            outs = [dense[i] for i in range(n)]
        else:
            total = sum(h * w * C for h, w in sizes)
            flat = cp.empty(max(total, 1), cp.uint8)
            outs, off = [], 0
            for h, w in sizes:
                outs.append(flat[off:off + h * w * C].reshape(h, w, C))
                off += h * w * C
    else:
        outs = list(out)
    if n == 0:
        return outs, dense
    itab = np.zeros((n, 8), np.int64)
    ftab = np.zeros((n, 4), np.float32)
    for i, ((ptr, stride, h, w, _), p, o) in enumerate(zip(geo, plans, outs)):
        itab[i] = (ptr, stride, h, w, o.data.ptr, p[0], p[1], 1 if mirror is not None and mirror[i] else 0)
        ftab[i] = (p[2], p[3], p[4], p[5])
    it, ft = upload_table(itab, batch), upload_table(ftab, batch)
    name = {3: "resize_u8_c3", 1: "resize_u8_c1"}.get(C)
    if name is None:
        raise ValueError(f"resize on the GPU supports 1 or 3 channels, got {C}")
    kern = cuda.load_kernel("resize", name)
    grid, block = grid_for(max(h * w for h, w in sizes), n)
    # The tables may be freed right after the launch: CuPy's pool reuses memory in stream order.
    kern(grid, block, (it, ft))
    return outs, dense


def _uint8():
    from stoker import types

    return types.UINT8


@register_gpu("resize")
def gpu_resize(op, batch, inputs, arg_inputs):
    """``fn.resize`` on GPU batches (HWC uint8)."""
    from stoker.tensors_gpu import TensorListGPU

    x = inputs[0]
    interp = op.args.get("interp_type")
    if (interp is not None and getattr(interp, "name", "") not in ("INTERP_LINEAR", "INTERP_TRIANGULAR")) \
            or op.args.get("dtype") is not None or x.dtype != _uint8() or x.ndim != 3:
        return host_fallback(op, batch, inputs, arg_inputs)
    samples = x.samples()
    plans = []
    for i, s in enumerate(samples):
        args = op.sample_args(arg_inputs, i)
        plans.append(plan(args, s.shape[0], s.shape[1]))
    outs, dense = resize_samples(samples, plans, batch)
    if dense is not None:
        return [TensorListGPU(dense, x.layout() or "HWC", x.source_info())]
    return [TensorListGPU(outs, x.layout() or "HWC", x.source_info())]
