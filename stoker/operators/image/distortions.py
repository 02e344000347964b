"""Displacement distortions of HWC images: ``water``, ``sphere`` and ``jitter``.

Each output pixel reads the input at a displaced point (coordinates where pixel i spans
[i, i + 1), DALI's convention). Nearest neighbour takes the pixel that contains the point
(floor); linear interpolates between pixel centres (``cv2.remap``). Points outside the image
read ``fill_value``.

* ``water``: output (x, y) reads (x + ampl_x sin(freq_x y + phase_x),
  y + ampl_y cos(freq_y x + phase_y)).
* ``sphere``: the pixel centre p, relative to the image centre c, reads c + (|p - c| / r)(p - c)
  with r = max(H, W) // 2, bulging the middle outwards.
* ``jitter``: every pixel reads a random neighbour up to nDegree/2 pixels away in x and y; the
  shifts come from ``element_rng`` (Philox keyed by the sample's stream, one word per pixel), so
  the GPU kernel computes the same ones on the device.

``mask`` (per sample) 0 passes a sample through unchanged. The water and sphere maps depend only on
the image size and the arguments, so they are cached. ``water_waves_batch`` and
``sphere_constants_batch`` give the GPU kernel's tables for a whole batch at once, equal to the
per-sample functions' values.
"""

from __future__ import annotations

from functools import lru_cache

import cv2
import numpy as np

from stoker import types
from stoker.errors import arg_error
from stoker.operators.base import Operator
from stoker.operators.filters import element_rng
from stoker.operators.image.slice import c_cast_array
from stoker.operators.schema import Arg, Schema, register

_COMMON = [Arg("fill_value", "float", 0.0, doc="value of pixels whose source lies outside the image"),
           Arg("interp_type", "interp", types.INTERP_NN, doc="INTERP_NN (default) or INTERP_LINEAR"),
           Arg("mask", "int", 1, tensor=True, doc="1 applies the distortion to the sample, 0 passes it through")]
_CV_TYPES = (np.uint8, np.uint16, np.int16, np.float32)
_MAX_DEGREE = 2**31 - 1  # DALI's nDegree is an int32; it keeps every shift's span within below32's


