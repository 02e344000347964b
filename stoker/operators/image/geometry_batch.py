"""Whole-batch versions of :mod:`stoker.operators.image.geometry`: one NumPy pass, no loop per sample.

The GPU operators build their per-sample kernel tables from these, so that a
batch of 256 costs a few array operations on the host instead of 256 Python
calls. Each function gives exactly the numbers of its per-sample twin (the
same float64 operations in the same order); tests/operators/image/
test_geometry_batch.py checks them against each other.
"""

from __future__ import annotations

import numpy as np

from stoker.operators.image.geometry import RESIZE_MODES


def round_half_away(x: np.ndarray) -> np.ndarray:
    """Nearest integers, halves away from zero, as int64 (vectorized ``geometry.round_half_away``)."""
    x = np.asarray(x, dtype=np.float64)
    return np.where(x >= 0, np.floor(x + 0.5), -np.floor(-x + 0.5)).astype(np.int64)


def _column(v, n: int) -> np.ndarray:
    """A float64 (n,) column from a scalar or per-sample values; None counts as 0."""
    if v is None:
        return np.zeros(n)
    a = np.asarray(v, dtype=np.float64).reshape(-1)
    return np.broadcast_to(a if a.size > 1 else a[:1] if a.size else np.zeros(1), (n,)).astype(np.float64)


def resize_plans(in_hw: np.ndarray, resize_y=None, resize_x=None, *, mode: str = "default",
                 max_size=None, resize_shorter=None, resize_longer=None,
                 subpixel_scale: bool = True) -> np.ndarray:
    """Output sizes and source mapping of a batch of 2D resizes without a region of interest.

    ``in_hw``: (N, 2) input heights and widths. ``resize_y``/``resize_x``/
    ``resize_shorter``/``resize_longer``: scalars or (N,) per-sample values
    (0 or None = not given); ``max_size``: None, one value or (H, W).
    Returns an (N, 6) float64 array ``(out_h, out_w, lo_y, lo_x, scale_y, scale_x)``
    where output pixel ``j`` samples the source at ``lo + (j + 0.5) * scale`` --
    the rows :func:`stoker.operators.image.gpu_resize.plan` gives one at a time.
    """
    if mode not in RESIZE_MODES:
        raise ValueError(f"mode must be one of {RESIZE_MODES}, got {mode!r}")
    in_hw = np.asarray(in_hw, dtype=np.float64).reshape(-1, 2)
    n = in_hw.shape[0]
    extent = np.abs(in_hw)
    lo = np.zeros((n, 2))
    hi = in_hw.copy()
    req = np.stack([_column(resize_y, n), _column(resize_x, n)], axis=1)
    shorter, longer = _column(resize_shorter, n), _column(resize_longer, n)
    # per-sample mode: 0 default, 1 stretch, 2 not_larger, 3 not_smaller
    code = np.full(n, RESIZE_MODES.index(mode))
    code = np.where(longer != 0, 2, code)
    code = np.where(shorter != 0, 3, code)
    req = np.where((shorter != 0)[:, None], shorter[:, None], np.where((longer != 0)[:, None], longer[:, None], req))
    limit = np.zeros((n, 2))
    if max_size is not None:
        ms = np.asarray(max_size, dtype=np.float64).reshape(-1)
        if ms.size not in (1, 2):
            raise ValueError(f"max_size needs 1 or 2 values, got {ms.size}")
        limit[:] = ms if ms.size == 2 else ms[0]
    given = req > 0
    safe = np.where(extent > 0, extent, 1.0)
    ratio = np.where(given, req / safe, 0.0)
    n_given = given.sum(axis=1)

    # "default" / "stretch": given extents as asked, the others by the average given scale
    avg = ratio.sum(axis=1) / np.maximum(n_given, 1)
    keep = (code == 1)[:, None] | (n_given == 0)[:, None]
    out_free = np.where(given, req, np.where(keep, extent, extent * avg[:, None]))
    out_free = np.where(limit > 0, np.minimum(out_free, limit), out_free)

    # "not_larger" / "not_smaller": one scale for both axes
    big = np.where(given, ratio, -np.inf).max(axis=1)
    small = np.where(given, ratio, np.inf).min(axis=1)
    scale = np.where(n_given == 0, 1.0, np.where(code == 2, small, big))
    caps = np.where(limit > 0, limit / safe, np.inf).min(axis=1)
    scale = np.minimum(scale, caps)
    exact = given & (ratio == scale[:, None])
    capped = (limit > 0) & (limit / safe == scale[:, None])
    out_fixed = np.where(exact, req, np.where(capped, limit, extent * scale[:, None]))

    out = np.where((code >= 2)[:, None], out_fixed, out_free)
    out_int = np.maximum(1, round_half_away(out)).astype(np.float64)
    if subpixel_scale:
        adjust = (out > 0) & (out_int != out)
        c = 0.5 * (lo + hi)
        half = 0.5 * (hi - lo) * out_int / np.where(out > 0, out, 1.0)
        lo = np.where(adjust, c - half, lo)
        hi = np.where(adjust, c + half, hi)
    res = np.empty((n, 6))
    res[:, 0:2] = out_int
    res[:, 2:4] = lo
    res[:, 4:6] = (hi - lo) / out_int
    return res


def crop_anchors(in_extent: np.ndarray, crop_extent: np.ndarray, pos: np.ndarray,
                 rounding: str = "round") -> np.ndarray:
    """Start of each crop window, as ``geometry.crop_anchor`` (float32 positions times the
    free extent in float64; halves away from zero with ``rounding="round"``, the fraction
    cut towards zero with "truncate")."""
    prod = np.asarray(pos, np.float32).astype(np.float64) * (
        np.asarray(in_extent, np.int64) - np.asarray(crop_extent, np.int64)).astype(np.float64)
    if rounding == "truncate":
        return np.trunc(prod).astype(np.int64)
    return round_half_away(prod)
