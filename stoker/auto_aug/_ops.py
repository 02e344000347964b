"""Two kernels the augmentation suite needs and stoker has no public operator for yet:
a 3x3 filter with a per-sample kernel (``sharpness``) and per-channel histogram
equalization (``equalize``). Internal (the leading underscore keeps them out of ``fn``);
registered when :mod:`stoker.auto_aug` is imported."""

from __future__ import annotations

import cv2
import numpy as np

from stoker.operators.base import Operator
from stoker.operators.schema import Schema, register


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
