"""Regions of interest for the cropping decoders, in DALI's conventions.

Both functions work on the decoded, oriented image's ``(height, width)`` and
return a window ``(y, x, h, w)``; they raise ``ValueError`` with the reason
when the arguments make no window (the operator turns it into a per-sample
error that names the file).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

# Axis indices of an HWC image.
_AXIS_OF = {"H": 0, "W": 1, "C": 2}


def round_half_away(v: float) -> int:
    """Round to nearest, halves away from zero (C's ``llround``)."""
    return int(math.floor(v + 0.5)) if v >= 0 else -int(math.floor(-v + 0.5))


def crop_window(height: int, width: int, crop_h: float, crop_w: float, pos_x: float = 0.5,
                pos_y: float = 0.5, rounding: str = "round") -> tuple[int, int, int, int]:
    """The window of ``decoders.image_crop`` / ``fn.crop``.

    The size is truncated to whole pixels; the corner is
    ``pos * (extent - size)``, rounded (halves away from zero) or truncated.
    """
    for name, p in (("crop_pos_x", pos_x), ("crop_pos_y", pos_y)):
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"{name}={p} is out of range [0, 1]")
    h, w = int(crop_h), int(crop_w)
    if h <= 0 or w <= 0:
        raise ValueError(f"the crop window must have a positive size, got {h}x{w}")
    to_int = round_half_away if rounding == "round" else int
    # float32 positions, the product exact in double (as DALI: 0.9f * 5 stays below 4.5)
    y = to_int(float(np.float32(pos_y)) * float(height - h))
    x = to_int(float(np.float32(pos_x)) * float(width - w))
    if y < 0 or x < 0 or y + h > height or x + w > width:
        raise ValueError(f"the {h}x{w} crop window does not fit in the {height}x{width} image")
    return y, x, h, w


def slice_axes(axes: Sequence[int] | None, axis_names: str | None) -> list[int]:
    """Axis indices (0 = H, 1 = W) that the slice arguments refer to, in argument order.

    ``axis_names`` ("H"/"W" letters) or ``axes`` (each in [-2, 1], negative
    counting from the back of HW), never both (as in DALI, which slices the
    image's spatial axes only); neither gives DALI's default "WH".
    """
    if axis_names and axes is not None:
        raise ValueError("axes and axis_names are mutually exclusive")
    if axis_names:
        if "C" in axis_names:
            raise ValueError(f"axis_names={axis_names!r}: slicing the channel axis is not supported by "
                             "the image decoders")
        try:
            out = [_AXIS_OF[c] for c in axis_names]
        except KeyError:
            raise ValueError(f"axis_names={axis_names!r}: an image has axes 'H' and 'W'") from None
    elif axes is not None:
        out = []
        for a in axes:
            a = int(a)
            if not -2 <= a < 2:
                raise ValueError(f"axes={list(axes)}: axis {a} is out of range [-2, 1] for the image's "
                                 "H and W axes")
            out.append(a % 2)
    else:
        return [1, 0]
    if len(set(out)) != len(out):
        raise ValueError(f"axes {out} name an axis twice")
    return out


def slice_window(height: int, width: int, axes: list[int], *, start=None, rel_start=None, end=None,
                 rel_end=None, shape=None, rel_shape=None) -> tuple[int, int, int, int]:
    """The window of ``decoders.image_slice`` from named arguments (absolute or relative).

    Start and end are computed in floating point and each rounded once
    (halves away from zero), so ``rel_start + rel_shape`` that meet at a pixel
    boundary give adjacent windows without gaps.
    """
    extents = [height, width, None]
    lo = [0, 0]
    hi = [height, width]
    given = [_vec(v, len(axes)) for v in (start, rel_start, end, rel_end, shape, rel_shape)]
    start, rel_start, end, rel_end, shape, rel_shape = given
    for i, dim in enumerate(axes):
        if dim == 2:
            raise ValueError("slicing the channel axis is not supported by the image decoders")
        ext = extents[dim]
        a = 0.0
        if start is not None:
            a = float(start[i])
        elif rel_start is not None:
            a = float(rel_start[i]) * ext
        e = float(ext)
        if end is not None:
            e = float(end[i])
        elif rel_end is not None:
            e = float(rel_end[i]) * ext
        elif shape is not None:
            if shape[i] < 0:
                raise ValueError(f"negative slice shape {shape[i]}")
            e = a + float(shape[i])
        elif rel_shape is not None:
            if rel_shape[i] < 0:
                raise ValueError(f"negative slice shape {rel_shape[i]}")
            if rel_start is not None:  # one multiplication: fewer rounding surprises
                e = (float(rel_start[i]) + float(rel_shape[i])) * ext
            else:
                e = a + float(rel_shape[i]) * ext
        if e < a:
            raise ValueError(f"slice end {e} lies before its start {a}")
        lo[dim] = round_half_away(a)
        hi[dim] = round_half_away(e)
    return _checked(height, width, lo, hi)


