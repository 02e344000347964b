"""Kernels of the augmentation suite: a 3x3 filter with a per-sample kernel (``sharpness``),
per-channel histogram equalization (``equalize``), and lookup-table versions of the pointwise
augmentations (``contrast``, ``auto_contrast``, ``solarize``, ``solarize_add``).

A pointwise op on uint8 data is a function of the value alone, so it is computed once for the
256 values, with the same float32 arithmetic as the operator composition DALI uses, and applied
with ``cv2.LUT``: the same results at a fraction of the cost of whole-image float arithmetic.
Internal (the leading underscore keeps them out of ``fn``); registered when :mod:`stoker.auto_aug`
is imported."""

from __future__ import annotations

import cv2
import numpy as np

from stoker.operators.base import Operator
from stoker.operators.schema import Schema, register
from stoker.operators.tensor.basic import convert

_VALUES = np.arange(256, dtype=np.float32)
LUMA = np.array([0.299, 0.587, 0.114], dtype=np.float32)  # ITU-R 601 weights, as PIL's grey level


# --- the tables, as pure functions of the statistics they need (shared with the GPU path, whose
# kernels (kernels/auto_aug.cu) compute the same numbers from per-channel histograms) -----------

def contrast_table(sums, pixels: int, factor) -> np.ndarray:
    """contrast's (256,) uint8 table for a frame of ``pixels`` pixels whose 3 channels sum to
    ``sums``: as reductions.mean (exact sum, float64 division, float32 result) and reductions.sum
    of the float32 luma-weighted means (in float64), then center + (x - center) * factor in
    float32, cast as ``convert`` casts."""
    means = (np.asarray(sums, np.float64) / pixels).astype(np.float32)
    center = np.float32((means * LUMA).astype(np.float64).sum())
    return convert(center + (_VALUES - center) * np.float32(factor), np.uint8)


def auto_contrast_table(lo, hi) -> np.ndarray:
    """auto_contrast's (256, channels) uint8 table from each channel's smallest and largest value
    (uint8 arrays): (x - lo) (wrapping in uint8) * (255 / (hi - lo)) in float32 where hi > lo,
    x * 1 where the channel is flat."""
    lo, hi = np.asarray(lo, np.uint8), np.asarray(hi, np.uint8)
    spread = (hi - lo).astype(np.float32)
    scale = np.where(spread > 0, np.float32(255) / np.where(spread > 0, spread, 1), np.float32(1))
    shifted = (np.arange(256)[:, None] - np.where(spread > 0, lo, 0)[None, :]).astype(np.uint8)
    return convert(shifted.astype(np.float32) * scale.astype(np.float32)[None, :], np.uint8)


def equalize_table(hist) -> np.ndarray:
    """What OpenCV's equalizeHist maps each value to, from a channel's (256,) histogram (not empty):
    i0 the first nonzero bin; a channel of one value keeps it; else scale = 255.f / (pixels -
    hist[i0]) and v > i0 maps to saturate(rint((float)(hist[i0 + 1] + ... + hist[v]) * scale)),
    v <= i0 to 0 (values below i0 do not occur). The CPU operator calls cv2.equalizeHist itself;
    this is the GPU tables' reference."""
    hist = np.asarray(hist, np.int64).reshape(256)
    i0 = int(np.flatnonzero(hist)[0])
    total = int(hist.sum())
    if hist[i0] == total:
        return np.full(256, i0, np.uint8)
    scale = np.float32(255) / np.float32(total - hist[i0])
    # the counts as float32: exact below 2**24, beyond rounded to nearest as C's int -> float is
    above = (np.cumsum(hist) - hist[i0]).astype(np.float32)
    table = np.clip(np.rint(above * scale), 0, 255).astype(np.uint8)
    table[:i0 + 1] = 0
    return table


def solarize_table(threshold) -> np.ndarray:
    """solarize's (256,) uint8 table: x where x < threshold (compared as NumPy compares float32
    values with the threshold's type), else 255 - x."""
    return np.where(_VALUES < np.asarray(threshold).reshape(()), _VALUES, 255 - _VALUES).astype(np.uint8)


def solarize_add_table(shift) -> np.ndarray:
    """solarize_add's (256,) uint8 table: x + shift (as uint8, wrapping) where x < 128, else x."""
    v = np.arange(256, dtype=np.uint8)
    return np.where(v < 128, v + np.asarray(shift).astype(np.uint8).reshape(()), v).astype(np.uint8)


def _frames(img: np.ndarray, name: str) -> list[np.ndarray]:
    """HWC (or HW) images as one frame, FHWC videos as their frames."""
    if img.dtype != np.uint8:
        raise ValueError(f"{name}: expected uint8 images, got {img.dtype}")
    if img.ndim in (2, 3):
        return [img]
    if img.ndim == 4:
        return list(img)
    raise ValueError(f"{name}: expected HWC images or FHWC videos, got shape {img.shape}")


@register
class Filter3x3(Operator):
    """Correlates each channel with a 3x3 kernel (border: reflect 101), rounding back to uint8."""

    schema = Schema(
        name="_auto_aug.filter",
        doc="3x3 filter on uint8 HWC/FHWC data (the sharpness augmentation); inputs: data, and each "
            "sample's 3x3 float kernel (a second input, as DALI's filter).",
        inputs=(2, 2),
    )

    def output_layouts(self, input_layouts):
        return [input_layouts[0]]

    def run_sample(self, inputs, args, ctx):
        img, kernel = inputs
        kernel = np.asarray(kernel, np.float32).reshape(3, 3)
        out = []
        for f in _frames(img, "sharpness"):
            acc = cv2.filter2D(f.astype(np.float32), -1, kernel, borderType=cv2.BORDER_REFLECT_101)
            # DALI's filter rounds halves to even here (measured), unlike cast's halves away from zero
            out.append(np.clip(np.rint(acc), 0, 255).astype(np.uint8).reshape(f.shape))
        return out[0] if img.ndim in (2, 3) else np.stack(out)


