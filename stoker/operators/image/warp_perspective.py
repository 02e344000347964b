"""``warp_perspective`` (also ``experimental.warp_perspective``, DALI's name): resample images
through a 3x3 homography with OpenCV.

With ``pixel_origin="corner"`` (default, DALI's) pixel i spans [i, i + 1), so output pixel
centre (x + 0.5, y + 0.5) reads the input at ``M @ (x + 0.5, y + 0.5, 1)`` (projected). OpenCV
puts centres at integers ("center"); the matrix is shifted by half a pixel on both sides before
it goes to ``cv2.warpPerspective``, whose nearest-neighbour and fixed-point linear sampling
DALI's CPU operator shares (its results match ours exactly or within one level).
"""

from __future__ import annotations

import cv2
import numpy as np

from stoker import types
from stoker.errors import arg_error
from stoker.operators.base import Operator
from stoker.operators.image.geometry_batch import sample_rows
from stoker.operators.per_frame import frame_args
from stoker.operators.schema import Arg, Schema, register

_INTERP = {types.INTERP_NN: cv2.INTER_NEAREST, types.INTERP_LINEAR: cv2.INTER_LINEAR,
           types.INTERP_CUBIC: cv2.INTER_CUBIC}
_BORDER = {"constant": cv2.BORDER_CONSTANT, "replicate": cv2.BORDER_REPLICATE, "reflect": cv2.BORDER_REFLECT,
           "reflect_101": cv2.BORDER_REFLECT_101, "wrap": cv2.BORDER_WRAP}
_HALF = np.array([[1.0, 0.0, 0.5], [0.0, 1.0, 0.5], [0.0, 0.0, 1.0]])
_UNHALF = np.array([[1.0, 0.0, -0.5], [0.0, 1.0, -0.5], [0.0, 0.0, 1.0]])
_CV_TYPES = (np.uint8, np.uint16, np.int16, np.float32)

_ARGS = [
    Arg("matrix", "float_list", None, tensor=True, doc="3x3 homography, row-major (9 values)"),
    Arg("inverse_map", "bool", True, doc="the matrix maps output coordinates to input coordinates"),
    Arg("size", "float_list", None, tensor=True, doc="output (H, W); default: the input's size"),
    Arg("fill_value", "float_list", None, doc="value(s) outside the input with border_mode 'constant' "
                                              "(one, or one per channel; default 0)"),
    Arg("interp_type", "interp", types.INTERP_LINEAR, doc="INTERP_NN, INTERP_LINEAR or INTERP_CUBIC"),
    Arg("border_mode", "str", "constant", doc="constant, replicate, reflect, reflect_101 or wrap"),
    Arg("pixel_origin", "str", "corner", doc="'corner': (0, 0) is the top-left pixel's corner; "
                                             "'center': its centre (OpenCV's convention)"),
]
_DOC = ("Resamples each HW, HWC or CHW image (or every frame of an FHWC / FCHW sequence) through the 3x3 "
        "perspective ``matrix`` (argument, per-sample tensor or second input). With ``inverse_map`` "
        "(default) the matrix maps output to input coordinates (OpenCV's WARP_INVERSE_MAP), otherwise "
        "input to output. ``size`` is the output (H, W) (default: the input's). Outside the input "
        "``border_mode`` decides; 'constant' writes ``fill_value``.")