def positional_slice_window(height: int, width: int, axes: list[int], anchor, shape,
                            normalized_anchor: bool = True, normalized_shape: bool = True):
    """The window of ``decoders.image_slice`` from its ``anchor``/``shape`` inputs.

    Integer inputs are always absolute; float inputs are relative to the
    extent when ``normalized_anchor``/``normalized_shape`` say so.
    """
    anchor = np.asarray(anchor).reshape(-1)
    shape = np.asarray(shape).reshape(-1)
    if anchor.size != len(axes) or shape.size != len(axes):
        raise ValueError(f"anchor and shape need {len(axes)} values (one per axis), got "
                         f"{anchor.size} and {shape.size}")
    norm_a = normalized_anchor and anchor.dtype.kind == "f"
    norm_s = normalized_shape and shape.dtype.kind == "f"
    extents = [height, width]
    lo, hi = [0, 0], [height, width]
    for i, dim in enumerate(axes):
        if dim == 2:
            raise ValueError("slicing the channel axis is not supported by the image decoders")
        ext = extents[dim]
        a, s = float(anchor[i]), float(shape[i])
        if norm_a and norm_s:
            e = (a + s) * ext
            a *= ext
        else:
            a = a * ext if norm_a else a
            e = a + (s * ext if norm_s else s)
        if e < a:
            raise ValueError(f"slice end {e} lies before its start {a}")
        lo[dim] = round_half_away(a)
        hi[dim] = round_half_away(e)
    return _checked(height, width, lo, hi)


def positional_slice_windows(heights, widths, axes: list[int], anchors, shapes,
                             normalized_anchor: bool = True, normalized_shape: bool = True) -> np.ndarray:
    """:func:`positional_slice_window` for every sample at once: an (N, 4) int64 array of
    ``(y, x, h, w)``, the same numbers (the same float64 steps and rounding). Raises ValueError
    when any sample's window is bad or its inputs differ in size or type from the others' (the
    caller then asks :func:`positional_slice_window` sample by sample, which names the sample)."""
    if 2 in axes:
        raise ValueError("slicing the channel axis is not supported by the image decoders")
    n, k = len(heights), len(axes)
    anchor, shape = np.asarray(anchors), np.asarray(shapes)
    if anchor.dtype.kind not in "biuf" or shape.dtype.kind not in "biuf":
        raise ValueError("anchor and shape must be numbers")
    anchor, shape = anchor.reshape(n, -1), shape.reshape(n, -1)
    if anchor.shape[1] != k or shape.shape[1] != k:
        raise ValueError(f"anchor and shape need {k} values (one per axis)")
    norm_a = normalized_anchor and anchor.dtype.kind == "f"
    norm_s = normalized_shape and shape.dtype.kind == "f"
    extents = np.stack([np.asarray(heights, np.int64), np.asarray(widths, np.int64)], 1)
    ext = extents[:, axes].astype(np.float64)
    a, s = anchor.astype(np.float64), shape.astype(np.float64)
    if norm_a and norm_s:
        e = (a + s) * ext
        a = a * ext
    else:
        a = a * ext if norm_a else a
        e = a + (s * ext if norm_s else s)
    if (e < a).any() or not (np.isfinite(a).all() and np.isfinite(e).all()):
        raise ValueError("a slice ends before its start")
    lo, hi = np.zeros((n, 2), np.int64), extents.copy()
    lo[:, axes], hi[:, axes] = _round_half_away(a), _round_half_away(e)
    out = np.column_stack([lo, hi - lo])
    if (out < 0).any() or (out[:, 0] + out[:, 2] > extents[:, 0]).any() or \
            (out[:, 1] + out[:, 3] > extents[:, 1]).any():
        raise ValueError("a slice does not fit in its image")
    return out


def _round_half_away(v: np.ndarray) -> np.ndarray:
    """:func:`round_half_away` of every element (the same floor steps)."""
    return np.where(v >= 0, np.floor(v + 0.5), -np.floor(-v + 0.5)).astype(np.int64)


def _vec(v, n):
    if v is None:
        return None
    arr = np.asarray(v, dtype=np.float64).reshape(-1)
    if arr.size == 1 and n > 1:
        arr = np.repeat(arr, n)
    if arr.size != n:
        raise ValueError(f"expected {n} slice values (one per axis), got {arr.size}")
    return arr


def _checked(height, width, lo, hi):
    y, x = lo
    h, w = hi[0] - lo[0], hi[1] - lo[1]
    if y < 0 or x < 0 or h < 0 or w < 0 or y + h > height or x + w > width:
        raise ValueError(f"the slice [{y}:{y + h}, {x}:{x + w}] (rows, columns) does not fit in the "
                         f"{height}x{width} image")
    return y, x, h, w