@register
class Equalize(Operator):
    """Histogram equalization of each channel of uint8 images (OpenCV's equalizeHist)."""

    schema = Schema(name="_auto_aug.equalize", doc="Per-channel histogram equalization of uint8 HWC/FHWC data.")

    def run_sample(self, inputs, args, ctx):
        img, = inputs
        out = []
        for f in _frames(img, "equalize"):
            if f.ndim == 2:
                out.append(cv2.equalizeHist(np.ascontiguousarray(f)))
            else:
                out.append(np.stack([cv2.equalizeHist(np.ascontiguousarray(f[..., c]))
                                     for c in range(f.shape[-1])], axis=-1))
        return out[0] if img.ndim in (2, 3) else np.stack(out)


def _lut(frame: np.ndarray, table: np.ndarray) -> np.ndarray:
    """``table[frame]`` for a uint8 frame; ``table`` is (256,) or (256, channels)."""
    if table.ndim == 1 or frame.ndim == 2:
        return cv2.LUT(frame, table.reshape(256)) if frame.shape[-1] <= 4 or frame.ndim == 2 else table[frame]
    if frame.shape[-1] <= 4:
        return cv2.LUT(frame, np.ascontiguousarray(table.reshape(1, 256, -1)))
    return np.take_along_axis(table, frame.reshape(-1, frame.shape[-1]).astype(np.intp), 0).reshape(frame.shape)


def _map_frames(img: np.ndarray, name: str, make_table) -> np.ndarray:
    # (cv2.LUT drops the channel axis of one-channel HWC frames: the frame's shape is kept)
    out = [_lut(f, make_table(f)).reshape(f.shape) for f in _frames(img, name)]
    return out[0] if img.ndim in (2, 3) else np.stack(out)


class _Pointwise(Operator):
    def output_layouts(self, input_layouts):
        return [input_layouts[0]]


@register
class Contrast(_Pointwise):
    """PIL-style contrast: values move away from (factor > 1) or towards the frame's mean grey level."""

    schema = Schema(name="_auto_aug.contrast", inputs=(2, 2),
                    doc="center + (x - center) * factor, center the luma-weighted mean of the channel means "
                        "(HWC RGB uint8; inputs: data, per-sample factor).")

    def run_sample(self, inputs, args, ctx):
        img, factor = inputs
        factor = np.float32(np.asarray(factor).reshape(()))

        def table(frame):
            if frame.ndim != 3 or frame.shape[-1] != 3:
                raise ValueError(f"contrast: expected RGB frames (HWC with 3 channels), got shape {frame.shape}")
            # OpenCV sums uint8 in float64, exact below 2**53
            return contrast_table(cv2.sumElems(frame)[:3], frame.size // 3, factor)

        return _map_frames(img, "contrast", table)


@register
class AutoContrast(_Pointwise):
    """Stretches each channel of each frame to [0, 255] (flat channels stay)."""

    schema = Schema(name="_auto_aug.auto_contrast", doc="Per-channel min-max stretch of uint8 HWC/FHWC data.")

    def run_sample(self, inputs, args, ctx):
        img, = inputs

        def table(frame):
            planes = cv2.split(frame) if frame.ndim == 3 and frame.shape[-1] <= 4 else None
            if planes is not None:
                ext = [cv2.minMaxLoc(p)[:2] for p in planes]
                lo, hi = np.array([e[0] for e in ext], np.uint8), np.array([e[1] for e in ext], np.uint8)
            else:
                flat = frame.reshape(-1, frame.shape[-1]) if frame.ndim == 3 else frame.reshape(-1, 1)
                lo, hi = flat.min(axis=0), flat.max(axis=0)
            return auto_contrast_table(lo, hi)

        return _map_frames(img, "auto_contrast", table)


@register
class Solarize(_Pointwise):
    """Inverts the values at or above a per-sample threshold."""

    schema = Schema(name="_auto_aug.solarize", inputs=(2, 2),
                    doc="x if x < threshold else 255 - x (uint8; inputs: data, per-sample threshold).")

    def run_sample(self, inputs, args, ctx):
        img, threshold = inputs
        table = solarize_table(threshold)
        return _map_frames(img, "solarize", lambda f: table)


@register
class SolarizeAdd(_Pointwise):
    """Adds a per-sample amount to the values below 128."""

    schema = Schema(name="_auto_aug.solarize_add", inputs=(2, 2),
                    doc="x + shift if x < 128 else x (uint8, wrapping; inputs: data, per-sample shift).")

    def run_sample(self, inputs, args, ctx):
        img, shift = inputs
        table = solarize_add_table(shift)
        return _map_frames(img, "solarize_add", lambda f: table)


def _gpu_placements() -> None:
    """These operators take GPU batches (their kernels: ``stoker.auto_aug.gpu_ops``); the registry
    adds that placement to operators registered so far, so it is asked again here."""
    from stoker.operators import gpu_registry

    gpu_registry.load_gpu_impls()


from stoker.auto_aug import warp_group  # noqa: E402, F401 - registers _auto_aug.warp_group and case_group

_gpu_placements()