class _Displacement(Operator):
    """Resamples each HWC image at the points given by :meth:`source_points`."""

    # (coordinate maps built in NumPy passes, each letting go of the GIL: base.Operator says why;
    # water, sphere and jitter after a decode ran 11-24 % faster in chain workers at 2 threads)
    prefers_worker_processes = True

    def setup(self):
        if self.args["interp_type"] not in (types.INTERP_NN, types.INTERP_LINEAR):
            raise arg_error(self.schema.name, "interp_type",
                            f"{self.args['interp_type']} is not supported; use INTERP_NN or INTERP_LINEAR")

    def output_layouts(self, input_layouts):
        return [input_layouts[0]]

    def source_points(self, h: int, w: int, ctx) -> tuple[np.ndarray, np.ndarray]:
        """Float32 (H, W) maps of the source x and y of every output pixel (corner-origin)."""
        raise NotImplementedError

    def nearest_map(self, h: int, w: int, ctx) -> np.ndarray:
        """The whole-pixel source of every output pixel as OpenCV's (H, W, 2) int16 map (see
        :func:`nearest_pixel_map`; images under 32,767 pixels a side)."""
        return nearest_pixel_map(*self.source_points(h, w, ctx))

    def run_sample(self, inputs, args, ctx):
        img = inputs[0]
        name = self.schema.name
        if img.ndim != 3:
            raise ValueError(f"{name}: expects HWC images, got shape {img.shape}")
        if not int(args.get("mask", 1)):
            return img
        h, w = img.shape[:2]
        if h == 0 or w == 0:
            return img.copy()
        fill = float(self.args["fill_value"])
        if self.args["interp_type"] == types.INTERP_NN:
            fast = self._nearest_opencv(img, h, w, fill, ctx)
            if fast is not None:
                return fast
            sx, sy = self.source_points(h, w, ctx)
            ix, iy = np.floor(sx).astype(np.intp), np.floor(sy).astype(np.intp)
            outside = (ix < 0) | (ix >= w) | (iy < 0) | (iy >= h)
            out = img[np.clip(iy, 0, h - 1), np.clip(ix, 0, w - 1)]
            if outside.any():
                out[outside] = c_cast_array(np.asarray(fill), img.dtype)
            return out
        sx, sy = self.source_points(h, w, ctx)
        src = img if img.dtype in _CV_TYPES else img.astype(np.float32)
        mx, my = sx - np.float32(0.5), sy - np.float32(0.5)  # to OpenCV's integer pixel centres
        nc = src.shape[2]
        parts = []
        for c0 in range(0, nc, 4):  # OpenCV remaps at most 4 channels with a constant border
            part = src if nc <= 4 else np.ascontiguousarray(src[..., c0:c0 + 4])
            k = part.shape[2]
            r = cv2.remap(part, mx, my, cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT, borderValue=(fill,) * k)
            parts.append(r.reshape(h, w, k))
        out = parts[0] if len(parts) == 1 else np.concatenate(parts, axis=-1)
        return out if out.dtype == img.dtype else c_cast_array(out, img.dtype)


    def _nearest_opencv(self, img, h: int, w: int, fill: float, ctx) -> np.ndarray | None:
        """The nearest-neighbour pick through OpenCV's remap on whole-pixel maps, or None where it
        does not apply (other types, more than 4 channels, a fill value the type cannot hold as
        it is). Why: NumPy's fancy indexing of every pixel, with its clips and masks, took ~1 ms
        for a 256x256 RGB image against OpenCV's ~0.1 ms; the same pixels are picked."""
        if img.dtype not in _CV_TYPES or not 1 <= img.shape[2] <= 4 or not img.flags.c_contiguous \
                or max(h, w) >= 32767:  # (checked before the maps: jitter's draw them from the sample's stream)
            return None
        value = c_cast_array(np.asarray(fill), img.dtype)
        if float(value) != fill:  # (OpenCV saturates a border value; the C cast wraps or truncates)
            return None
        pixels = self.nearest_map(h, w, ctx)
        out = cv2.remap(img, pixels, None, cv2.INTER_NEAREST, borderMode=cv2.BORDER_CONSTANT,
                        borderValue=(float(value),) * img.shape[2])
        return out.reshape(h, w, img.shape[2])  # (OpenCV drops a single channel axis)


def nearest_pixel_map(sx: np.ndarray, sy: np.ndarray) -> np.ndarray:
    """(H, W, 2) int16 whole-pixel coordinates (x, y) of the pixels containing the points (``sx``,
    ``sy``) (corner origin: floor), for ``cv2.remap`` (a CV_16SC2 map: each output pixel copies
    that input pixel, or takes the border value outside the image). Points outside the image,
    NaN included, become -1, so they stay outside. For images under 32,767 pixels a side (int16)."""
    h, w = sx.shape
    out = np.empty((h, w, 2), np.int16)
    for k, (v, n) in enumerate(((sx, w), (sy, h))):
        f = np.floor(v)
        f[~((f >= 0) & (f < n))] = -1  # (NaN fails both comparisons)
        out[..., k] = f
    return out


@lru_cache(maxsize=64)
def _cached_nearest_map(maps, *key) -> np.ndarray:
    """:func:`nearest_pixel_map` of ``maps(*key)`` (a cached map maker), read-only and cached."""
    pixels = nearest_pixel_map(*maps(*key))
    pixels.flags.writeable = False
    return pixels


@lru_cache(maxsize=64)
def water_waves(h: int, w: int, ax: float, ay: float, fx: float, fy: float, px: float,
                py: float) -> tuple[np.ndarray, np.ndarray]:
    """The water displacement, which is separable: float32 ``dx`` (H,), the x shift of every row,
    and ``dy`` (W,), the y shift of every column (read-only; the GPU kernel adds them to the pixel
    coordinates itself, so both devices use these very values)."""
    x = np.arange(w, dtype=np.float32)
    y = np.arange(h, dtype=np.float32)
    # float32 throughout: the NN pick floors these values, so their rounding matters at pixel edges
    dx = np.float32(ax) * np.sin(np.float32(fx) * y + np.float32(px))  # varies with the row
    dy = np.float32(ay) * np.cos(np.float32(fy) * x + np.float32(py))  # varies with the column
    dx.flags.writeable = dy.flags.writeable = False
    return dx, dy


