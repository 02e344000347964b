"""Helpers shared by the colour and filter operators: value ranges of types,
reading scalar arguments, channel-last checks and colour matrices.

Conversions to integer outputs round half up (``floor(x + 0.5)``) and saturate,
as DALI's colour and filter operators do.
"""

from __future__ import annotations

import cv2
import numpy as np

from stoker.operators.image.resample import to_dtype

__all__ = ["to_dtype", "type_range", "half_range", "scalar", "apply_affine", "hsv_matrix",
           "check_channels_last", "spatial_layout"]


def type_range(dtype: np.dtype) -> float:
    """1.0 for floating types, the largest value for integer types."""
    dtype = np.dtype(dtype)
    return float(np.iinfo(dtype).max) if dtype.kind in "iu" else 1.0


def half_range(dtype: np.dtype) -> float:
    """The middle grey of a type: 0.5 for floats, (max + 1) / 2 for integers (128 for uint8)."""
    dtype = np.dtype(dtype)
    return (float(np.iinfo(dtype).max) + 1.0) / 2.0 if dtype.kind in "iu" else 0.5


def scalar(op, args: dict, name: str, default: float | None = None) -> float:
    """A float argument of this sample (static or per-sample); a per-sample tensor must hold one value."""
    v = args.get(name)
    if v is None:
        return default
    arr = np.asarray(v, dtype=np.float64).reshape(-1)
    if arr.size != 1:
        raise op.error(f"argument '{name}' must be a scalar per sample, got {arr.size} values")
    return float(arr[0])


def check_channels_last(op, img: np.ndarray, layout: str, channels: tuple[int, ...]) -> None:
    """Colour operators work on channel-last samples (HWC, FHWC, DHWC) with ``channels`` channels."""
    if layout and layout[-1] != "C":
        raise op.error(f"expects a channel-last layout such as 'HWC', got '{layout}'")
    if img.ndim < 2 or img.shape[-1] not in channels:
        want = " or ".join(map(str, channels))
        raise op.error(f"expects {want} channels in the last dimension, got shape {img.shape}")


def apply_affine(img: np.ndarray, matrix: np.ndarray, offset: np.ndarray) -> np.ndarray:
    """``matrix @ pixel + offset`` for every pixel of a channel-last sample, in float32.

    One cv2.transform call (vectorized, no per-pixel Python)."""
    c = img.shape[-1]
    m = np.concatenate([np.asarray(matrix, np.float64).reshape(-1, c),
                        np.asarray(offset, np.float64).reshape(-1, 1)], axis=1)
    flat = np.ascontiguousarray(img).reshape(-1, 1, c)
    if flat.dtype != np.float32:
        flat = flat.astype(np.float32)
    out = cv2.transform(flat, m)
    return out.reshape(*img.shape[:-1], m.shape[0])


# RGB -> YIQ (NTSC). Hue rotates and saturation scales the chroma plane (I, Q) around the
# grey axis Y; the way back is the exact inverse, so hue 0 / saturation 1 is the identity.
_RGB2YIQ = np.array([[0.299, 0.587, 0.114],
                     [0.596, -0.274, -0.321],
                     [0.211, -0.523, 0.311]])
_YIQ2RGB = np.linalg.inv(_RGB2YIQ)


def hsv_matrix(hue: float = 0.0, saturation: float = 1.0, value: float = 1.0, bgr: bool = False) -> np.ndarray:
    """The 3x3 RGB matrix that shifts hue by ``hue`` degrees and scales saturation and value
    (DALI's linear approximation of an HSV adjustment, in YIQ space)."""
    a = np.deg2rad(hue)
    c, s = np.cos(a), np.sin(a)
    rot = np.array([[1.0, 0.0, 0.0], [0.0, c, s], [0.0, -s, c]])
    m = value * (_YIQ2RGB @ rot @ np.diag([1.0, saturation, saturation]) @ _RGB2YIQ)
    if bgr:
        p = np.eye(3)[::-1]
        m = p @ m @ p
    return m


def spatial_layout(layout: str, ndim: int) -> tuple[list[int], int | None]:
    """(spatial axes, channel axis) of a sample. Frames (F) and channels (C) are not spatial.
    Without a layout: 2 dims are HW, 3 dims HWC, 4 dims DHWC."""
    if layout and len(layout) == ndim:
        spatial = [i for i, ch in enumerate(layout) if ch not in "FC"]
        return spatial, (layout.index("C") if "C" in layout else None)
    if ndim <= 2:
        return list(range(ndim)), None
    return list(range(ndim - 1)), ndim - 1
