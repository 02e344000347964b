"""``rotate``: rotates images about their centre (OpenCV's warpAffine with DALI's geometry)."""

from __future__ import annotations

import cv2
import numpy as np

from stoker import types
from stoker.errors import arg_error
from stoker.operators.image.crop import LayoutAware
from stoker.operators.image.geometry import rotated_size, rotation_matrix
from stoker.operators.image.resample import to_dtype
from stoker.operators.schema import Arg, Schema, register

INTERP = types.DALIInterpType
# DALI's rotate offers these two only
_CV_INTERP = {INTERP.INTERP_NN: cv2.INTER_NEAREST, INTERP.INTERP_LINEAR: cv2.INTER_LINEAR}


@register
class Rotate(LayoutAware):
    """Rotates each image by ``angle`` degrees (per-sample tensor allowed)."""

    schema = Schema(
        name="rotate",
        legacy_name="Rotate",
        doc="Rotates images counter-clockwise by angle degrees about their centre. The canvas grows to "
            "fit the rotated image unless keep_size=True or size is given; uncovered pixels get fill_value "
            "(or repeat the border when fill_value is not set).",
        args=[Arg("angle", "float", None, tensor=True, doc="rotation in degrees (required)"),
              Arg("axis", "float_list", None, tensor=True, doc="rotation axis (volumes only; not supported)"),
              Arg("keep_size", "bool", False, doc="keep the input's size (corners are cut)"),
              Arg("size", "float_list", None, tensor=True, doc="output (H, W)"),
              Arg("fill_value", "float", None, doc="value of pixels outside the source"),
              Arg("interp_type", "interp", INTERP.INTERP_LINEAR, doc="INTERP_NN or INTERP_LINEAR"),
              Arg("dtype", "dtype", None, doc="output type (default: the input's)"),
              Arg("output_dtype", "dtype", None, doc="deprecated name of dtype")],
        devices=("cpu",),
    )

    def setup(self):
        if INTERP(int(self.args["interp_type"])) not in _CV_INTERP:
            raise arg_error("rotate", "interp_type", "only types.INTERP_NN and types.INTERP_LINEAR are supported "
                            f"(as in DALI), got {self.args['interp_type']!r}")
        if self.args["keep_size"] and self.args.get("size") is not None:
            raise arg_error("rotate", "keep_size", "cannot be combined with size")
        self.dtype = self.args["dtype"] if self.args["dtype"] is not None else self.args["output_dtype"]

    def run_sample(self, inputs, args, ctx):
        img = inputs[0]
        layout = self.layout_of(args)
        if img.ndim not in (2, 3) or (layout and layout not in ("HWC", "HW")):
            raise self.error(f"rotate supports HWC/HW images, got shape {img.shape} layout {layout!r}")
        angle = args.get("angle")
        if angle is None:
            raise self.error("argument 'angle' is required")
        angle = float(angle)
        if not np.isfinite(angle):
            raise self.error(f"argument 'angle' must be a finite number of degrees, got {angle}")
        h, w = img.shape[:2]
        if args.get("size") is not None:
            size = [int(round(float(v))) for v in np.asarray(args["size"]).reshape(-1)]
            if not size or min(size) < 0:
                raise self.error(f"argument 'size' must hold non-negative extents (H, W), got {size}")
            out_hw = (size[0], size[-1])
        elif self.args["keep_size"]:
            out_hw = (h, w)
        else:
            out_hw = rotated_size(h, w, angle)
        m = rotation_matrix(angle, (h, w), out_hw)
        fill = self.args["fill_value"]
        border = cv2.BORDER_REPLICATE if fill is None else cv2.BORDER_CONSTANT
        channels = img.shape[2] if img.ndim == 3 else 1
        dtype = self.dtype if self.dtype is not None else img.dtype
        native = img.dtype in (np.uint8, np.uint16, np.int16, np.float32, np.float64) and (
            np.dtype(dtype).kind in "iu" or img.dtype.kind == "f")
        src = img if native else img.astype(np.float32)  # float outputs are interpolated in float
        value = (float(fill or 0),) * min(channels, 4)
        interp = _CV_INTERP[INTERP(int(self.args["interp_type"]))]
        if channels <= 4:
            out = cv2.warpAffine(src, m, (out_hw[1], out_hw[0]), flags=interp | cv2.WARP_INVERSE_MAP,
                                 borderMode=border, borderValue=value)
        else:
            out = np.stack([cv2.warpAffine(np.ascontiguousarray(src[:, :, c]), m, (out_hw[1], out_hw[0]),
                                           flags=interp | cv2.WARP_INVERSE_MAP, borderMode=border,
                                           borderValue=value[:1]) for c in range(channels)], axis=2)
        out = out.reshape(out_hw[0], out_hw[1], *img.shape[2:])
        return np.ascontiguousarray(out if out.dtype == dtype else to_dtype(out, dtype))