def water_waves_batch(hs, ws, ax: float, ay: float, fx: float, fy: float, px: float,
                      py: float) -> tuple[np.ndarray, np.ndarray]:
    """The waves of samples of heights ``hs`` and widths ``ws`` at once: one float32 vector
    holding, sample after sample, ``water_waves(h, w, ...)``'s dx (H values) then dy (W values),
    and the int64 index of each sample's first value. The waves of a row (column) do not depend on
    the image size, so they are computed once for the tallest (widest) sample and each sample
    takes its prefix: the same values, element by element, as ``water_waves(h, w)``."""
    hs = np.asarray(hs, np.int64).reshape(-1)
    ws = np.asarray(ws, np.int64).reshape(-1)
    hmax = int(hs.max()) if hs.size else 0
    dx, dy = water_waves(hmax, int(ws.max()) if ws.size else 0, ax, ay, fx, fy, px, py)
    waves = np.concatenate([dx, dy])
    sizes = hs + ws
    first = np.zeros(sizes.size, np.int64)
    np.cumsum(sizes[:-1], out=first[1:])
    # position j within its sample's segment: dx[j] for j < H, else dy[j - H] (at hmax + j - H)
    j = np.arange(int(sizes.sum()), dtype=np.int64) - np.repeat(first, sizes)
    h = np.repeat(hs, sizes)
    return waves[np.where(j < h, j, hmax + j - h)], first


@lru_cache(maxsize=64)
def _water_maps(h, w, ax, ay, fx, fy, px, py):
    dx, dy = water_waves(h, w, ax, ay, fx, fy, px, py)
    x = np.arange(w, dtype=np.float32)
    y = np.arange(h, dtype=np.float32)
    sx = x[None, :] + dx[:, None]
    sy = y[:, None] + dy[None, :]
    sx.flags.writeable = sy.flags.writeable = False
    return sx, sy


@register
class Water(_Displacement):
    """Wave distortion ("under water")."""

    schema = Schema(
        name="water",
        legacy_name="Water",
        doc="Makes the image look under water: output pixel (x, y) reads the input at "
            "(x + ampl_x * sin(freq_x * y + phase_x), y + ampl_y * cos(freq_y * x + phase_y)).",
        args=[Arg("ampl_x", "float", 10.0, doc="amplitude of the wave in x (pixels)"),
              Arg("ampl_y", "float", 10.0, doc="amplitude of the wave in y (pixels)"),
              Arg("freq_x", "float", 2 * np.pi / 128, doc="frequency of the wave in x (radians per pixel)"),
              Arg("freq_y", "float", 2 * np.pi / 128, doc="frequency of the wave in y (radians per pixel)"),
              Arg("phase_x", "float", 0.0, doc="phase of the wave in x"),
              Arg("phase_y", "float", 0.0, doc="phase of the wave in y"), *_COMMON],
        devices=("cpu",),
    )

    def source_points(self, h, w, ctx):
        return _water_maps(h, w, *self._wave())

    def nearest_map(self, h, w, ctx):
        return _cached_nearest_map(_water_maps, h, w, *self._wave())  # (the waves are the operator's own)

    def _wave(self) -> tuple:
        a = self.args
        return a["ampl_x"], a["ampl_y"], a["freq_x"], a["freq_y"], a["phase_x"], a["phase_y"]


