"""Separable resampling on the CPU with DALI's numerics.

Model (measured against DALI's CPU ``resize``): output pixel ``j`` on an axis
samples the source at ``s = lo + (j + 0.5) * scale`` with ``scale = (hi - lo) /
out``; source pixel ``i`` (centre ``i + 0.5``) gets weight ``f((i + 0.5 - s) /
fs)``, normalized over the taps, with ``fs = max(1, |scale|)`` when
antialiasing a downscale and 1 otherwise. Taps outside the image repeat the
edge pixel. Filters: triangle (LINEAR, TRIANGULAR), Keys cubic a=-0.5
(CUBIC), Lanczos-3 (LANCZOS3), exp(-4x^2) on |x| < 1 (GAUSSIAN); NN picks ``floor(s)``. Integer
outputs round half up and saturate.

Paths, fastest first (all follow the model above):
  * NN: integer gathers.
  * uint8 images with 1 or 3 channels: Pillow's convolution resampler (which
    uses the same filters, fixed point, GIL released) on an edge-padded copy,
    so that its border handling equals edge repetition.
  * everything else: a weight matrix per axis applied with ``np.tensordot``
    (float32 BLAS; exact, slower).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence

import cv2
import numpy as np
from PIL import Image

from stoker.types import DALIInterpType

_A = -0.5  # Keys cubic parameter (Catmull-Rom)

# Pillow by default returns every image's memory to the allocator, so each resize
# faults in fresh pages for its intermediate and output images; keeping a few
# freed blocks measured about 2x faster for 500x375 -> 224x224. A user's own
# PILLOW_BLOCKS_MAX setting wins.
if "PILLOW_BLOCKS_MAX" not in os.environ and Image.core.get_blocks_max() == 0:
    Image.core.set_blocks_max(8)


def _triangle(x):
    return np.maximum(0.0, 1.0 - np.abs(x))


def _cubic(x):
    x = np.abs(x)
    near = ((_A + 2) * x - (_A + 3)) * x * x + 1
    far = ((_A * x - 5 * _A) * x + 8 * _A) * x - 4 * _A
    return np.where(x < 1, near, np.where(x < 2, far, 0.0))


def _lanczos3(x):
    return np.where(np.abs(x) < 3, np.sinc(x) * np.sinc(x / 3), 0.0)


def _gaussian(x):
    # exp(-4 x^2) cut at |x| = 1 (sigma = 1/sqrt(8)): fitted to DALI's output, exact up to rounding
    return np.where(np.abs(x) < 1, np.exp(-4.0 * x * x), 0.0)


# filter, support radius, Pillow equivalent (None: no Pillow path)
FILTERS = {
    DALIInterpType.INTERP_LINEAR: (_triangle, 1.0, Image.Resampling.BILINEAR),
    DALIInterpType.INTERP_TRIANGULAR: (_triangle, 1.0, Image.Resampling.BILINEAR),
    DALIInterpType.INTERP_CUBIC: (_cubic, 2.0, Image.Resampling.BICUBIC),
    DALIInterpType.INTERP_LANCZOS3: (_lanczos3, 3.0, Image.Resampling.LANCZOS),
    DALIInterpType.INTERP_GAUSSIAN: (_gaussian, 1.0, None),
}


def axis_filter(interp: DALIInterpType, scale: float, antialias: bool) -> tuple:
    """(filter, support, filter_scale) used on an axis whose source step per output pixel is ``scale``."""
    func, support, _ = FILTERS[interp]
    widen = abs(scale) > 1 and antialias
    return func, support, abs(scale) if widen else 1.0


def weight_matrix(n_in: int, n_out: int, lo: float, hi: float, interp: DALIInterpType,
                  antialias: bool) -> np.ndarray:
    """Dense (n_out, n_in) float32 matrix of normalized resampling weights for one axis."""
    scale = (hi - lo) / n_out
    func, support, fs = axis_filter(interp, scale, antialias)
    centres = lo + (np.arange(n_out) + 0.5) * scale
    radius = support * fs
    k = int(math.ceil(2 * radius)) + 2
    first = np.floor(centres - radius).astype(np.int64)
    taps = first[:, None] + np.arange(k)[None, :]
    w = func((taps + 0.5 - centres[:, None]) / fs)
    total = w.sum(1, keepdims=True)
    total[total == 0] = 1.0
    w = w / total
    m = np.zeros((n_out, n_in), np.float64)
    rows = np.repeat(np.arange(n_out), k)
    np.add.at(m, (rows, np.clip(taps, 0, n_in - 1).ravel()), w.ravel())
    return m.astype(np.float32)


def nn_indices(n_in: int, n_out: int, lo: float, hi: float) -> np.ndarray:
    """Source index of each output pixel for nearest-neighbour sampling."""
    scale = (hi - lo) / n_out
    idx = np.floor(lo + (np.arange(n_out) + 0.5) * scale).astype(np.int64)
    return np.clip(idx, 0, n_in - 1)


def to_dtype(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Float result to ``dtype``: integers round half up and saturate."""
    dtype = np.dtype(dtype)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return np.clip(np.floor(x + 0.5), info.min, info.max).astype(dtype)
    return x.astype(dtype, copy=False)


