"""``color_twist``: hue, saturation, brightness and contrast of RGB images in one linear map.

    out = brightness * (center + contrast * (HS(in) - center))

``HS`` is the hue/saturation matrix of ``hsv`` (YIQ space) and ``center`` the
input type's middle grey (0.5 for floats, 128 for uint8). Computed in float32,
rounded (half up) and saturated to ``dtype`` (default: the input's), without
rescaling between types.
"""

from __future__ import annotations

import numpy as np

from stoker.operators.color._common import half_range, hsv_matrices, hsv_matrix, scalar
from stoker.operators.color.hsv import HUE_ARG, IMAGE_TYPE_ARG, SATURATION_ARG, LinearColor
from stoker.operators.schema import Arg, Schema, register


@register
class ColorTwist(LinearColor):
    """Hue, saturation, brightness and contrast adjustment of RGB images."""

    schema = Schema(
        name="color_twist",
        doc="Adjusts hue (degrees), saturation, contrast (around the type's middle grey) and brightness "
            "of RGB images: out = brightness * (center + contrast * (HS(in) - center)).",
        args=[Arg("brightness", "float", 1.0, tensor=True, doc="multiplier (>= 0); 0 gives black"),
              Arg("contrast", "float", 1.0, tensor=True, doc="multiplier (>= 0) around the middle grey"),
              HUE_ARG, SATURATION_ARG, IMAGE_TYPE_ARG,
              Arg("dtype", "dtype", None, doc="output type (default: the input's)")],
    )

    def affine(self, args, dtype):
        b = self.nonnegative(args, "brightness")
        c = self.nonnegative(args, "contrast")
        s = self.nonnegative(args, "saturation")
        m = b * c * hsv_matrix(scalar(self, args, "hue", 0.0), s, bgr=self.bgr)
        return m, np.full(3, b * (1.0 - c) * half_range(dtype))

    def affine_batch(self, column, dtype):
        b = self.nonnegative_column(column, "brightness")
        c = self.nonnegative_column(column, "contrast")
        s = self.nonnegative_column(column, "saturation")
        hue = column("hue", 0.0)
        if b is None or c is None or s is None or hue is None:
            return None
        # the per-sample order of operations: (b * c) * matrix, (b * (1 - c)) * centre
        m = (b * c)[:, None, None] * hsv_matrices(hue, s, np.ones(len(b)), bgr=self.bgr)
        offset = b * (1.0 - c) * half_range(dtype)
        return m, np.repeat(offset[:, None], 3, axis=1)
