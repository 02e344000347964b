"""GPU ``resize``: every sample of a batch resampled in one kernel launch.

The kernel (``kernels/resize.cu``) filters with a triangle whose radius is the
scale factor when shrinking (antialiasing, as DALI's default linear resize
does) and interpolates bilinearly when enlarging. Output sizes follow DALI's
rules (:func:`plan`); with ``subpixel_scale`` the source window is adjusted so
that the scale matches the unrounded output size.
"""

from __future__ import annotations

import numpy as np

from stoker.operators.gpu_registry import (
    batch_column,
    flat_offsets,
    grid_for,
    host_fallback,
    register_gpu,
    sample_geometry,
    upload_table,
)
from stoker.operators.image.geometry import resize_plan
from stoker.operators.image.geometry_batch import resize_plans


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


def geometry_of(samples):
    """(pointers, row strides, shapes) of a TensorListGPU or a list of CuPy HWC samples."""
    if hasattr(samples, "geometry"):
        return samples.geometry()
    geo = [sample_geometry(s) for s in samples]
    n = len(geo)
    ptrs = np.fromiter((g[0] for g in geo), np.int64, n)
    row = np.fromiter((g[1] for g in geo), np.int64, n)
    shapes = np.asarray([(g[2], g[3], g[4]) for g in geo], np.int64).reshape(n, 3)
    return ptrs, row, shapes


def resize_batch(samples, plans, batch, mirror=None):
    """Resample HWC uint8 ``samples`` (a TensorListGPU or list of CuPy arrays) by ``plans``.

    ``plans``: (N, 6) rows of :func:`plan` / :func:`geometry_batch.resize_plans`.
    Returns ``(dense, flat)``: a dense ``(N, H, W, C)`` array when every output
    has one size (``flat`` None), else ``(buffer, offsets, shapes)`` of one flat
    buffer (``dense`` None). One kernel launch, tables built with NumPy.
    """
    from stoker.backend import cuda

    cp = cuda.cupy()
    ptrs, row, shapes = geometry_of(samples)
    n = len(ptrs)
    plans = np.asarray(plans, dtype=np.float64).reshape(n, 6)
    C = int(shapes[0, 2]) if n and shapes.shape[1] > 2 else 1
    if n and shapes.shape[1] > 2 and (shapes[:, 2] != C).any():
        raise ValueError("resize on the GPU needs one channel count per batch")
    out_hw = plans[:, :2].astype(np.int64)
    if n and (out_hw == out_hw[0]).all():
        dense = cp.empty((n, int(out_hw[0, 0]), int(out_hw[0, 1]), C), cp.uint8)
        per = int(out_hw[0, 0] * out_hw[0, 1] * C)
        dst = dense.data.ptr + np.arange(n, dtype=np.int64) * per
        flat = None
    else:
        sizes = out_hw[:, 0] * out_hw[:, 1] * C
        offsets = flat_offsets(sizes)
        buf = cp.empty(max(int(sizes.sum()) if n else 0, 1), cp.uint8)
        dst = buf.data.ptr + offsets
        dense, flat = None, (buf, offsets, np.column_stack([out_hw, np.full(n, C, np.int64)]))
    if n == 0:
        return dense, flat
    itab = np.empty((n, 8), np.int64)
    itab[:, 0] = ptrs
    itab[:, 1] = row
    itab[:, 2:4] = shapes[:, :2]
    itab[:, 4] = dst
    itab[:, 5:7] = out_hw
    itab[:, 7] = 0 if mirror is None else np.asarray(mirror, dtype=bool).astype(np.int64)
    ftab = plans[:, 2:6].astype(np.float32)
    it, ft = upload_table(itab, batch), upload_table(np.ascontiguousarray(ftab), batch)
    name = {3: "resize_u8_c3", 1: "resize_u8_c1"}.get(C)
    if name is None:
        raise ValueError(f"resize on the GPU supports 1 or 3 channels, got {C}")
    kern = cuda.load_kernel("resize", name)
    grid, block = grid_for(int((out_hw[:, 0] * out_hw[:, 1]).max()), n)
    # The tables may be freed right after the launch: CuPy's pool reuses memory in stream order.
    kern(grid, block, (it, ft))
    return dense, flat


def resize_samples(samples, plans, batch, mirror=None):
    """:func:`resize_batch` with per-sample outputs: ``(list of CuPy arrays, dense or None)``."""
    dense, flat = resize_batch(samples, plans, batch, mirror)
    if dense is not None:
        return [dense[i] for i in range(dense.shape[0])], dense
    if flat is None:
        return [], None
    from stoker.tensors_gpu import TensorListGPU

    return list(TensorListGPU.from_flat(*flat).samples()), None


def _uint8():
    from stoker import types

    return types.UINT8


# Arguments the whole-batch planner handles; anything else (size lists, regions) plans per sample.
_BATCH_PLAN_ARGS = {"resize_x", "resize_y", "resize_shorter", "resize_longer"}


def _plans(op, x, arg_inputs):
    """(N, 6) plans: vectorized unless the arguments need the per-sample planner."""
    a = op.args
    n = len(x)
    simple = set(arg_inputs) <= _BATCH_PLAN_ARGS and a.get("size") is None and a.get("roi_start") is None \
        and a.get("roi_end") is None and x.ndim == 3
    if simple:
        def col(name):  # 0 = not given, as resize_plans reads it
            return batch_column(op, arg_inputs, name, n, 0.0)

        shapes = x.geometry()[2] if n else np.zeros((0, 3), np.int64)
        return resize_plans(shapes[:, :2], col("resize_y"), col("resize_x"), mode=a.get("mode") or "default",
                            max_size=a.get("max_size"), resize_shorter=col("resize_shorter"),
                            resize_longer=col("resize_longer"),
                            subpixel_scale=a.get("subpixel_scale") is not False)
    samples = x.samples()
    return np.asarray([plan(op.sample_args(arg_inputs, i), s.shape[0], s.shape[1])
                       for i, s in enumerate(samples)], np.float64).reshape(n, 6)


@register_gpu("resize")
def gpu_resize(op, batch, inputs, arg_inputs):
    """``fn.resize`` on GPU batches (HWC uint8)."""
    from stoker.tensors_gpu import TensorListGPU

    x = inputs[0]
    interp = op.args.get("interp_type")
    if (interp is not None and getattr(interp, "name", "") not in ("INTERP_LINEAR", "INTERP_TRIANGULAR")) \
            or op.args.get("dtype") is not None or x.dtype != _uint8() or x.ndim != 3 \
            or (x.layout() or "HWC") != "HWC":  # volumes (DHW ...) and other layouts: the host's resize
        return host_fallback(op, batch, inputs, arg_inputs)
    dense, flat = resize_batch(x, _plans(op, x, arg_inputs), batch)
    layout = x.layout() or "HWC"
    if dense is not None:
        return [TensorListGPU(dense, layout, x.source_info())]
    if flat is None:
        return [TensorListGPU([], layout, x.source_info())]
    return [TensorListGPU.from_flat(*flat, layout, x.source_info())]
