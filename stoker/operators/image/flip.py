"""``flip``: mirrors samples along their W, H and/or D axes (per-sample flags)."""

from __future__ import annotations

import cv2
import numpy as np

from stoker.operators.image.crop import LayoutAware, spatial_axes_of
from stoker.operators.schema import Arg, Schema, register


@register
class Flip(LayoutAware):
    """Flips images (or volumes, or video frames) horizontally, vertically and/or in depth."""

    schema = Schema(
        name="flip",
        legacy_name="Flip",
        doc="Flips each sample: horizontal (W axis, default 1), vertical (H axis), depthwise (D axis).",
        args=[Arg("horizontal", "int", 1, tensor=True, doc="1 flips left-right"),
              Arg("vertical", "int", 0, tensor=True, doc="1 flips top-bottom"),
              Arg("depthwise", "int", 0, tensor=True, doc="1 flips front-back (volumes)")],
        devices=("cpu",),
    )

    def run_sample(self, inputs, args, ctx):
        img = inputs[0]
        lay = self.layout_of(args)
        if not lay or len(lay) != img.ndim:
            axes, _ = spatial_axes_of("", img.ndim)
            lay = "".join("DHW"[3 - len(axes) + i] for i in range(len(axes))) + "C" * (img.ndim - len(axes))
        flips = []
        for flag, axis_name in ((args.get("horizontal"), "W"), (args.get("vertical"), "H"),
                                (args.get("depthwise"), "D")):
            if int(flag or 0) and axis_name in lay:
                flips.append(lay.index(axis_name))
        if not flips:
            return img.copy()  # outputs never alias inputs
        fast = opencv_flip(img, lay, flips)
        return fast if fast is not None else np.ascontiguousarray(np.flip(img, axis=flips))


# the element types OpenCV's array operations take (its depths but float16)
OPENCV_TYPES = frozenset(np.dtype(t) for t in (np.uint8, np.int8, np.uint16, np.int16, np.int32, np.float32,
                                                np.float64))


def opencv_flip(img: np.ndarray, layout: str, flips: list[int]) -> np.ndarray | None:
    """OpenCV's flip of an HW or HWC image (at most 4 channels) about H and/or W, else None.

    Why: NumPy copies a W-flipped HWC view element by element through its negative strides (0.55 ms
    for a 413x400 RGB image on the 2-core box); OpenCV moves whole pixels with SIMD (0.02 ms). The
    same values: a flip only moves elements. The rows may lie apart (a crop's view); each row's
    pixels must be contiguous."""
    if layout not in ("HW", "HWC") or img.dtype not in OPENCV_TYPES or not _rows_contiguous(img) \
            or (img.ndim == 3 and not 1 <= img.shape[2] <= 4) or 0 in img.shape:
        return None
    code = {(1,): 1, (0,): 0, (0, 1): -1}.get(tuple(sorted(flips)))
    if code is None:
        return None
    out = cv2.flip(img, code)
    return out.reshape(img.shape)  # (OpenCV drops a single channel axis)


def _rows_contiguous(img: np.ndarray) -> bool:
    """Whether each row of an HW / HWC array is one contiguous run of elements (rows may lie apart)."""
    inner = img.itemsize
    for d in range(img.ndim - 1, 0, -1):
        if img.strides[d] != inner:
            return False
        inner *= img.shape[d]
    return img.strides[0] >= inner