def resample(img: np.ndarray, spatial_axes: Sequence[int], out_size: Sequence[int],
             lo: Sequence[float], hi: Sequence[float], *, min_filter: DALIInterpType,
             mag_filter: DALIInterpType, antialias: bool, dtype: np.dtype | None = None) -> np.ndarray:
    """Resamples the ``spatial_axes`` of ``img`` to ``out_size`` over the source
    intervals ``[lo, hi)`` (see the module docstring). Other axes (channels,
    frames) pass through. Returns ``dtype`` (default: the input's)."""
    dtype = np.dtype(dtype or img.dtype)
    axes = list(spatial_axes)
    lo, hi = list(map(float, lo)), list(map(float, hi))
    interps = []
    for d in range(len(axes)):
        scale = (hi[d] - lo[d]) / out_size[d]
        interps.append(min_filter if abs(scale) > 1 else mag_filter)
    if all(i == DALIInterpType.INTERP_NN for i in interps):
        out = img
        for d, ax in enumerate(axes):
            out = np.take(out, nn_indices(img.shape[ax], out_size[d], lo[d], hi[d]), axis=ax)
        return to_dtype(out, dtype) if out.dtype != dtype else np.ascontiguousarray(out)
    if len(axes) == 2 and axes[0] > 0 and axes[1] == axes[0] + 1 and img.dtype == np.uint8 == dtype:
        # frames (FHWC ...): resample each 2D image on the fast path
        lead = img.shape[:axes[0]]
        flat = img.reshape(-1, *img.shape[axes[0]:])
        outs = [resample(f, [0, 1], out_size, lo, hi, min_filter=min_filter, mag_filter=mag_filter,
                         antialias=antialias, dtype=dtype) for f in flat]
        return np.stack(outs).reshape(*lead, *outs[0].shape)
    fast = _pillow_path(img, axes, out_size, lo, hi, interps, antialias, dtype)
    if fast is not None:
        return fast
    return _matrix_path(img, axes, out_size, lo, hi, interps, antialias, dtype)


def _matrix_path(img, axes, out_size, lo, hi, interps, antialias, dtype):
    out = img.astype(np.float32)
    # cheapest order: shrink first
    order = sorted(range(len(axes)), key=lambda d: out_size[d] / max(1, img.shape[axes[d]]))
    for d in order:
        ax = axes[d]
        interp = interps[d]
        if interp == DALIInterpType.INTERP_NN:
            out = np.take(out, nn_indices(img.shape[ax], out_size[d], lo[d], hi[d]), axis=ax)
            continue
        m = weight_matrix(img.shape[ax], out_size[d], lo[d], hi[d], interp, antialias)
        out = np.moveaxis(np.tensordot(m, out, axes=([1], [ax])), 0, ax)
    return np.ascontiguousarray(to_dtype(out, dtype))


def _pillow_path(img, axes, out_size, lo, hi, interps, antialias, dtype):
    """uint8 HW / HWC(1, 3 channels) with one Pillow filter; None when it does not apply."""
    if img.dtype != np.uint8 or dtype != np.uint8 or axes != [0, 1] or img.ndim not in (2, 3):
        return None
    channels = 1 if img.ndim == 2 else img.shape[2]
    if any(i not in (DALIInterpType.INTERP_LINEAR, DALIInterpType.INTERP_TRIANGULAR) for i in interps):
        return None  # Pillow keeps the intermediate in 8 bits: fine for the triangle, not for filters that overshoot
    interp = interps[0]
    if interp == DALIInterpType.INTERP_TRIANGULAR:
        interp = DALIInterpType.INTERP_LINEAR
    scales = [(hi[d] - lo[d]) / out_size[d] for d in range(2)]
    if not antialias and any(abs(s) > 1 for s in scales):
        return None  # Pillow always widens the filter when shrinking
    if channels not in (1, 3):
        planes = [_pillow_path(np.ascontiguousarray(img[:, :, c]), axes, out_size, lo, hi, interps,
                               antialias, dtype) for c in range(channels)]
        return np.stack(planes, axis=2)
    src = img
    lo, hi = list(lo), list(hi)
    for d in range(2):
        if lo[d] > hi[d]:  # a flipped region: flip the source instead
            src = np.flip(src, axis=d)
            n = img.shape[d]
            lo[d], hi[d] = n - lo[d], n - hi[d]
    if interp == DALIInterpType.INTERP_LINEAR and all(s <= 1 for s in scales) and \
            lo == [0.0, 0.0] and hi == [float(img.shape[0]), float(img.shape[1])]:
        # plain upscale: OpenCV's bilinear is the same filter with the same border rule
        out = cv2.resize(np.ascontiguousarray(src), (out_size[1], out_size[0]), interpolation=cv2.INTER_LINEAR)
        return out.reshape(out_size[0], out_size[1], *img.shape[2:])
    support = FILTERS[interp][1]
    # Cut the source to the window plus the filter's reach, then repeat edge pixels where the
    # reach leaves the image: Pillow then never renormalizes at a border, like DALI.
    cuts, pads, origin = [], [], []
    for d in range(2):
        reach = support * max(1.0, abs(scales[d])) + 2
        first = int(math.floor(min(lo[d], hi[d]) - reach))
        last = int(math.ceil(max(lo[d], hi[d]) + reach))
        a, b = max(first, 0), min(last, img.shape[d])
        if a >= b:  # window entirely outside: keep the nearest edge row/column
            a, b = (0, 1) if last <= 0 else (img.shape[d] - 1, img.shape[d])
        cuts.append(slice(a, b))
        pads.append((max(0, a - first), max(0, last - b)))
        origin.append(a - pads[-1][0])
    part = np.ascontiguousarray(src[cuts[0], cuts[1]])
    padded = cv2.copyMakeBorder(part, pads[0][0], pads[0][1], pads[1][0], pads[1][1], cv2.BORDER_REPLICATE)
    if padded.ndim == 3 and channels == 1:
        padded = padded[:, :, 0]
    pim = Image.fromarray(padded)
    box = (lo[1] - origin[1], lo[0] - origin[0], hi[1] - origin[1], hi[0] - origin[0])
    out = np.asarray(pim.resize((out_size[1], out_size[0]), FILTERS[interp][2], box=box))
    return out.reshape(out_size[0], out_size[1], *img.shape[2:])
