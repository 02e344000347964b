"""``warp_affine``: resample images through a 2x3 affine matrix (OpenCV's warpAffine), or
volumes (DHWC, DHW) through a 3x4 one (:mod:`stoker.operators.image.warp_volume`).

DALI's matrices take pixel *centres* to pixel centres: by default (``inverse_map``)
output point (x + 0.5, y + 0.5) is read from the input at ``M @ (x + 0.5, y + 0.5, 1)``,
coordinates where pixel i spans [i, i + 1). OpenCV puts centres at integers, so
the matrix is shifted by half a pixel on both sides before it goes to
``cv2.warpAffine``. See :func:`opencv_matrix`.
"""

from __future__ import annotations

import cv2
import numpy as np

from stoker import types
from stoker.errors import arg_error
from stoker.operators.image.crop import LayoutAware
from stoker.operators.image.slice import c_cast_array
from stoker.operators.image.warp_volume import inverse_matrix_3d, volume_warp
from stoker.operators.per_frame import frame_args
from stoker.operators.schema import Arg, Schema, register
from stoker.operators.tensor.basic import convert

_INTERP = {types.INTERP_NN: cv2.INTER_NEAREST, types.INTERP_LINEAR: cv2.INTER_LINEAR,
           types.INTERP_CUBIC: cv2.INTER_CUBIC}


@register
@frame_args("matrix", split_sequences=True)
class WarpAffine(LayoutAware):
    """Applies an affine transform to HWC images (2x3 matrix) or DHWC volumes (3x4 matrix)."""

    schema = Schema(
        name="warp_affine",
        legacy_name="WarpAffine",
        doc="Resamples each HWC image through the 2x3 ``matrix`` (argument, per-sample tensor or "
            "second input). With ``inverse_map`` (default) the matrix maps output coordinates to "
            "input coordinates, otherwise input to output. ``size`` is the output (H, W) (default: "
            "the input's). Outside the input, ``fill_value`` is written; without it the border "
            "pixels are repeated. ``interp_type``: INTERP_NN, INTERP_LINEAR (default) or INTERP_CUBIC "
            "(a stoker extension: DALI warps with NN and linear only). Sequences (FHWC) are warped frame by "
            "frame; matrix may be per frame (fn.per_frame, one 2x3 matrix per frame). Volumes (DHWC, DHW, or "
            "4D input without a layout) take a 3x4 matrix over (x, y, z) = (W, H, D) and a 3-value size "
            "(D, H, W); they are warped with INTERP_NN or INTERP_LINEAR (trilinear), as DALI.",
        args=[Arg("matrix", "float_list", None, tensor=True,
                  doc="2x3 matrix (6 values; 3x4 = 12 values for volumes), row-major"),
              Arg("inverse_map", "bool", True, doc="the matrix maps output to input"),
              Arg("size", "float_list", None, tensor=True,
                  doc="output (H, W), or (D, H, W) for volumes; default: the input's size"),
              Arg("fill_value", "float", None, doc="value outside the input (default: repeat the border)"),
              Arg("interp_type", "interp", types.INTERP_LINEAR, doc="interpolation"),
              Arg("dtype", "dtype", None, doc="output type (default: the input's)"),
              Arg("output_dtype", "dtype", None, doc="deprecated name of dtype")],
        inputs=(1, 2),
        devices=("cpu",),
    )

    def setup(self):
        a = self.args
        if a["interp_type"] not in _INTERP:
            raise arg_error("warp_affine", "interp_type",
                            f"{a['interp_type']} is not supported; use INTERP_NN, INTERP_LINEAR or INTERP_CUBIC")
        if a.get("matrix") is not None and len(a["matrix"]) not in (6, 9, 12, 16):
            raise arg_error("warp_affine", "matrix",
                            f"needs 6 values (2x3) for images or 12 (3x4) for volumes, got {len(a['matrix'])}")
        self.dtype = a["dtype"] if a["dtype"] is not None else a["output_dtype"]

    def geometry(self, args: dict, matrix, in_hw) -> tuple[np.ndarray, int, int]:
        """(2x3 matrix as given, output H, output W) of one sample: ``matrix`` is the second input's
        sample or None (then the ``matrix`` argument); shared with the GPU warp."""
        m = matrix if matrix is not None else args.get("matrix")
        if m is None:
            raise ValueError("warp_affine: argument 'matrix' is required (or a matrix as the second input)")
        m = np.asarray(m, np.float64).reshape(-1)
        if m.size not in (6, 9):
            raise ValueError(f"warp_affine: argument 'matrix' needs 6 values (2x3), got {m.size}")
        size = args.get("size")
        if size is not None and np.asarray(size).size:
            out_h, out_w = (int(v) for v in np.asarray(size, np.float64).reshape(-1)[:2])
        else:
            out_h, out_w = in_hw
        return m[:6].reshape(2, 3), out_h, out_w

    def run_sample(self, inputs, args, ctx):
        img = inputs[0]
        if is_volume(self.layout_of(args), img.ndim):
            return self._run_volume(img, args, inputs[1] if len(inputs) > 1 else None)
        if img.ndim not in (2, 3):
            raise ValueError(f"warp_affine: expects HW or HWC images, got shape {img.shape}")
        m, out_h, out_w = self.geometry(args, inputs[1] if len(inputs) > 1 else None, img.shape[:2])
        fill = self.args["fill_value"]
        if self.args["interp_type"] == types.INTERP_NN:
            out = nearest_warp(img, inverse_matrix(m, self.args["inverse_map"]), out_h, out_w, fill)
            return self._cast(out, img.dtype)
        cv_m = opencv_matrix(m, self.args["inverse_map"])
        border = cv2.BORDER_REPLICATE if fill is None else cv2.BORDER_CONSTANT
        src = img
        work_dtype = src.dtype
        if src.dtype not in (np.uint8, np.uint16, np.int16, np.float32, np.float64):
            src = src.astype(np.float32)  # types OpenCV cannot warp
        nc = src.shape[2] if src.ndim == 3 else 1
        value = [float(fill or 0.0)] * min(max(nc, 1), 4)
        if nc > 4:  # OpenCV warps at most 4 channels per call with a constant border
            planes = [self._warp(np.ascontiguousarray(src[..., c]), cv_m, out_w, out_h, border, value[:1])
                      for c in range(nc)]
            out = np.stack(planes, axis=-1)
        else:
            out = self._warp(src, cv_m, out_w, out_h, border, value)
            if img.ndim == 3 and out.ndim == 2:
                out = out[..., None]
        return self._cast(out, work_dtype)

    def volume_geometry(self, args: dict, matrix, in_dhw) -> tuple[np.ndarray, tuple[int, int, int]]:
        """(3x4 matrix as given, output (D, H, W)) of one volume."""
        m = matrix if matrix is not None else args.get("matrix")
        if m is None:
            raise ValueError("warp_affine: argument 'matrix' is required (or a matrix as the second input)")
        m = np.asarray(m, np.float64).reshape(-1)
        if m.size not in (12, 16):
            raise ValueError(f"warp_affine: argument 'matrix' needs 12 values (3x4) for a volume, got {m.size}")
        size = args.get("size")
        if size is not None and np.asarray(size).size:
            size = np.asarray(size, np.float64).reshape(-1)
            if size.size != 3:
                raise ValueError(f"warp_affine: argument 'size' needs 3 values (D, H, W) for a volume, "
                                 f"got {size.size}")
            out = tuple(int(v) for v in size)
        else:
            out = tuple(int(v) for v in in_dhw)
        return m[:12].reshape(3, 4), out

    def _run_volume(self, img, args, matrix):
        if self.args["interp_type"] not in (types.INTERP_NN, types.INTERP_LINEAR):
            raise ValueError("warp_affine: argument 'interp_type' must be INTERP_NN or INTERP_LINEAR for volumes")
        m, out_dhw = self.volume_geometry(args, matrix, img.shape[:3])
        full = inverse_matrix_3d(m, self.args["inverse_map"])
        nearest = self.args["interp_type"] == types.INTERP_NN
        return self._cast(volume_warp(img, full, out_dhw, self.args["fill_value"], nearest), img.dtype)

    def _cast(self, out, in_dtype):
        out_dtype = np.dtype(self.dtype if self.dtype is not None else in_dtype)
        if out.dtype == out_dtype:
            return out
        return convert(out, out_dtype) if out_dtype.kind in "iu" else out.astype(out_dtype)

    def _warp(self, src, cv_m, out_w, out_h, border, value):
        flags = _INTERP[self.args["interp_type"]] | cv2.WARP_INVERSE_MAP
        if self.dtype is not None and np.dtype(self.dtype).kind == "f" and src.dtype.kind != "f":
            src = src.astype(np.float32)  # interpolate in float when the output is float
        return cv2.warpAffine(src, cv_m, (out_w, out_h), flags=flags, borderMode=border, borderValue=value)


