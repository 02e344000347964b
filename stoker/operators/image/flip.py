"""``flip``: mirrors samples along their W, H and/or D axes (per-sample flags)."""

from __future__ import annotations

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
        return np.ascontiguousarray(np.flip(img, axis=flips))
