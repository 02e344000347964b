"""``brightness``, ``contrast`` and ``brightness_contrast``:

    out = brightness_shift * range(out_type) + brightness * (contrast_center + contrast * (in - contrast_center))

``range`` is 1 for floating outputs and the type's maximum for integer ones;
``contrast_center`` defaults to the input type's middle grey (0.5 for floats,
128 for uint8, (max + 1) / 2 for other integers). Values are computed in
float32, then rounded (half up) and saturated to ``dtype`` (default: the
input's). Inputs are any shape (HWC, FHWC, DHWC ...); every element is
treated alike. uint8 inputs go through a 256-entry lookup table (cv2.LUT).
"""

from __future__ import annotations

import cv2
import numpy as np

from stoker.operators.color._common import half_range, scalar, to_dtype, type_range
from stoker.operators.image.crop import LayoutAware
from stoker.operators.per_frame import frame_args
from stoker.operators.schema import Arg, Schema, register

_BRIGHTNESS = Arg("brightness", "float", 1.0, tensor=True, doc="multiplier of the (contrast-adjusted) value")
_SHIFT = Arg("brightness_shift", "float", 0.0, tensor=True,
             doc="added, in units of the output type's range (1.0 = its maximum value)")
_CONTRAST = Arg("contrast", "float", 1.0, tensor=True, doc="contrast multiplier; 0 gives a uniform grey")
_CENTER = Arg("contrast_center", "float", None, tensor=True,
              doc="value unaffected by contrast (default: half of the input type's range, 0.5 for floats)")
_DTYPE = Arg("dtype", "dtype", None, doc="output type (default: the input's)")

# cv2.LUT takes tables of these types; other output types index the table with NumPy
_LUT_TYPES = {np.dtype(t) for t in (np.uint8, np.int8, np.uint16, np.int16, np.int32, np.float32, np.float64)}


@frame_args("brightness", "brightness_shift", "contrast", "contrast_center")
class _BrightnessContrastBase(LayoutAware):  # LayoutAware: per-frame arguments need the input's layout
    def run_sample(self, inputs, args, ctx):
        img = np.asarray(inputs[0])
        if img.dtype.kind not in "iuf":
            raise self.error(f"expects numeric input, got {img.dtype}")
        out_type = np.dtype(self.args.get("dtype") or img.dtype)
        b = scalar(self, args, "brightness", 1.0)
        shift = scalar(self, args, "brightness_shift", 0.0)
        c = scalar(self, args, "contrast", 1.0)
        center = scalar(self, args, "contrast_center", half_range(img.dtype))
        # float32 in DALI's order of operations (a different order moves rounding ties)
        f32 = np.float32
        b, c, center = f32(b), f32(c), f32(center)
        add = f32(shift * type_range(out_type))
        if img.dtype == np.uint8:
            table = to_dtype(add + b * (center + c * (np.arange(256, dtype=np.float32) - center)), out_type)
            if out_type in _LUT_TYPES and img.size:
                flat = np.ascontiguousarray(img).reshape(-1, 1)
                return cv2.LUT(flat, table).reshape(img.shape)
            return table[img]
        x = img.astype(np.float32)
        x -= center
        x *= c
        x += center
        x *= b
        x += add
        return to_dtype(x, out_type)


@register
class BrightnessContrast(_BrightnessContrastBase):
    """Brightness and contrast in one pass (see the module docstring for the formula)."""

    schema = Schema(
        name="brightness_contrast",
        doc="out = brightness_shift * range(dtype) + brightness * (contrast_center + "
            "contrast * (in - contrast_center)), rounded and saturated to dtype.",
        args=[_BRIGHTNESS, _SHIFT, _CONTRAST, _CENTER, _DTYPE],
    )


@register
class Brightness(_BrightnessContrastBase):
    """out = brightness_shift * range(dtype) + brightness * in."""

    schema = Schema(
        name="brightness",
        doc="out = brightness_shift * range(dtype) + brightness * in, rounded and saturated to dtype.",
        args=[_BRIGHTNESS, _SHIFT, _DTYPE],
    )


@register
class Contrast(_BrightnessContrastBase):
    """out = contrast_center + contrast * (in - contrast_center)."""

    schema = Schema(
        name="contrast",
        doc="out = contrast_center + contrast * (in - contrast_center), rounded and saturated to dtype.",
        args=[_CONTRAST, _CENTER, _DTYPE],
    )
