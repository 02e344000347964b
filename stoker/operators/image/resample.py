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
  * only with ``STOKER_TORCH_RESIZE=1`` (off by default, so that the pixels do
    not depend on whether torch is installed): whole 8-bit images, triangle
    filter, shrinking, through torch's SIMD resampler
    (:mod:`stoker.operators.image.resample_torch`, 1.4-2.8x faster than
    Pillow), its edge rows and columns recomputed with clamped taps; and for
    8-bit regions with one axis whole (``resize_shorter``'s sub-pixel scale),
    torch on the whole axis, then Pillow on the other axis only.
  * plain 8-bit upscales with the triangle filter: OpenCV's bilinear (the same filter).
  * 2D images (also per frame) with the triangle, cubic or Lanczos filter:
    Pillow's convolution resampler (the same filters; GIL released) on an
    edge-padded cut of the source, so that its border handling equals edge
    repetition; 8-bit images for uint8 + triangle, else float32 planes.
  * everything else (volumes, Gaussian, no antialias when shrinking): a weight
    matrix per axis applied with ``np.tensordot`` (exact, slower).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import cv2
import numpy as np
from PIL import Image

from stoker import settings
from stoker.operators.image import resample_torch
from stoker.types import DALIInterpType

_A = -0.5  # Keys cubic parameter (Catmull-Rom)

# Pillow by default returns every image's memory to the allocator, so each resize
# faults in fresh pages for its intermediate and output images; keeping a few
# freed blocks measured about 2x faster for 500x375 -> 224x224. A user's own
# PILLOW_BLOCKS_MAX setting wins.
if settings.external_env("PILLOW_BLOCKS_MAX") is None and Image.core.get_blocks_max() == 0:
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


def axis_taps(n_in: int, n_out: int, lo: float, hi: float, interp: DALIInterpType,
              antialias: bool) -> tuple[np.ndarray, np.ndarray]:
    """Source indices (clamped to the image) and normalized weights, both (n_out, k):
    output pixel j of this axis is ``sum(w[j] * src[idx[j]])``. A GPU kernel can
    take these tables as they are."""
    return axis_taps_first(n_in, n_out, lo, hi, interp, antialias)[1:]


def axis_taps_first(n_in: int, n_out: int, lo: float, hi: float, interp: DALIInterpType,
                    antialias: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`axis_taps` plus, first, each output's unclamped first tap index (n_out,)."""
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
    return first, np.clip(taps, 0, n_in - 1), (w / total)


def weight_matrix(n_in: int, n_out: int, lo: float, hi: float, interp: DALIInterpType,
                  antialias: bool) -> np.ndarray:
    """Dense (n_out, n_in) float32 matrix of normalized resampling weights for one axis."""
    idx, w = axis_taps(n_in, n_out, lo, hi, interp, antialias)
    m = np.zeros((n_out, n_in), np.float64)
    np.add.at(m, (np.repeat(np.arange(n_out), idx.shape[1]), idx.ravel()), w.ravel())
    return m.astype(np.float32)


def nn_indices(n_in: int, n_out: int, lo: float, hi: float, innermost: bool = True) -> np.ndarray:
    """Source index of each output pixel for nearest-neighbour sampling: ``floor`` of the source
    position of the output pixel's centre, in float32 arithmetic as DALI's CPU resampler does it
    (the position of a pixel on the innermost spatial axis is computed from its index; on the
    outer axes it is stepped from the previous row's, so rounding accumulates). Where a position
    lands exactly on a pixel boundary, that rounding picks the side, so matching it keeps the
    same source pixels as DALI."""
    f32 = np.float32
    origin = f32(lo)
    scale = f32(f32(hi) - origin) / f32(n_out)  # (the extent and the step in float32, as DALI)
    if innermost:
        pos = origin + (np.arange(n_out, dtype=f32) + f32(0.5)) * scale
    else:  # a running float32 sum (np.cumsum accumulates in order, rounding at every step)
        steps = np.full(n_out, scale, f32)
        if n_out:
            steps[0] = origin + f32(0.5) * scale
        pos = np.cumsum(steps, dtype=f32)
    return np.clip(np.floor(pos).astype(np.int64), 0, n_in - 1)


def _nn_first_axis(roi_ext: list[int], out_size: list[int]) -> int:
    """The axis (innermost = 0, as DALI numbers them) that DALI's resampling setup processes
    first: the cheapest order found by its exhaustive search, costs summed in float32."""
    f32 = np.float32
    nd = len(roi_ext)
    best, best_cost = list(range(nd)), f32(1e30)
    for order in itertools.permutations(range(nd)):  # (the search's visiting order)
        size, total = list(roi_ext), f32(0)
        for a in order:
            size[a] = out_size[a]
            vol = math.prod(size)
            mul = f32(1.4) if a == 0 else f32(1.2) if a > 1 else f32(1.0)
            total = f32(total + f32(mul * f32(vol)) + f32(f32(vol) * f32(3)))
        if total < best_cost:
            best, best_cost = list(order), total
    return best[0]


def nn_tables(in_size: Sequence[int], out_size: Sequence[int], lo: Sequence[float],
              hi: Sequence[float]) -> list[np.ndarray]:
    """Source index along each spatial axis (outermost first) of a pure nearest-neighbour
    resize, as DALI's CPU kernel picks them.

    Positions are float32: ``origin + (j + 0.5) * step`` on the innermost axis, a running
    float32 sum on the others (see :func:`nn_indices`). DALI's setup first cuts the input to
    the pixels the region touches on every axis but the one it resamples first (the cheapest
    order), and the origin moves with that cut: ``origin - floor(origin)`` rounds the running
    sum differently from ``origin``, which decides the pixel where a position lands on a
    boundary."""
    f32 = np.float32
    nd = len(in_size)
    origin = [f32(v) for v in lo]
    step = [f32(f32(h) - o) / f32(n) for h, o, n in zip(hi, origin, out_size)]
    cut_lo, cut_ext = [0] * nd, list(in_size)
    for d in range(nd):
        a, b = (origin[d], f32(hi[d])) if origin[d] <= f32(hi[d]) else (f32(hi[d]), origin[d])
        first = min(max(int(math.floor(a)), 0), in_size[d])
        last = min(max(int(math.ceil(f32(b + f32(1)))), 0), in_size[d])
        cut_lo[d], cut_ext[d] = first, last - first
    first_pass = nd - 1 - _nn_first_axis(cut_ext[::-1], list(out_size)[::-1])
    tables = []
    for d in range(nd):
        start, ext = (0, in_size[d]) if d == first_pass else (cut_lo[d], cut_ext[d])
        o = f32(origin[d] - f32(start))
        n = out_size[d]
        if d < nd - 1:  # a running float32 sum (np.cumsum rounds at every step, in order)
            steps = np.full(n, step[d], f32)
            if n:
                steps[0] = o + f32(0.5) * step[d]
            pos = np.floor(np.cumsum(steps, dtype=f32))
        elif step[d] == f32(1):  # DALI's copy path: one rounding of the origin
            pos = np.floor(o + f32(0.5)) + np.arange(n, dtype=np.float64)
        else:
            pos = np.floor(o + (np.arange(n, dtype=f32) + f32(0.5)) * step[d])
        tables.append(start + np.clip(pos.astype(np.int64), 0, max(ext, 1) - 1))
    return tables


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
        tables = nn_tables([img.shape[ax] for ax in axes], out_size, lo, hi)
        for ax, idx in zip(axes, tables):
            out = np.take(out, idx, axis=ax)
        return to_dtype(out, dtype) if out.dtype != dtype else np.ascontiguousarray(out)
    if len(axes) == 2 and axes[0] > 0 and axes[1] == axes[0] + 1:
        # frames (FHWC ...): resample each 2D image on the fast path
        lead = img.shape[:axes[0]]
        flat = img.reshape(-1, *img.shape[axes[0]:])
        outs = [resample(f, [0, 1], out_size, lo, hi, min_filter=min_filter, mag_filter=mag_filter,
                         antialias=antialias, dtype=dtype) for f in flat]
        return np.stack(outs).reshape(*lead, *outs[0].shape)
    fast = _torch_path(img, axes, out_size, lo, hi, interps, antialias, dtype)
    if fast is not None:
        return fast
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
            out = np.take(out, nn_indices(img.shape[ax], out_size[d], lo[d], hi[d], d == len(axes) - 1),
                          axis=ax)
            continue
        n_in = img.shape[ax]
        idx, w = axis_taps(n_in, out_size[d], lo[d], hi[d], interp, antialias)
        if 4 * idx.shape[1] < n_in:  # few taps: gather and accumulate, O(taps) per output
            shape = [1] * out.ndim
            shape[ax] = out_size[d]
            acc = np.zeros(out.shape[:ax] + (out_size[d],) + out.shape[ax + 1:], np.float32)
            for t in range(idx.shape[1]):
                acc += np.take(out, idx[:, t], axis=ax) * w[:, t].astype(np.float32).reshape(shape)
            out = acc
        else:
            m = weight_matrix(n_in, out_size[d], lo[d], hi[d], interp, antialias)
            out = np.moveaxis(np.tensordot(m, out, axes=([1], [ax])), 0, ax)
    return np.ascontiguousarray(to_dtype(out, dtype))


_LINEAR = (DALIInterpType.INTERP_LINEAR, DALIInterpType.INTERP_TRIANGULAR)


def _torch_path(img, axes, out_size, lo, hi, interps, antialias, dtype):
    """Whole 8-bit images with the linear filter through torch's SIMD kernel (see
    :mod:`stoker.operators.image.resample_torch`); None when it does not apply."""
    if (axes != [0, 1] or img.ndim not in (2, 3) or img.dtype != np.uint8 or dtype != np.uint8
            or interps[0] not in _LINEAR or interps[1] not in _LINEAR):
        return None
    if img.ndim == 3 and img.shape[2] not in (1, 3, 4):
        return None
    shape = [float(img.shape[0]), float(img.shape[1])]
    if lo != [0.0, 0.0] or hi != shape:
        return None  # a region: taps outside it read the image, which torch cannot do
    shrinks = [shape[d] > out_size[d] for d in range(2)]
    if not any(shrinks) or (not antialias and any(shrinks)):
        return None  # plain upscales: OpenCV (below) is as exact and faster
    if not resample_torch.available():
        return None
    return resample_torch.resize_linear_u8(img, out_size, _linear_taps)


def _linear_taps(n_in: int, n_out: int):
    """Taps of the antialiased linear filter over a whole axis (the torch path's edge fix-up)."""
    return axis_taps_first(n_in, n_out, 0.0, float(n_in), DALIInterpType.INTERP_LINEAR, True)


def _pillow_path(img, axes, out_size, lo, hi, interps, antialias, dtype):
    """2D images through Pillow's resampler; None when it does not apply.

    uint8 with the triangle filter: 8-bit "L"/"RGB" images (fastest; the 8-bit
    intermediate costs at most one level). Otherwise: one float32 "F" image per
    channel (float intermediate, so overshooting filters such as cubic are not
    clipped between the passes)."""
    if axes != [0, 1] or img.ndim not in (2, 3):
        return None
    interps = [DALIInterpType.INTERP_LINEAR if i == DALIInterpType.INTERP_TRIANGULAR else i for i in interps]
    interp = interps[0]
    if len(set(interps)) != 1 or FILTERS[interp][2] is None:
        return None
    scales = [(hi[d] - lo[d]) / out_size[d] for d in range(2)]
    if not antialias and any(abs(s) > 1 for s in scales):
        return None  # Pillow always widens the filter when shrinking
    channels = 1 if img.ndim == 2 else img.shape[2]
    src, lo, hi = _unflip(img, list(lo), list(hi))
    eight_bit = img.dtype == np.uint8 and dtype == np.uint8 and interp == DALIInterpType.INTERP_LINEAR
    if eight_bit and all(s <= 1 for s in scales) and lo == [0.0, 0.0] and \
            hi == [float(img.shape[0]), float(img.shape[1])]:
        # plain upscale: OpenCV's bilinear is the same filter with the same border rule
        out = cv2.resize(np.ascontiguousarray(src), (out_size[1], out_size[0]), interpolation=cv2.INTER_LINEAR)
        return out.reshape(out_size[0], out_size[1], *img.shape[2:])
    if eight_bit:
        src, lo, hi, scales = _torch_whole_axis(src, lo, hi, scales, out_size)
    size = (out_size[1], out_size[0])
    method = FILTERS[interp][2]
    if eight_bit and channels == 3:
        mapped = _rgb_window(src, lo, hi, scales, FILTERS[interp][1])
        if mapped is not None:
            return _resize_mapped(*mapped, out_size, method)
    part, box = _window(src, lo, hi, scales, FILTERS[interp][1])
    if eight_bit and channels in (1, 3):
        plane = part[:, :, 0] if part.ndim == 3 and channels == 1 else part
        out = np.asarray(Image.fromarray(np.ascontiguousarray(plane)).resize(size, method, box=box))
        return out.reshape(out_size[0], out_size[1], *img.shape[2:])
    planes = [part] if part.ndim == 2 else [part[:, :, c] for c in range(channels)]
    outs = []
    for plane in planes:
        if eight_bit:
            outs.append(np.asarray(Image.fromarray(np.ascontiguousarray(plane)).resize(size, method, box=box)))
            continue
        f = np.ascontiguousarray(plane, dtype=np.float32)
        pim = Image.frombuffer("F", (f.shape[1], f.shape[0]), f, "raw", "F", 0, 1)
        outs.append(np.asarray(pim.resize(size, method, box=box)))
    out = np.stack(outs, axis=2) if img.ndim == 3 else outs[0]
    return out if out.dtype == dtype else np.ascontiguousarray(to_dtype(out, dtype))


def _torch_whole_axis(src, lo, hi, scales, out_size):
    """When one axis shrinks over its whole extent and the other has a fractional region (e.g.
    ``resize_shorter``, whose longer axis keeps the exact scale through a sub-pixel region),
    resample the whole axis with torch's kernel first; Pillow then runs only the other axis' pass,
    on fewer pixels. Returns the (possibly) updated source, region and scales."""
    whole = [lo[d] == 0.0 and hi[d] == float(src.shape[d]) for d in range(2)]
    shrink = [out_size[d] < src.shape[d] for d in range(2)]
    for d in range(2):
        if whole[d] and shrink[d] and not whole[1 - d] and resample_torch.available():
            size = [src.shape[0], src.shape[1]]
            size[d] = out_size[d]
            done = resample_torch.resize_linear_u8(src, size, _linear_taps)
            if done is None:  # a thin image: Pillow resamples both axes
                break
            src = done
            lo, hi, scales = list(lo), list(hi), list(scales)
            lo[d], hi[d], scales[d] = 0.0, float(out_size[d]), 1.0
            break
    return src, lo, hi, scales


def _unflip(img, lo, hi):
    """A flipped region (lo > hi) becomes a flipped source with an ordinary region."""
    src = img
    for d in range(2):
        if lo[d] > hi[d]:
            src = np.flip(src, axis=d)
            n = img.shape[d]
            lo[d], hi[d] = n - lo[d], n - hi[d]
    return src, lo, hi


def _window_geometry(shape, lo, hi, scales, support):
    """Where :func:`_window` cuts the source (a slice per axis), the edge rows and columns it adds
    ((before, after) per axis), and the region's box in the padded cut's coordinates."""
    cuts, pads, origin = [], [], []
    for d in range(2):
        if lo[d] == 0.0 and hi[d] == float(shape[d]) and scales[d] == 1.0:
            # an axis left as it is: no margin, so that Pillow skips its pass altogether
            cuts.append(slice(0, shape[d]))
            pads.append((0, 0))
            origin.append(0)
            continue
        reach = support * max(1.0, abs(scales[d])) + 2
        first = int(math.floor(min(lo[d], hi[d]) - reach))
        last = int(math.ceil(max(lo[d], hi[d]) + reach))
        a, b = max(first, 0), min(last, shape[d])
        if a >= b:  # region entirely outside: keep the nearest edge row/column
            a, b = (0, 1) if last <= 0 else (shape[d] - 1, shape[d])
        cuts.append(slice(a, b))
        pads.append((max(0, a - first), max(0, last - b)))
        origin.append(a - pads[-1][0])
    box = (lo[1] - origin[1], lo[0] - origin[0], hi[1] - origin[1], hi[0] - origin[0])
    return cuts, pads, box


def _window(src, lo, hi, scales, support):
    """The source cut to the region plus the filter's reach, edge pixels repeated where the
    reach leaves the image (so Pillow never renormalizes at a border, like DALI), and the
    region's box in the cut's coordinates."""
    cuts, pads, box = _window_geometry(src.shape, lo, hi, scales, support)
    part = np.ascontiguousarray(src[cuts[0], cuts[1]])
    if part.dtype not in (np.uint8, np.uint16, np.int16, np.float32, np.float64):
        part = part.astype(np.float32)
    padded = cv2.copyMakeBorder(part, pads[0][0], pads[0][1], pads[1][0], pads[1][1], cv2.BORDER_REPLICATE)
    if padded.ndim == 2 and part.ndim == 3:  # OpenCV drops a single channel axis
        padded = padded[:, :, None]
    return padded, box


def _rgb_window(src, lo, hi, scales, support):
    """:func:`_window` of an 8-bit RGB source, as a Pillow "RGB" image and the box, in one copy.

    Pillow keeps an RGB pixel in 4 bytes. ``Image.fromarray`` of the padded cut would copy it
    twice more: into a zero-filled image, then unpacking 3 bytes to 4 per pixel. Here one OpenCV
    pass writes the cut straight in Pillow's layout (RGB -> RGBA) into a buffer with room for the
    margins, and Pillow reads that buffer as it is (:func:`_map_padded`). The pixels Pillow reads
    are the same, so is its output. None when this Pillow will not map an RGB image (the caller
    then copies as usual)."""
    cuts, pads, box = _window_geometry(src.shape, lo, hi, scales, support)
    (top, bottom), (left, right) = pads
    h, w = cuts[0].stop - cuts[0].start, cuts[1].stop - cuts[1].start
    flat = np.empty((top + h + bottom + 1) * (left + w + right) * 4, np.uint8)  # (+1 row: _map_padded)
    buf = flat[:(top + h + bottom) * (left + w + right) * 4].reshape(top + h + bottom, left + w + right, 4)
    inner = buf[top:top + h, left:left + w]
    got = cv2.cvtColor(src[cuts[0], cuts[1]], cv2.COLOR_RGB2RGBA, dst=inner)
    if got.ctypes.data != inner.ctypes.data:  # OpenCV chose to allocate: keep the values
        inner[...] = got
    im = _map_padded(buf, (top, left), (h, w), pads)
    return None if im is None else (im, box)


def _map_padded(buf, at, hw, pads):
    """A Pillow "RGB" image over ``buf`` (rows, cols, 4) uint8, without a copy: the ``hw`` pixels
    at ``at`` plus ``pads`` ((top, bottom), (left, right)) around them, which are filled here with
    the edge rows and columns repeated (cv2.BORDER_REPLICATE; the corners repeat the corner pixel).
    ``buf`` must be C-contiguous with at least one row of allocated memory after it (Pillow checks
    that every mapped row, the last included, fits a whole row pitch). Mapped through
    ``core.map_buffer``, which ``Image.frombuffer`` calls for the modes whose layout it takes as is:
    Pillow's own "RGB" layout is 4 bytes a pixel. None when this Pillow refuses the mapping."""
    (top, bottom), (left, right) = pads
    (r, c), (h, w) = at, hw
    if r < top or c < left or r + h + bottom > buf.shape[0] or c + w + right > buf.shape[1] or \
            buf.dtype != np.uint8 or buf.ndim != 3 or buf.shape[2] != 4 or not buf.flags.c_contiguous:
        return None
    if top or bottom or left or right:
        # In place: OpenCV copies the source rows into the destination's inner part only where
        # they lie elsewhere (here they are that part), then fills the margins, with the GIL
        # released (NumPy's fill of the margin columns held the GIL and was 5x slower).
        outer = buf[r - top:r + h + bottom, c - left:c + w + right]
        got = cv2.copyMakeBorder(buf[r:r + h, c:c + w], top, bottom, left, right, cv2.BORDER_REPLICATE, dst=outer)
        if got.ctypes.data != outer.ctypes.data:  # OpenCV chose to allocate: keep the values
            outer[...] = got
    size = (left + w + right, top + h + bottom)
    pitch = buf.strides[0]
    base = buf.base if isinstance(buf.base, np.ndarray) and buf.base.flags.c_contiguous else buf
    offset = buf.ctypes.data - base.ctypes.data + (r - top) * pitch + (c - left) * 4
    try:
        core = Image.core.map_buffer(base, size, "raw", offset, ("RGB", pitch, 1))
    except Exception:  # noqa: BLE001 - a Pillow without this mapping: the copying path
        return None
    if core.mode != "RGB" or core.size != size:
        return None
    im = Image.new("RGB", (0, 0))._new(core)  # (as Image.frombuffer wraps a mapped buffer)
    im.readonly = 1
    return im


def _resize_mapped(im, box, out_size, method):
    return _rgb_array(im.resize((out_size[1], out_size[0]), method, box=box))


def _rgb_array(im) -> np.ndarray:
    """A Pillow "RGB" image as an (h, w, 3) uint8 array. ``np.asarray(im)`` packs it to 3 bytes a pixel
    in 64 KB chunks from a Python loop and joins them (a copy with the GIL held); here Pillow pastes
    it into a 4-byte-per-pixel buffer mapped as an RGB image (a row copy, GIL released) and OpenCV
    drops the fourth byte (RGBA -> RGB, GIL released): 2.5x faster, the same values."""
    w, h = im.size
    flat = np.empty((h + 1) * w * 4, np.uint8)  # (+1 row: see _map_padded)
    try:
        core = Image.core.map_buffer(flat, (w, h), "raw", 0, ("RGB", 0, 1))
        if core.mode != "RGB" or core.size != (w, h):
            raise ValueError(core.mode)
        core.paste(im.im, (0, 0, w, h))
    except Exception:  # noqa: BLE001 - a Pillow without this mapping: its own copy
        return np.asarray(im).reshape(h, w, 3)
    return cv2.cvtColor(flat[:h * w * 4].reshape(h, w, 4), cv2.COLOR_RGBA2RGB)


def padded_rgb_plan(in_hw, out_size, lo, hi, *, min_filter, mag_filter, antialias, dtype=None):
    """For the fused decode + resize (:mod:`stoker.pipeline.padded_decode`): where :func:`resample`
    of an 8-bit RGB image of ``in_hw`` (height, width) with these arguments goes through
    :func:`_rgb_window` over the whole image, ``(pads, box)``: the edge rows and columns that path
    adds ((top, bottom), (left, right)) and the box Pillow resamples. None for every other path."""
    if np.dtype(dtype or np.uint8) != np.uint8 or resample_torch.available():
        return None
    lo, hi = [float(v) for v in lo], [float(v) for v in hi]
    scales = [(hi[d] - lo[d]) / out_size[d] for d in range(2)]
    interps = [min_filter if abs(scales[d]) > 1 else mag_filter for d in range(2)]
    if any(i not in _LINEAR for i in interps) or any(lo[d] > hi[d] for d in range(2)):
        return None
    if not antialias and any(abs(sc) > 1 for sc in scales):
        return None
    whole = lo == [0.0, 0.0] and hi == [float(in_hw[0]), float(in_hw[1])]
    if whole and all(sc <= 1 for sc in scales):
        return None  # OpenCV's bilinear (_pillow_path)
    cuts, pads, box = _window_geometry(tuple(in_hw), lo, hi, scales, FILTERS[DALIInterpType.INTERP_LINEAR][1])
    if any(cuts[d] != slice(0, in_hw[d]) for d in range(2)):
        return None
    return pads, box


def resample_padded(buf, at, hw, pads, box, out_size) -> np.ndarray:
    """:func:`resample` of the RGB image ``buf[r:r + h, c:c + w, :3]`` (``at`` = (r, c), ``hw`` = (h, w)),
    for a plan of :func:`padded_rgb_plan` (``pads``, ``box``), written in place into ``buf`` (4 bytes a
    pixel, with room for the pads around it and one row past its end): the same pixels as
    resample() of a copy. Fills the pads. None when Pillow will not map the buffer."""
    im = _map_padded(buf, at, hw, pads)
    if im is None:
        return None
    return _resize_mapped(im, box, out_size, FILTERS[DALIInterpType.INTERP_LINEAR][2])
