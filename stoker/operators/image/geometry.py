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
_MIN_ROI = float(np.float32(1e-3))  # thinnest source region, in pixels (DALI's min_size)


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


def _f32(x: float) -> float:
    """``x`` rounded to float32 (DALI keeps sizes, scales and regions in C ``float``)."""
    return float(np.float32(x))


def _input_region(in_size, roi_start, roi_end, roi_relative) -> tuple[list[float], list[float]]:
    """Source region per axis as DALI's ``CalculateInputRoI``: float32 ends, relative ends times
    the extent in double, a region thinner than 1e-3 pixels widened to that."""
    nd = len(in_size)
    if roi_start is None and roi_end is None:
        return [0.0] * nd, [_f32(s) for s in in_size]
    start = list(roi_start) if roi_start is not None else [0.0] * nd
    end = list(roi_end) if roi_end is not None else ([1.0] * nd if roi_relative else list(in_size))
    if len(start) != nd or len(end) != nd:
        raise ValueError(f"roi_start/roi_end need {nd} values (one per spatial axis), "
                         f"got {len(start)} and {len(end)}")
    lo, hi = [], []
    for d in range(nd):
        a, b = _f32(start[d]), _f32(end[d])
        if roi_relative:
            a, b = a * in_size[d], b * in_size[d]
        if abs(b - a) < _MIN_ROI:
            off = 0.5 * _MIN_ROI if a <= b else -0.5 * _MIN_ROI
            a, b = a - off, b + off
        lo.append(_f32(a))
        hi.append(_f32(b))
    return lo, hi


def _output_size(out: list[float], in_size: list[float], mode: str, limit: list[float]) -> list[float]:
    """DALI's ``AdjustOutputSize``: fractional float32 output extents from the requested ones
    (0 = not given; negative flips) and the region's extents. Scales are float32 quotients
    kept in double; "default" fills missing extents with the geometric mean of the given scales."""
    nd = len(out)
    out = list(out)
    mask = [out[d] != 0 and in_size[d] != 0 for d in range(nd)]
    scale = [_f32(out[d] / in_size[d]) if in_size[d] else 1.0 for d in range(nd)]
    n_given = sum(mask)
    if n_given == 0:
        return list(in_size)
    if mode in ("default", "stretch"):
        if n_given < nd:
            avg = 1.0
            if mode == "default":
                for d in range(nd):
                    if mask[d]:
                        avg *= abs(scale[d])
                if n_given > 1:
                    avg = avg ** (1.0 / n_given)
            for d in range(nd):
                if not mask[d]:
                    out[d] = _f32(in_size[d] * avg)
        for d in range(nd):
            if limit[d] > 0 and abs(out[d]) > limit[d]:
                out[d] = math.copysign(limit[d], out[d])
        return out
    final, first = 0.0, True
    for d in range(nd):
        if mask[d]:
            s = _f32(abs(scale[d]))
            if first or (mode == "not_smaller" and s > final) or (mode == "not_larger" and s < final):
                final = s
            first = False
    for d in range(nd):
        if limit[d] > 0:
            s = limit[d] / in_size[d] if in_size[d] else math.inf
            final = min(final, s)
    for d in range(nd):
        if not mask[d] or abs(scale[d]) != final:
            out[d] = _f32(in_size[d] * math.copysign(final, scale[d]))
    return out


def resize_plan(in_size: Sequence[int], requested: Sequence[float], *, mode: str = "default",
                max_size: Sequence[float] | None = None, resize_shorter: float = 0.0,
                resize_longer: float = 0.0, roi_start: Sequence[float] | None = None,
                roi_end: Sequence[float] | None = None, roi_relative: bool = False,
                subpixel_scale: bool = True) -> ResizePlan:
    """Output size and source region of one sample, with DALI's rules and arithmetic.

    ``requested`` holds one extent per spatial axis (0 = not given, negative =
    flip). With ``resize_shorter`` / ``resize_longer`` the request is that length
    on every axis in mode "not_smaller" / "not_larger". Missing extents take the
    geometric mean of the given scales in "default" and keep the input extent in
    "stretch". "not_larger" / "not_smaller" use one scale for all axes: the
    smallest / largest of the requested ones. ``max_size`` (0 = no limit) clips
    each axis in "default"/"stretch" and lowers the common scale in the
    aspect-preserving modes. Sizes round half away from zero, at least 1. With
    ``subpixel_scale`` a fractional size keeps its exact scale: the source region
    grows or shrinks about its centre to cover the rounded output.

    The numbers follow DALI's ``ResizeAttr`` step by step, float32 where it keeps
    a C ``float`` (extents, scales, region ends) and double where it computes in
    double: a nearest-neighbour resize picks its source pixel by ``floor`` of a
    float32 position, so a region end off by one float32 step moves a whole pixel.
    """
    nd = len(in_size)
    if len(requested) != nd:
        raise ValueError(f"expected {nd} requested extents, got {len(requested)}")
    req = [_f32(r) if r else 0.0 for r in requested]
    if resize_shorter:
        mode, req = "not_smaller", [_f32(resize_shorter)] * nd
    elif resize_longer:
        mode, req = "not_larger", [_f32(resize_longer)] * nd
    if mode not in RESIZE_MODES:
        raise ValueError(f"mode must be one of {RESIZE_MODES}, got {mode!r}")
    limit = [0.0] * nd
    if max_size is not None:
        ms = list(max_size)
        limit = [_f32(ms[0])] * nd if len(ms) == 1 else [_f32(m) for m in ms]
        if len(limit) != nd:
            raise ValueError(f"max_size needs 1 or {nd} values, got {len(ms)}")
    lo, hi = _input_region(in_size, roi_start, roi_end, roi_relative)
    extent = []
    for d in range(nd):
        sz = _f32(hi[d] - lo[d])
        if sz < 0:  # a flipped region: sized unflipped, the flip carried by the request's sign
            lo[d], hi[d], req[d], sz = hi[d], lo[d], -req[d], -sz
        extent.append(sz)
    out = _output_size(req, extent, mode, limit)
    out_int = []
    for d in range(nd):
        size = max(1, round_half_away(abs(out[d])))
        out_int.append(size)
        if out[d] < 0:
            lo[d], hi[d] = hi[d], lo[d]
        if subpixel_scale and size != abs(out[d]):
            adjust = min(max(size / abs(out[d]), -10.0), 10.0)
            c = _f32(lo[d] + hi[d]) * 0.5  # (a float sum, then a double)
            lo[d] = _f32(min(max(c + (lo[d] - c) * adjust, -1e9), 1e9))
            hi[d] = _f32(min(max(c + (hi[d] - c) * adjust, -1e9), 1e9))
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
