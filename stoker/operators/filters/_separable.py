"""Separable convolution of a sample along its spatial axes, with OpenCV.

Borders mirror without repeating the edge pixel (``dcb|abcd|cba``, OpenCV's
BORDER_REFLECT_101), as DALI's convolution filters do. Arithmetic is float32.
Frames (F) and channels (C) are never filtered across.
"""

from __future__ import annotations

from collections.abc import Sequence

import cv2
import numpy as np

_BORDER = cv2.BORDER_REFLECT_101
_MAX_CHANNELS = 128  # cv2 binds at most this many interleaved values as channels; more go in slices
_CV_INPUT_TYPES = {np.dtype(t) for t in (np.uint8, np.uint16, np.int16, np.float32)}
_ONE = np.ones(1, np.float32)


def as_filter_input(x: np.ndarray) -> np.ndarray:
    """The sample as a contiguous array OpenCV filters directly (others go to float32)."""
    if x.dtype not in _CV_INPUT_TYPES:
        x = x.astype(np.float32)
    return np.ascontiguousarray(x)


def filter_axis(x: np.ndarray, axis: int, kernel: np.ndarray) -> np.ndarray:
    """Convolves ``x`` with the 1D ``kernel`` along ``axis``; returns float32 of the same shape."""
    shape = x.shape
    outer = int(np.prod(shape[:axis], dtype=np.int64))
    n = shape[axis]
    inner = int(np.prod(shape[axis + 1:], dtype=np.int64))
    k = np.asarray(kernel, np.float32)
    if inner == 1:  # the last axis: rows of a single-channel image
        out = cv2.sepFilter2D(x.reshape(outer, n), cv2.CV_32F, k, _ONE, borderType=_BORDER)
    elif inner <= _MAX_CHANNELS:  # the axis as image columns, what follows it as channels
        out = cv2.sepFilter2D(x.reshape(outer, n, inner), cv2.CV_32F, k, _ONE, borderType=_BORDER)
    else:  # the axis as image rows, one call per outer slice
        v = x.reshape(outer, n, inner)
        out = np.empty(v.shape, np.float32)
        for o in range(outer):
            out[o] = cv2.sepFilter2D(v[o], cv2.CV_32F, _ONE, k, borderType=_BORDER)
    return out.reshape(shape)


def separable_filter(x: np.ndarray, spatial: Sequence[int], channel: int | None,
                     kernels: Sequence[np.ndarray]) -> np.ndarray:
    """Convolves ``x`` (made by :func:`as_filter_input`) with ``kernels[i]`` along ``spatial[i]``;
    float32 out. Images (HW, HWC) take one cv2.sepFilter2D call."""
    spatial = list(spatial)
    if (len(spatial) == 2 and spatial == [0, 1] and x.ndim in (2, 3)
            and (x.ndim == 2 or (channel == 2 and x.shape[2] <= _MAX_CHANNELS))):
        return cv2.sepFilter2D(x, cv2.CV_32F, np.asarray(kernels[1], np.float32),
                               np.asarray(kernels[0], np.float32), borderType=_BORDER).reshape(x.shape)
    out = x
    for axis, k in zip(spatial, kernels):
        if len(k) > 1:
            out = filter_axis(out, axis, k)
    return out if out.dtype == np.float32 else out.astype(np.float32)


def per_axis(op, values, n: int, name: str) -> list:
    """One value per spatial axis from one value or ``n`` values (outermost axis first)."""
    vals = np.asarray(values if values is not None else [], np.float64).reshape(-1).tolist()
    if len(vals) == 1:
        return vals * n
    if len(vals) != n:
        raise op.error(f"argument '{name}' needs 1 or {n} values (one per spatial axis), got {len(vals)}")
    return vals
