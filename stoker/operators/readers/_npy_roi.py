"""The region of interest of ``readers.numpy``: which box of each array is read.

The box is given on ``roi_axes`` (all axes when empty) by a start
(``roi_start`` in elements or ``rel_roi_start`` as a fraction of the extent,
default 0) and an end (``roi_end`` / ``rel_roi_end``, or a size ``roi_shape`` /
``rel_roi_shape`` added to the start; default the extent). Fractions are
multiplied in float32 and rounded half away from zero, as the slicing
operators do. ``out_of_bounds_policy`` then decides about boxes that leave the
array (see :func:`stoker.operators.image.slice.box_window`).
"""

from __future__ import annotations

import numpy as np

from stoker.operators.image.geometry import round_half_away

ROI_ARGS = ("roi_start", "rel_roi_start", "roi_end", "rel_roi_end", "roi_shape", "rel_roi_shape")
POLICIES = ("error", "pad", "trim_to_shape")
_F32 = np.float32


def conflicts(given: set[str]) -> str | None:
    """Why a set of ROI arguments cannot be combined, or None."""
    if {"roi_start", "rel_roi_start"} <= given:
        return "roi_start and rel_roi_start cannot be combined"
    ends = given & {"roi_end", "rel_roi_end", "roi_shape", "rel_roi_shape"}
    if len(ends) > 1:
        return f"{' and '.join(sorted(ends))} cannot be combined (give one end or one shape)"
    return None


def has_roi(args: dict) -> bool:
    return any(args.get(k) is not None for k in ROI_ARGS)


def roi_box(args: dict, shape: tuple[int, ...]) -> tuple[list[int], list[int], list[int]]:
    """``(axes, begin, end)`` of the box the ROI arguments in ``args`` (one sample's values)
    give for an array of ``shape``. Raises ValueError naming the argument at fault."""
    ndim = len(shape)
    axes = list(args.get("roi_axes") or [])
    for ax in axes:
        if not -ndim <= ax < ndim:
            raise ValueError(f"argument 'roi_axes': axis {ax} does not exist in an array of {ndim} dimensions")
    axes = [ax % ndim for ax in axes] if axes else list(range(ndim))
    n = len(axes)
    e32 = np.asarray([shape[a] for a in axes], _F32)
    e64 = e32.astype(np.float64)

    def values(name):
        v = np.asarray(args[name], np.float64).reshape(-1)
        if v.size != n:
            what = "roi_axes lists" if args.get("roi_axes") else "the array has"
            raise ValueError(f"argument '{name}' has {v.size} values but {what} {n} axes")
        return v

    if args.get("rel_roi_start") is not None:
        rs = values("rel_roi_start").astype(_F32)
        begin_f = (rs * e32).astype(np.float64)
        begin_d = rs.astype(np.float64) * e64
    elif args.get("roi_start") is not None:
        begin_f = begin_d = values("roi_start")
    else:
        begin_f = begin_d = np.zeros(n)
    if args.get("rel_roi_end") is not None:
        end_f = (values("rel_roi_end").astype(_F32) * e32).astype(np.float64)
    elif args.get("roi_end") is not None:
        end_f = values("roi_end")
    elif args.get("rel_roi_shape") is not None:
        end_f = begin_d + values("rel_roi_shape").astype(_F32).astype(np.float64) * e64
    elif args.get("roi_shape") is not None:
        end_f = begin_d + values("roi_shape")
    else:
        end_f = e64
    if not (np.isfinite(begin_f).all() and np.isfinite(end_f).all()):
        raise ValueError("the region of interest must be given by finite numbers")
    begin = [round_half_away(v) for v in begin_f]
    end = [round_half_away(v) for v in end_f]
    for ax, b, e in zip(axes, begin, end):
        if e < b:
            raise ValueError(f"the region of interest ends ({e}) before it starts ({b}) on axis {ax}")
    return axes, begin, end
