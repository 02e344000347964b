"""``clahe``: Contrast Limited Adaptive Histogram Equalization of uint8 HWC images.

OpenCV's CLAHE (cv2.createCLAHE) on ``tiles_x`` x ``tiles_y`` tiles; a bin is
clipped at ``clip_limit * tile_area / 256``. Grey images are equalized
directly; RGB images either on their lightness (``luma_only``, via OpenCV's
Lab conversion, colours kept) or channel by channel. This is the algorithm
DALI's CPU operator follows: the outputs are equal.
"""

from __future__ import annotations

import cv2
import numpy as np

from stoker.errors import arg_error
from stoker.operators.color._common import check_channels_last
from stoker.operators.image.crop import LayoutAware
from stoker.operators.schema import REQUIRED, Arg, Schema, register


@register
class Clahe(LayoutAware):
    """Local contrast enhancement of uint8 grey or RGB images."""

    schema = Schema(
        name="clahe",
        doc="Contrast Limited Adaptive Histogram Equalization of uint8 HWC images with 1 or 3 (RGB) channels.",
        args=[Arg("tiles_x", "int", REQUIRED, doc="number of tiles across the width (> 0)"),
              Arg("tiles_y", "int", REQUIRED, doc="number of tiles down the height (> 0)"),
              Arg("clip_limit", "float", REQUIRED, doc="bin clip limit, relative to tile_area / bins (> 0)"),
              Arg("bins", "int", 256, doc="histogram bins; stoker supports 256 (the uint8 levels)"),
              Arg("luma_only", "bool", True,
                  doc="RGB: equalize the lightness only (True) or each channel independently")],
    )

    def setup(self):
        for name in ("tiles_x", "tiles_y"):
            if self.args[name] <= 0:
                raise arg_error("clahe", name, f"must be positive, got {self.args[name]}")
        if self.args["clip_limit"] <= 0:
            raise arg_error("clahe", "clip_limit", f"must be positive, got {self.args['clip_limit']}")
        if self.args["bins"] != 256:
            # OpenCV's uint8 CLAHE has one bin per level; DALI also takes other powers of two
            raise arg_error("clahe", "bins", f"stoker supports 256 bins only, got {self.args['bins']}")

    def run_sample(self, inputs, args, ctx):
        img = np.asarray(inputs[0])
        check_channels_last(self, img, self.layout_of(args), (1, 3))
        if img.dtype != np.uint8 or img.ndim != 3:
            raise self.error(f"expects uint8 HWC input, got {img.dtype} of shape {img.shape}")
        # one CLAHE object per call: they keep scratch buffers and are not shared across threads
        clahe = cv2.createCLAHE(self.args["clip_limit"], (self.args["tiles_x"], self.args["tiles_y"]))
        if img.shape[2] == 1:
            return clahe.apply(np.ascontiguousarray(img[:, :, 0]))[:, :, None]
        if not self.args["luma_only"]:
            return np.dstack([clahe.apply(np.ascontiguousarray(img[:, :, c])) for c in range(3)])
        lab = cv2.cvtColor(np.ascontiguousarray(img), cv2.COLOR_RGB2Lab)
        lab[:, :, 0] = clahe.apply(np.ascontiguousarray(lab[:, :, 0]))
        return cv2.cvtColor(lab, cv2.COLOR_Lab2RGB)
