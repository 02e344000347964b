"""``paste``: place each image on a larger canvas filled with a colour (zoom-out)."""

from __future__ import annotations

import math

import cv2
import numpy as np

from stoker.errors import arg_error
from stoker.operators.base import Operator
from stoker.operators.image.flip import OPENCV_TYPES
from stoker.operators.image.slice import c_cast_array
from stoker.operators.schema import Arg, Schema, register

F32 = np.float32


@register
class Paste(Operator):
    """Pastes HWC images onto a bigger canvas."""

    schema = Schema(
        name="paste",
        legacy_name="Paste",
        doc="Puts each HWC image on a canvas ``ratio`` times its size (truncated; at least "
            "``min_canvas_size`` per side) filled with ``fill_value`` (one value per channel). The "
            "image's top-left corner goes to trunc(paste_x * (canvas_w - w)), trunc(paste_y * "
            "(canvas_h - h)).",
        args=[Arg("ratio", "float", None, tensor=True, doc="canvas size / image size, at least 1 (required)"),
              Arg("paste_x", "float", 0.5, tensor=True, doc="horizontal position in [0, 1]"),
              Arg("paste_y", "float", 0.5, tensor=True, doc="vertical position in [0, 1]"),
              Arg("min_canvas_size", "float", 0.0, tensor=True, doc="smallest canvas side"),
              Arg("fill_value", "float_list", None, doc="canvas colour, one value per channel (required)"),
              Arg("n_channels", "int", 3, doc="number of channels of the images")],
        devices=("cpu",),
    )

    def setup(self):
        a = self.args
        if a["fill_value"] is None:
            raise arg_error("paste", "fill_value", "is required (one value per channel)")
        if a["n_channels"] < 1:
            raise arg_error("paste", "n_channels", "must be positive")
        if len(a["fill_value"]) not in (1, a["n_channels"]):
            raise arg_error("paste", "fill_value",
                            f"has {len(a['fill_value'])} values for {a['n_channels']} channels")
        if "ratio" in a and a["ratio"] is None:
            raise arg_error("paste", "ratio", "is required")

    def canvas(self, shape: tuple, args: dict) -> tuple[int, int, int, int]:
        """One sample's placement ``(canvas_h, canvas_w, y0, x0)`` for an image of ``shape``,
        from its static or per-sample arguments; raises for a bad shape, ratio or position.
        Shared by the CPU and GPU implementations."""
        nc = self.args["n_channels"]
        if len(shape) != 3 or shape[2] != nc:
            raise ValueError(f"paste: expects HWC images with n_channels={nc} channels, got shape {tuple(shape)}")
        ratio = float(args["ratio"])
        if ratio < 1:
            raise ValueError(f"paste: argument 'ratio' must be at least 1, got {ratio}")
        px, py = float(args.get("paste_x", 0.5)), float(args.get("paste_y", 0.5))
        for name, p in (("paste_x", px), ("paste_y", py)):
            if not 0 <= p <= 1:
                raise ValueError(f"paste: argument '{name}' must be in [0, 1], got {p}")
        h, w = int(shape[0]), int(shape[1])
        least = float(args.get("min_canvas_size", 0.0))
        out_h = math.floor(max(float(F32(h) * F32(ratio)), least))
        out_w = math.floor(max(float(F32(w) * F32(ratio)), least))
        y0 = math.floor(float(F32(py) * F32(out_h - h)))
        x0 = math.floor(float(F32(px) * F32(out_w - w)))
        return out_h, out_w, y0, x0

    def fill(self, dtype) -> np.ndarray:
        """The canvas colour in ``dtype``, one value per channel (C-cast, as DALI)."""
        values = c_cast_array(np.asarray(self.args["fill_value"], np.float64), dtype)
        return np.ascontiguousarray(np.broadcast_to(values, (self.args["n_channels"],)))

    def run_sample(self, inputs, args, ctx):
        img = inputs[0]
        out_h, out_w, y0, x0 = self.canvas(img.shape, args)
        h, w = img.shape[:2]
        fill = self.fill(img.dtype)
        if img.dtype in OPENCV_TYPES and img.shape[2] <= 4 and img.flags.c_contiguous and img.size:
            # OpenCV: the border and the copy in one pass (NumPy's broadcast fill of the canvas, then
            # the copy, took 0.75 ms for a 384x384 RGB image pasted into 480x480; OpenCV 0.02 ms).
            # The fill values are already of the image's type, so OpenCV's conversion keeps them.
            out = cv2.copyMakeBorder(img, y0, out_h - h - y0, x0, out_w - w - x0, cv2.BORDER_CONSTANT,
                                     value=tuple(fill.tolist()))
            return out.reshape(out_h, out_w, img.shape[2])  # (OpenCV drops a single channel axis)
        out = np.empty((out_h, out_w, self.args["n_channels"]), img.dtype)
        out[...] = fill
        out[y0:y0 + h, x0:x0 + w] = img
        return out

