"""Helpers shared by the colour and filter operators: value ranges of types,
reading scalar arguments, channel-last checks and colour matrices.

Conversions to integer outputs round half up (``floor(x + 0.5)``) and saturate,
as DALI's colour and filter operators do.
"""

from __future__ import annotations

import cv2
import numpy as np

from stoker.operators.image.resample import to_dtype

__all__ = ["to_dtype", "type_range", "half_range", "scalar", "scalar_column", "apply_affine", "hsv_matrix",
           "hsv_matrices", "check_channels_last", "spatial_layout"]


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


def scalar_column(op, arg_inputs: dict, name: str, n: int, default: float) -> np.ndarray | None:
    """:func:`scalar` for every sample at once: a float64 ``(n,)`` array of the values
    ``scalar(op, op.sample_args(arg_inputs, i), name, default)`` gives (GPU planners read a batch's
    arguments with it instead of one ``sample_args`` per sample).

    Raises ValueError when some sample's value is refused (not numeric, not exactly one value):
    the caller then runs the per-sample rule to name that sample (``gpu_registry.plan_batch``).
    Returns None where one NumPy step cannot read the values (per-frame values, samples of
    differing shapes): the caller then plans sample by sample."""
    from stoker.operators.per_frame import is_per_frame

    if name not in arg_inputs:
        v = op.args.get(name)
        return np.full(n, default if v is None else scalar(op, op.args, name, default), np.float64)
    values = arg_inputs[name]
    if len(values) != n or is_per_frame(values):  # per-frame values: sample by sample
        return None
    try:
        arr = np.asarray(values)
    except ValueError:  # samples of differing shapes (() and (1,), or refused ones): sample by sample
        return None
    if arr.dtype.kind not in "biuf":
        raise ValueError(f"argument '{name}' takes numbers per sample, got {arr.dtype} values")
    if arr.size != n:
        raise ValueError(f"argument '{name}' takes one value per sample")
    # a float64 conversion of each value: what sample_value's item() and scalar's float() give
    return arr.reshape(n).astype(np.float64)


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


def hsv_matrices(hue: np.ndarray, saturation: np.ndarray, value: np.ndarray, bgr: bool = False) -> np.ndarray:
    """:func:`hsv_matrix` for a batch: ``(n, 3, 3)`` float64 from ``(n,)`` arrays of hue (degrees),
    saturation and value, bit for bit the per-sample matrices (the same ufuncs, and the same 3x3
    products: NumPy's matmul multiplies each matrix of a stack as it does a lone one)."""
    n = len(hue)
    a = np.deg2rad(np.asarray(hue, np.float64))
    c, s = np.cos(a), np.sin(a)
    rot = np.zeros((n, 3, 3))
    rot[:, 0, 0] = 1.0
    rot[:, 1, 1], rot[:, 1, 2], rot[:, 2, 1], rot[:, 2, 2] = c, s, -s, c
    diag = np.zeros((n, 3, 3))
    diag[:, 0, 0] = 1.0
    diag[:, 1, 1] = diag[:, 2, 2] = saturation
    m = np.asarray(value, np.float64)[:, None, None] * (_YIQ2RGB @ rot @ diag @ _RGB2YIQ)
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