@register
@frame_args("matrix")
class WarpPerspective(Operator):
    """Applies a perspective transform to HWC images."""

    schema = Schema(name="warp_perspective", legacy_name="WarpPerspective", doc=_DOC, args=_ARGS,
                    inputs=(1, 2), devices=("cpu",))

    def setup(self):
        a, name = self.args, self.schema.name
        if a["interp_type"] not in _INTERP:
            raise arg_error(name, "interp_type", f"{a['interp_type']} is not supported; "
                                                 "use INTERP_NN, INTERP_LINEAR or INTERP_CUBIC")
        if a["border_mode"] not in _BORDER:
            raise arg_error(name, "border_mode", f"{a['border_mode']!r} is not one of {', '.join(_BORDER)}")
        if a["pixel_origin"] not in ("corner", "center"):
            raise arg_error(name, "pixel_origin", f"must be 'corner' or 'center', got {a['pixel_origin']!r}")
        if a.get("matrix") is not None and len(a["matrix"]) != 9:
            raise arg_error(name, "matrix", f"needs 9 values (3x3), got {len(a['matrix'])}")
        if a.get("size") is not None and len(a["size"]) not in (0, 2):
            raise arg_error(name, "size", f"needs 2 values (H, W), got {len(a['size'])}")

    def output_layouts(self, input_layouts):
        return [input_layouts[0]]

    def run_cpu(self, batch, inputs, arg_inputs):
        # the samples' layout travels with each sample's arguments (one operator may run several
        # batches at once, so it cannot be an attribute)
        n = len(inputs[0])
        return super().run_cpu(batch, inputs, {**arg_inputs, "_layout": [inputs[0].layout()] * n})

    def run_sample(self, inputs, args, ctx):
        img = inputs[0]
        layout = str(args.get("_layout") or "")
        if layout in ("CHW", "FCHW", "FHWC") or (not layout and img.ndim == 4):
            frames = img[None] if layout == "CHW" else img
            if layout.endswith("CHW"):
                frames = frames.transpose(0, 2, 3, 1)
            out = np.stack([self._warp_image(np.ascontiguousarray(f), inputs, args) for f in frames])
            if layout.endswith("CHW"):
                out = np.ascontiguousarray(out.transpose(0, 3, 1, 2))
            return out[0] if layout == "CHW" else out
        return self._warp_image(img, inputs, args)

    def geometry(self, args: dict, matrix, in_hw) -> tuple[np.ndarray, int, int]:
        """(3x3 output-to-input matrix in OpenCV's convention, pixel centres at integers; output H;
        output W) of one image of size ``in_hw``: ``matrix`` is the second input's sample or None
        (then the ``matrix`` argument). Raises the sample's argument errors; shared with the GPU warp."""
        name = self.schema.name
        m = matrix if matrix is not None else args.get("matrix")
        if m is None:
            raise ValueError(f"{name}: argument 'matrix' is required (or a matrix as the second input)")
        m = np.asarray(m, np.float64).reshape(-1)
        if m.size != 9:
            raise ValueError(f"{name}: argument 'matrix' needs 9 values (3x3), got {m.size}")
        m = m.reshape(3, 3)
        if not self.args["inverse_map"]:
            if abs(np.linalg.det(m)) < 1e-12:
                raise ValueError(f"{name}: argument 'matrix' is not invertible: {m.tolist()}")
            m = np.linalg.inv(m)
        if self.args["pixel_origin"] == "corner":
            m = _UNHALF @ m @ _HALF  # to OpenCV's integer pixel centres
        size = args.get("size")
        if size is not None and np.asarray(size).size:
            out_h, out_w = (int(v) for v in np.asarray(size, np.float64).reshape(-1)[:2])
            if out_h < 0 or out_w < 0:
                raise ValueError(f"{name}: argument 'size' must not be negative, got {[out_h, out_w]}")
        else:
            out_h, out_w = in_hw
        return m, out_h, out_w

    def geometries(self, arg_inputs: dict, in_hw) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`geometry` (without a matrix input) of every image size ``in_hw`` (N, 2) at once,
        with no step per sample: ``(matrices (N, 3, 3), out_hw (N, 2))``, the same NumPy
        operations on stacks of matrices (the GPU warp's planner; tests hold the two equal).
        Raises PerSample where NumPy cannot read the argument inputs at once, ValueError where
        a sample's values are refused (the per-sample rule then names it)."""
        in_hw = np.asarray(in_hw, np.int64).reshape(-1, 2)
        n = in_hw.shape[0]
        name = self.schema.name
        m = sample_rows(self, arg_inputs, "matrix", n)
        if m is None:
            raise ValueError(f"{name}: argument 'matrix' is required (or a matrix as the second input)")
        if m.shape[1] != 9:
            raise ValueError(f"{name}: argument 'matrix' needs 9 values (3x3), got {m.shape[1]}")
        m = np.ascontiguousarray(m).reshape(n, 3, 3)
        if not self.args["inverse_map"]:
            if (np.abs(np.linalg.det(m)) < 1e-12).any():
                raise ValueError(f"{name}: argument 'matrix' is not invertible")
            m = np.linalg.inv(m)
        if self.args["pixel_origin"] == "corner":
            m = _UNHALF @ m @ _HALF  # to OpenCV's integer pixel centres
        size = sample_rows(self, arg_inputs, "size", n)
        if size is None or size.shape[1] == 0:
            return m, in_hw.copy()
        if size.shape[1] < 2:
            raise ValueError(f"{name}: argument 'size' needs 2 values (H, W)")
        size = size[:, :2]
        if not (np.abs(size) < 2.0 ** 62).all():  # int() of NaN or infinity fails sample by sample
            raise ValueError(f"{name}: argument 'size' must be finite")
        out_hw = np.trunc(size).astype(np.int64)  # int(): towards zero
        if (out_hw < 0).any():
            raise ValueError(f"{name}: argument 'size' must not be negative")
        return m, out_hw

    def _warp_image(self, img, inputs, args):
        name = self.schema.name
        if img.ndim not in (2, 3):
            raise ValueError(f"{name}: expects HW, HWC, CHW, FHWC or FCHW images, got shape {img.shape}")
        m, out_h, out_w = self.geometry(args, inputs[1] if len(inputs) > 1 else None, img.shape[:2])
        src = img if img.dtype in _CV_TYPES else img.astype(np.float32)
        nc = src.shape[2] if src.ndim == 3 else 1
        fill = self.args["fill_value"] or [0.0]
        if len(fill) not in (1, nc):
            raise ValueError(f"{name}: argument 'fill_value' has {len(fill)} values for {nc} channels")
        fill = fill * nc if len(fill) == 1 else fill
        planes = []
        for c0 in range(0, nc, 4):  # OpenCV's constant border takes at most 4 channel values
            part = src if nc <= 4 else np.ascontiguousarray(src[..., c0:c0 + 4])
            value = tuple(float(v) for v in fill[c0:c0 + 4])
            out = self._warp(part, m, out_w, out_h, value)
            planes.append(out.reshape(out_h, out_w, part.shape[2] if part.ndim == 3 else 1))
        out = planes[0] if len(planes) == 1 else np.concatenate(planes, axis=-1)
        if img.ndim == 2:
            out = out.reshape(out_h, out_w)
        return out.astype(img.dtype, copy=False)

    def _warp(self, src, m, out_w, out_h, value):
        border = _BORDER[self.args["border_mode"]]
        if out_w == 0 or out_h == 0 or src.shape[0] == 0 or src.shape[1] == 0:
            # No pixel to compute, or none to read: every output pixel lies outside an empty
            # source, so it takes the fill value whatever the border mode (OpenCV refuses an
            # empty source), converted as OpenCV converts a border value (rounded, saturated).
            v = np.asarray(value[:src.shape[2]] if src.ndim == 3 else value[:1], np.float64)
            if src.dtype.kind in "iu":
                info = np.iinfo(src.dtype)
                v = np.clip(np.rint(v), info.min, info.max)
            out = np.empty((out_h, out_w) + src.shape[2:], src.dtype)
            out[...] = v.astype(src.dtype) if src.ndim == 3 else v[0].astype(src.dtype)
            return out
        flags = _INTERP[self.args["interp_type"]] | cv2.WARP_INVERSE_MAP
        return cv2.warpPerspective(src, m, (out_w, out_h), flags=flags, borderMode=border, borderValue=value)


@register
class ExperimentalWarpPerspective(WarpPerspective):
    """DALI's name of ``warp_perspective``."""

    schema = Schema(name="experimental.warp_perspective", doc=_DOC, args=_ARGS, inputs=(1, 2), devices=("cpu",))