def is_volume(layout: str, ndim: int) -> bool:
    """Whether a sample is a volume: a layout with a D axis, or 4 dims without a layout."""
    return "D" in layout if layout else ndim == 4


def inverse_matrix(m: np.ndarray, inverse_map: bool) -> np.ndarray:
    """The 3x3 output-to-input matrix (DALI's convention), inverting ``m`` unless ``inverse_map``."""
    full = np.vstack([m, [0.0, 0.0, 1.0]])
    if inverse_map:
        return full
    try:
        return np.linalg.inv(full)
    except np.linalg.LinAlgError:
        raise ValueError(f"warp_affine: argument 'matrix' is not invertible: {m.tolist()}") from None


def nearest_warp(img: np.ndarray, full: np.ndarray, out_h: int, out_w: int, fill) -> np.ndarray:
    """Nearest-neighbour warp: each output centre reads the input pixel that contains its source
    point (floor, in float32 as DALI; OpenCV would round ties to even and pick other pixels)."""
    m = full[:2].astype(np.float32)
    xs = np.arange(out_w, dtype=np.float32) + np.float32(0.5)
    ys = np.arange(out_h, dtype=np.float32) + np.float32(0.5)
    sx = np.floor(m[0, 0] * xs[None, :] + (m[0, 1] * ys[:, None] + m[0, 2])).astype(np.int64)
    sy = np.floor(m[1, 0] * xs[None, :] + (m[1, 1] * ys[:, None] + m[1, 2])).astype(np.int64)
    h, w = img.shape[:2]
    inside = (sx >= 0) & (sx < w) & (sy >= 0) & (sy < h)
    out = img[np.clip(sy, 0, h - 1), np.clip(sx, 0, w - 1)]
    if fill is not None:
        out[~inside] = c_cast_array(np.asarray(float(fill)), img.dtype)
    return out


def opencv_matrix(m: np.ndarray, inverse_map: bool) -> np.ndarray:
    """The output-to-input matrix in OpenCV's integer-centre convention, from DALI's 2x3 matrix in
    the pixel-centre-at-half convention (inverting it first when it maps input to output)."""
    full = inverse_matrix(m, inverse_map)
    half = np.array([[1.0, 0.0, 0.5], [0.0, 1.0, 0.5], [0.0, 0.0, 1.0]])
    unhalf = np.array([[1.0, 0.0, -0.5], [0.0, 1.0, -0.5], [0.0, 0.0, 1.0]])
    return (unhalf @ full @ half)[:2]