def sphere_constants(h: int, w: int) -> tuple[np.float32, np.float32, np.float32]:
    """``(r, cx, cy)`` of the sphere map of an H x W image, as float32: the radius
    max(H, W) // 2 (1 for a one-pixel image) and the image centre."""
    return np.float32(max(h, w) // 2 or 1), np.float32(w / 2), np.float32(h / 2)


def sphere_constants_batch(hs, ws) -> np.ndarray:
    """``sphere_constants`` of samples of heights ``hs`` and widths ``ws`` at once: float32
    (n, 3) rows ``(r, cx, cy)``."""
    hs = np.asarray(hs, np.int64).reshape(-1)
    ws = np.asarray(ws, np.int64).reshape(-1)
    r = np.maximum(hs, ws) // 2
    r[r == 0] = 1
    # w / 2 in float64 (exact), then rounded once to float32, as np.float32(w / 2)
    return np.stack([r.astype(np.float32), (ws / 2).astype(np.float32), (hs / 2).astype(np.float32)], axis=1)


@lru_cache(maxsize=64)
def _sphere_maps(h, w):
    r, cx, cy = sphere_constants(h, w)
    tx = (np.arange(w, dtype=np.float32) + np.float32(0.5) - cx)[None, :]
    ty = (np.arange(h, dtype=np.float32) + np.float32(0.5) - cy)[:, None]
    scale = np.sqrt(tx * tx + ty * ty) / r
    sx = scale * tx + cx
    sy = scale * ty + cy
    sx.flags.writeable = sy.flags.writeable = False
    return sx, sy


@register
class Sphere(_Displacement):
    """Spherical bulge distortion."""

    schema = Schema(
        name="sphere",
        legacy_name="Sphere",
        doc="Bulges the image as if seen on a sphere: a pixel centre p at distance d from the image centre c "
            "reads the input at c + (d / r) * (p - c), r = max(H, W) // 2 (the middle is magnified, the "
            "corners fall outside and get ``fill_value``).",
        args=list(_COMMON),
        devices=("cpu",),
    )

    def source_points(self, h, w, ctx):
        return _sphere_maps(h, w)

    def nearest_map(self, h, w, ctx):
        return _cached_nearest_map(_sphere_maps, h, w)  # (the maps depend on the size alone)


def jitter_offsets(key, n_degree: int, h: int, w: int) -> np.ndarray:
    """One sample's jitter: int64 (2, H, W), the x (``[0]``) and y (``[1]``) shift of every pixel,
    in [-n_degree // 2, n_degree // 2], from the sample's Philox key ``key``
    (``element_rng.sample_key(ctx.rng)``). Pixel p = y * W + x takes word p of draw 0
    (``element_rng.words``): its high 32 bits give the x shift and its low 32 bits the y shift, each
    ``below32(bits, 2 * half + 1) - half`` with half = n_degree // 2. The GPU kernel computes the same
    word of the same pixel on the device (``kernels/distortions.cu``), so a seed gives the same
    image on either device, and no shift is drawn on the host for it."""
    half = n_degree // 2
    if half == 0 or h * w == 0:
        return np.zeros((2, h, w), np.int64)
    words = element_rng.words(key, h * w)
    out = np.empty((2, h * w), np.int64)
    span = 2 * half + 1
    out[0] = element_rng.below32(words >> np.uint64(32), span)
    out[1] = element_rng.below32(words & np.uint64(0xFFFFFFFF), span)
    out -= half
    return out.reshape(2, h, w)


@register
class Jitter(_Displacement):
    """Random per-pixel displacement."""

    schema = Schema(
        name="jitter",
        legacy_name="Jitter",
        doc="Moves every pixel by a random whole number of pixels in [-nDegree // 2, nDegree // 2], "
            "independently in x and y (DALI implements it on the GPU only).",
        args=[Arg("nDegree", "int", 2, doc="size of the neighbourhood pixels are drawn from"), *_COMMON],
        devices=("cpu",),
        random=True,
    )

    def setup(self):
        super().setup()
        if not 0 <= self.args["nDegree"] <= _MAX_DEGREE:
            raise arg_error("jitter", "nDegree", f"must be in [0, {_MAX_DEGREE}], got {self.args['nDegree']}")

    def source_points(self, h, w, ctx):
        d = jitter_offsets(element_rng.sample_key(ctx.rng), self.args["nDegree"], h, w).astype(np.float32)
        # displaced pixel centres: the NN pick is the displaced pixel, linear reads it exactly
        sx = np.arange(w, dtype=np.float32)[None, :] + np.float32(0.5) + d[0]
        sy = np.arange(h, dtype=np.float32)[:, None] + np.float32(0.5) + d[1]
        return sx, sy
