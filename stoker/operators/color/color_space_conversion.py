"""``color_space_conversion``: RGB, BGR, GRAY and YCbCr (ITU-R BT.601, studio range) on uint8
channel-last images.

- RGB <-> BGR swaps channels; GRAY -> RGB/BGR repeats the channel.
- RGB/BGR -> GRAY is OpenCV's fixed-point ``0.299 R + 0.587 G + 0.114 B`` (what DALI uses).
- RGB/BGR -> YCbCr: Y in [16, 235], Cb and Cr in [16, 240] around 128; YCbCr -> RGB/BGR is the
  exact inverse; GRAY <-> YCbCr maps the grey level to Y = 16 + 219/255 g (chroma 128).

Matrices are applied in float32 (cv2.transform), rounded half up and saturated.
DALI refuses a conversion to the same colour space; stoker returns a copy, so
pipelines that pick the type at run time need no special case.
"""

from __future__ import annotations

import cv2
import numpy as np

from stoker import types
from stoker.errors import arg_error
from stoker.operators.color._common import apply_affine, check_channels_last, to_dtype
from stoker.operators.image.crop import LayoutAware
from stoker.operators.schema import REQUIRED, Arg, Schema, register

# RGB -> YCbCr, BT.601 studio swing (values for 8 bits)
_RGB2YCC = np.array([[65.481, 128.553, 24.966],
                     [-37.797, -74.203, 112.0],
                     [112.0, -93.786, -18.214]]) / 255.0
_YCC_OFFSET = np.array([16.0, 128.0, 128.0])
_YCC2RGB = np.linalg.inv(_RGB2YCC)
_SWAP = np.eye(3)[::-1]  # RGB <-> BGR

CHANNELS = {types.RGB: 3, types.BGR: 3, types.YCbCr: 3, types.GRAY: 1}


def _to_rgb_matrix(src) -> np.ndarray:
    return _SWAP if src == types.BGR else np.eye(3)


def affine_map(src, dst) -> tuple[np.ndarray, np.ndarray]:
    """``(matrix, offset)`` (float64, (out channels, in channels) and (out channels,)) taking a
    ``src`` pixel to ``dst``, before rounding: every pair but RGB/BGR -> GRAY, which is OpenCV's
    fixed-point luma. Copies, swaps and the grey repeat are maps of ones and zeros, exact in
    float32; the CPU operator moves bytes for those and applies the YCbCr ones (the GPU
    implementation applies them all)."""
    if src == dst:
        c = CHANNELS[src]
        return np.eye(c), np.zeros(c)
    if src == types.GRAY:
        if dst in (types.RGB, types.BGR):
            return np.ones((3, 1)), np.zeros(3)
        return np.array([[219.0 / 255.0], [0.0], [0.0]]), _YCC_OFFSET
    if src == types.YCbCr:
        if dst == types.GRAY:  # the luma, stretched back to the full range
            return np.array([[255.0 / 219.0, 0.0, 0.0]]), np.array([-16.0 * 255.0 / 219.0])
        m = _to_rgb_matrix(dst) @ _YCC2RGB
        return m, -m @ _YCC_OFFSET
    if dst == types.YCbCr:
        return _RGB2YCC @ _to_rgb_matrix(src), _YCC_OFFSET
    if dst == types.GRAY:
        raise ValueError("color_space_conversion: RGB/BGR -> GRAY is a fixed-point formula, not an affine map")
    return _SWAP, np.zeros(3)  # RGB <-> BGR


@register
class ColorSpaceConversion(LayoutAware):
    """Converts uint8 images between RGB, BGR, GRAY and YCbCr."""

    schema = Schema(
        name="color_space_conversion",
        doc="Converts uint8 channel-last images between the colour spaces RGB, BGR, GRAY and YCbCr "
            "(BT.601 studio range).",
        args=[Arg("image_type", "image_type", REQUIRED, doc="colour space of the input"),
              Arg("output_type", "image_type", REQUIRED, doc="colour space of the output")],
    )

    def setup(self):
        for name in ("image_type", "output_type"):
            v = self.args.get(name)
            if v not in CHANNELS:
                raise arg_error("color_space_conversion", name,
                                f"must be types.RGB, types.BGR, types.GRAY or types.YCbCr, got {v}")
        self.src, self.dst = self.args["image_type"], self.args["output_type"]

    def run_sample(self, inputs, args, ctx):
        img = np.asarray(inputs[0])
        check_channels_last(self, img, self.layout_of(args), (CHANNELS[self.src],))
        if img.dtype != np.uint8:
            raise self.error(f"expects uint8 input, got {img.dtype}")
        src, dst = self.src, self.dst
        if src == dst:
            return img.copy()
        if dst == types.GRAY and src in (types.RGB, types.BGR):
            code = cv2.COLOR_RGB2GRAY if src == types.RGB else cv2.COLOR_BGR2GRAY
            flat = np.ascontiguousarray(img).reshape(-1, 1, 3)
            return cv2.cvtColor(flat, code).reshape(*img.shape[:-1], 1)
        if src == types.GRAY and dst in (types.RGB, types.BGR):
            flat = np.ascontiguousarray(img).reshape(-1, 1, 1)
            return cv2.cvtColor(flat, cv2.COLOR_GRAY2RGB).reshape(*img.shape[:-1], 3)  # (the channel repeated)
        if types.YCbCr in (src, dst):
            return self._convert(img, *affine_map(src, dst))
        # RGB <-> BGR: OpenCV's swap of whole pixels (NumPy copied the reversed view element by
        # element: 0.2 ms for a 256x256 image, OpenCV 0.01 ms)
        flat = np.ascontiguousarray(img).reshape(-1, 1, 3)
        return cv2.cvtColor(flat, cv2.COLOR_RGB2BGR).reshape(img.shape)

    @staticmethod
    def _convert(img, matrix, offset):
        return to_dtype(apply_affine(img, matrix, offset), np.uint8)
