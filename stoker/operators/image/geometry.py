"""Parameter computation shared by the CPU and GPU image operators.

Everything here is pure Python on small numbers: output sizes and regions of
interest for ``resize``, crop windows for ``crop`` / ``crop_mirror_normalize``.
A GPU implementation calls the same functions so that both devices agree on
every pixel's source coordinate.

Spatial extents are given outermost first, as the tensor's shape is
(``(H, W)`` for images, ``(D, H, W)`` for volumes), which is also the order of
DALI's ``size``, ``roi_start`` and ``roi_end`` arguments.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

RESIZE_MODES = ("default", "stretch", "not_larger", "not_smaller")


def round_half_away(x: float) -> int:
    """Rounds to the nearest integer, halves away from zero (C's ``round``)."""
    return int(math.floor(x + 0.5)) if x >= 0 else -int(math.floor(-x + 0.5))


@dataclass(frozen=True)
class ResizePlan:
    """What one sample's resize does: the output extents and, per axis, the
    continuous source interval ``[lo, hi)`` that the output spans (``lo > hi``
    flips that axis). Pixel ``j`` of the output samples the source at
    ``lo + (j + 0.5) * (hi - lo) / out``, in coordinates where pixel ``i``
    covers ``[i, i + 1)``."""

    out_size: tuple[int, ...]
    lo: tuple[float, ...]
    hi: tuple[float, ...]


def resize_plan(in_size: Sequence[int], requested: Sequence[float], *, mode: str = "default",
                max_size: Sequence[float] | None = None, resize_shorter: float = 0.0,
                resize_longer: float = 0.0, roi_start: Sequence[float] | None = None,
                roi_end: Sequence[float] | None = None, roi_relative: bool = False,
                subpixel_scale: bool = True) -> ResizePlan:
    """Output size and source region of one sample, following DALI's rules.

    ``requested`` holds one extent per spatial axis (0 = not given). With
    ``resize_shorter`` / ``resize_longer`` the request is that length on every
    axis in mode "not_smaller" / "not_larger". Missing extents keep the aspect
    ratio (the average scale of the given ones) except in "stretch", where they
    keep the input extent. "not_larger" / "not_smaller" use one scale for all
    axes: the smallest / largest of the requested ones. ``max_size`` (0 = no
    limit) clips each axis in "default"/"stretch" and lowers the common scale in
    the aspect-preserving modes. Sizes round half up, at least 1. With
    ``subpixel_scale`` a fractional size keeps its exact scale: the source
    region grows or shrinks about its centre to cover the rounded output.
    """
    nd = len(in_size)
    lo = [0.0] * nd
    hi = [float(s) for s in in_size]
    if roi_start is not None or roi_end is not None:
        start = list(roi_start) if roi_start is not None else [0.0] * nd
        end = list(roi_end) if roi_end is not None else ([1.0] * nd if roi_relative else hi[:])
        if len(start) != nd or len(end) != nd:
            raise ValueError(f"roi_start/roi_end need {nd} values (one per spatial axis), "
                             f"got {len(start)} and {len(end)}")
        scale = [float(s) if roi_relative else 1.0 for s in in_size]
        lo = [float(a) * k for a, k in zip(start, scale)]
        hi = [float(b) * k for b, k in zip(end, scale)]
    extent = [abs(h - lo_) for lo_, h in zip(lo, hi)]
    req = [float(r) if r else 0.0 for r in requested]
    if len(req) != nd:
        raise ValueError(f"expected {nd} requested extents, got {len(req)}")
    if resize_shorter:
        mode, req = "not_smaller", [float(resize_shorter)] * nd
    elif resize_longer:
        mode, req = "not_larger", [float(resize_longer)] * nd
    if mode not in RESIZE_MODES:
        raise ValueError(f"mode must be one of {RESIZE_MODES}, got {mode!r}")
    limit = [0.0] * nd
    if max_size is not None:
        ms = list(max_size)
        limit = [float(ms[0])] * nd if len(ms) == 1 else [float(m) for m in ms]
        if len(limit) != nd:
            raise ValueError(f"max_size needs 1 or {nd} values, got {len(ms)}")
    given = [d for d in range(nd) if req[d] > 0]
    safe = [e if e > 0 else 1.0 for e in extent]
    if mode in ("default", "stretch"):
        if mode == "stretch" or not given:
            out = [req[d] if req[d] > 0 else extent[d] for d in range(nd)]
        else:
            avg = sum(req[d] / safe[d] for d in given) / len(given)
            out = [req[d] if req[d] > 0 else extent[d] * avg for d in range(nd)]
        out = [min(o, m) if m > 0 else o for o, m in zip(out, limit)]
    else:
        scales = [req[d] / safe[d] for d in given]
        if scales:
            scale = min(scales) if mode == "not_larger" else max(scales)
        else:
            scale = 1.0
        caps = [limit[d] / safe[d] for d in range(nd) if limit[d] > 0]
        if caps:
            scale = min([scale, *caps])
        out = []
        for d in range(nd):
            # the axis that sets the scale gets its requested extent exactly (no float drift)
            exact = req[d] if (req[d] > 0 and req[d] / safe[d] == scale) else None
            cap = limit[d] if (limit[d] > 0 and limit[d] / safe[d] == scale) else None
            out.append(exact if exact is not None else cap if cap is not None else extent[d] * scale)
    out_int = [max(1, round_half_away(o)) for o in out]
    if subpixel_scale:
        for d in range(nd):
            if out[d] > 0 and out_int[d] != out[d]:
                c = 0.5 * (lo[d] + hi[d])
                half = 0.5 * (hi[d] - lo[d]) * out_int[d] / out[d]
                lo[d], hi[d] = c - half, c + half
    return ResizePlan(tuple(out_int), tuple(lo), tuple(hi))


def crop_anchor(in_extent: int, crop_extent: int, pos: float, rounding: str = "round") -> int:
    """Start of a crop window: ``round(pos * (in - crop))`` with ``pos`` as a float32 and the
    product in double precision (exact), halves away from zero, as DALI computes it (may be
    negative when the window is larger). ``rounding="truncate"`` cuts the fraction instead
    (towards zero, as DALI). A float32 product would round e.g. 0.9f * 5 up to 4.5 and move
    the window by a pixel."""
    x = float(np.float32(pos)) * float(in_extent - crop_extent)
    return round_half_away(x) if rounding == "round" else int(x)


def crop_window(in_size: Sequence[int], crop_size: Sequence[float], pos: Sequence[float],
                rounding: str = "round") -> tuple[list[int], list[int]]:
    """Anchor and extent of a crop (per spatial axis). Fractional crop sizes are
    truncated, as DALI does; ``pos`` values are normalized positions in [0, 1];
    ``rounding`` ("round" or "truncate") makes the anchors whole."""
    extents = [int(c) for c in crop_size]
    anchors = [crop_anchor(int(n), c, p, rounding) for n, c, p in zip(in_size, extents, pos)]
    return anchors, extents


def rotated_size(height: int, width: int, angle_deg: float) -> tuple[int, int]:
    """Extent of the bounding box of an ``height`` x ``width`` image rotated by
    ``angle_deg``, rounded up to the parity of the input extent that lies along
    that output axis (H's and W's swap when the rotation is nearer a quarter
    turn), so that the centre stays on the same pixel grid, as DALI does."""
    a = math.radians(angle_deg)
    c, s = abs(math.cos(a)), abs(math.sin(a))
    w = width * c + height * s
    h = width * s + height * c
    # Nearer a quarter turn: output rows run along input columns. On an exact diagonal (45 + 90k
    # degrees) DALI swaps when the cosine is positive (45, 315) and not otherwise (135, 225), as
    # measured against DALI 2.4.
    quarter = math.cos(a) > 0 if abs(s - c) <= 1e-7 else s > c
    if quarter:
        return _parity_ceil(h, width), _parity_ceil(w, height)
    return _parity_ceil(h, height), _parity_ceil(w, width)


def _parity_ceil(x: float, like: int) -> int:
    n = math.ceil(x - 0.01)  # DALI tolerates a small excess (measured: 0.007 kept, 0.013 grows)
    if (n - like) % 2:
        n += 1
    return max(n, 1)


def rotation_matrix(angle_deg: float, in_hw: tuple[int, int], out_hw: tuple[int, int]) -> np.ndarray:
    """2x3 matrix taking an output pixel (x, y) (OpenCV's integer-centre
    convention) to its source position: the output centre maps to the input
    centre, and a positive angle turns the image counter-clockwise as shown."""
    a = math.radians(angle_deg)
    c, s = math.cos(a), math.sin(a)
    rot = np.array([[c, -s], [s, c]])
    co = np.array([out_hw[1] / 2.0, out_hw[0] / 2.0])
    ci = np.array([in_hw[1] / 2.0, in_hw[0] / 2.0])
    offset = rot @ (0.5 - co) + ci - 0.5
    return np.hstack([rot, offset[:, None]])
