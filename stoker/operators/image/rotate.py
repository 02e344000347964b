"""``rotate``: rotates images about their centre (OpenCV's warpAffine with DALI's geometry)."""

from __future__ import annotations

import math

import cv2
import numpy as np

from stoker import types
from stoker.errors import arg_error
from stoker.operators.image.crop import LayoutAware
from stoker.operators.image.geometry import rotated_size, rotation_matrix
from stoker.operators.image.resample import to_dtype
from stoker.operators.image.warp_affine import is_volume, nearest_warp
from stoker.operators.image.warp_volume import (
    rotated_volume_size,
    rotation_3d,
    rotation_volume_matrix,
    volume_warp,
)
from stoker.operators.per_frame import frame_args
from stoker.operators.schema import Arg, Schema, register
from stoker.operators.tensor.basic import convert

INTERP = types.DALIInterpType
# DALI's rotate offers these two only
_CV_INTERP = {INTERP.INTERP_NN: cv2.INTER_NEAREST, INTERP.INTERP_LINEAR: cv2.INTER_LINEAR}


def sequence_rotated_size(height: int, width: int, angles) -> tuple[int, int]:
    """One canvas for all frames of a sequence rotated by ``angles`` (degrees).

    Each axis covers the largest frame's bounding box (rounded up, with the same small
    tolerance as :func:`rotated_size`), then goes up to odd when more than half of the frames
    ask for odd (each frame asks for the parity of the input extent that lies along the axis:
    H, or W for frames nearer a quarter turn, which swap the axes), to even otherwise. That
    is DALI's canvas as measured: 16x17 at 5 and 45 degrees gives 24x24 (45 alone: 25x24),
    at 10, 80 and 85 degrees 21x20; 15x15 at 80 and 10 degrees 19x19, 20x30 at 5 and 45
    degrees 36x36. One angle gives exactly ``rotated_size``.
    """
    if len(angles) == 1:
        return rotated_size(height, width, float(angles[0]))
    ext_h, ext_w, like_h, like_w = [], [], [], []
    for angle in angles:
        a = math.radians(float(angle))
        c, s = abs(math.cos(a)), abs(math.sin(a))
        ext_w.append(width * c + height * s)
        ext_h.append(width * s + height * c)
        quarter = s >= c - 1e-7
        like_h.append(width if quarter else height)
        like_w.append(height if quarter else width)
    out = []
    for ext, like in ((max(ext_h), like_h), (max(ext_w), like_w)):
        n = math.ceil(ext - 0.01)
        odd = 2 * sum(x % 2 for x in like) > len(like)  # most frames ask for an odd extent
        if n % 2 != odd:
            n += 1
        out.append(max(n, 1))
    return out[0], out[1]


def sequence_rotated_volume_size(in_dhw, axes, angles) -> tuple[int, int, int]:
    """One canvas (D, H, W) for all frames of a volume sequence, frame f rotated by ``angles[f]``
    degrees about ``axes[f]``: DALI's rule of :func:`sequence_rotated_size` in 3D. Each extent
    covers the largest frame's box (``ceil(|R| @ in - 0.01)``), then goes to odd where more than
    half of the frames ask for odd (each frame the parity :func:`rotated_volume_size` gives it)."""
    in_xyz = np.asarray(in_dhw[::-1], np.float32)
    ext = np.zeros(3, np.int64)
    odd = np.zeros(3, np.int64)
    for axis, angle in zip(axes, angles):
        box = np.ceil(np.abs(rotation_3d(axis, float(angle))) @ in_xyz - np.float32(0.01)).astype(np.int64)
        ext = np.maximum(ext, box)
        odd += np.asarray(rotated_volume_size(in_dhw, axis, float(angle))[::-1]) % 2
    ext += (ext % 2) ^ (2 * odd > len(angles))
    return int(ext[2]), int(ext[1]), int(ext[0])


def _sequence_size(op, seq, frames) -> dict:
    """The common canvas of a sequence's frames (see :func:`sequence_rotated_size`, and
    :func:`sequence_rotated_volume_size` for volume sequences, FDHWC / FDHW)."""
    if op.args["keep_size"] or any(fa.get("size") is not None or fa.get("angle") is None for fa in frames):
        return {}
    angles = [float(np.asarray(fa["angle"]).reshape(-1)[0]) for fa in frames]
    if is_volume(op.layout_of(frames[0]), seq.ndim - 1):
        if any(fa.get("axis") is None for fa in frames):
            return {}  # (volume_geometry says that axis is required)
        axes = [np.asarray(fa["axis"], np.float64).reshape(-1) for fa in frames]
        return {"size": list(sequence_rotated_volume_size(seq.shape[1:4], axes, angles))}
    return {"size": list(sequence_rotated_size(seq.shape[1], seq.shape[2], angles))}


@register
@frame_args("angle", "axis", split_sequences=True, common=_sequence_size)
class Rotate(LayoutAware):
    """Rotates each image by ``angle`` degrees (per-sample tensor allowed)."""

    schema = Schema(
        name="rotate",
        legacy_name="Rotate",
        doc="Rotates images counter-clockwise by angle degrees about their centre. The canvas grows to "
            "fit the rotated image unless keep_size=True or size is given; uncovered pixels get fill_value "
            "(or repeat the border when fill_value is not set). Sequences (FHWC) are rotated frame by "
            "frame onto one canvas; angle and axis may be per frame (fn.per_frame). Volumes (DHWC, DHW, or 4D input "
            "without a layout) rotate about axis (x, y, z), right-hand rule, as DALI; size is then (D, H, W).",
        args=[Arg("angle", "float", None, tensor=True, doc="rotation in degrees (required)"),
              Arg("axis", "float_list", None, tensor=True, doc="rotation axis (x, y, z); volumes only, required there"),
              Arg("keep_size", "bool", False, doc="keep the input's size (corners are cut)"),
              Arg("size", "float_list", None, tensor=True, doc="output (H, W), or (D, H, W) for volumes"),
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
        axis = self.args.get("axis")
        if axis is not None and len(axis) != 3:
            raise arg_error("rotate", "axis", f"must be 3 values (x, y, z), got {len(axis)}")
        self.dtype = self.args["dtype"] if self.args["dtype"] is not None else self.args["output_dtype"]

    def geometry(self, args: dict, h: int, w: int) -> tuple[float, tuple[int, int]]:
        """(angle in degrees, output (H, W)) of one ``h`` x ``w`` sample with arguments ``args``
        (shared with the GPU rotate)."""
        angle = args.get("angle")
        if angle is None:
            raise self.error("argument 'angle' is required")
        angle = float(angle)
        if not np.isfinite(angle):
            raise self.error(f"argument 'angle' must be a finite number of degrees, got {angle}")
        if args.get("size") is not None:
            size = [int(round(float(v))) for v in np.asarray(args["size"]).reshape(-1)]
            if not size or min(size) < 0:
                raise self.error(f"argument 'size' must hold non-negative extents (H, W), got {size}")
            return angle, (size[0], size[-1])
        if self.args["keep_size"]:
            return angle, (h, w)
        return angle, rotated_size(h, w, angle)

    def volume_geometry(self, args: dict, in_dhw) -> tuple[np.ndarray, tuple[int, int, int]]:
        """(4x4 output-to-input matrix, output (D, H, W)) of one volume."""
        angle = args.get("angle")
        if angle is None:
            raise self.error("argument 'angle' is required")
        angle = float(np.asarray(angle).reshape(-1)[0])
        if not np.isfinite(angle):
            raise self.error(f"argument 'angle' must be a finite number of degrees, got {angle}")
        axis = args.get("axis")
        if axis is None:
            raise self.error("argument 'axis' is required to rotate a volume (x, y, z), e.g. axis=[0, 0, 1]")
        if args.get("size") is not None:
            size = [int(round(float(v))) for v in np.asarray(args["size"]).reshape(-1)]
            if len(size) != 3 or min(size) < 0:
                raise self.error(f"argument 'size' must hold 3 non-negative extents (D, H, W) for a volume, "
                                 f"got {size}")
            out = tuple(size)
        elif self.args["keep_size"]:
            out = tuple(int(v) for v in in_dhw)
        else:
            out = rotated_volume_size(in_dhw, axis, angle)
        return rotation_volume_matrix(in_dhw, out, axis, angle), out

    def _run_volume(self, img, args):
        full, out_dhw = self.volume_geometry(args, img.shape[:3])
        nearest = INTERP(int(self.args["interp_type"])) == INTERP.INTERP_NN
        out = volume_warp(img, full, out_dhw, self.args["fill_value"], nearest)
        dtype = np.dtype(self.dtype if self.dtype is not None else img.dtype)
        return np.ascontiguousarray(out if out.dtype == dtype else convert(out, dtype))

    def run_sample(self, inputs, args, ctx):
        img = inputs[0]
        layout = self.layout_of(args)
        if is_volume(layout, img.ndim):
            return self._run_volume(img, args)
        if args.get("axis") is not None:
            raise self.error("argument 'axis' applies to volumes only (DHWC, DHW); leave it out for images")
        if img.ndim not in (2, 3) or (layout and layout not in ("HWC", "HW")):
            raise self.error(f"rotate supports HWC/HW images, got shape {img.shape} layout {layout!r}")
        h, w = img.shape[:2]
        angle, out_hw = self.geometry(args, h, w)
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
        if interp == cv2.INTER_NEAREST:  # DALI's rule (floor of the source point), not OpenCV's rounding
            out = nearest_warp(img, _half_centre_matrix(angle, (h, w), out_hw), out_hw[0], out_hw[1], fill)
            return np.ascontiguousarray(out if out.dtype == dtype else to_dtype(out, dtype))
        if channels <= 4:
            out = cv2.warpAffine(src, m, (out_hw[1], out_hw[0]), flags=interp | cv2.WARP_INVERSE_MAP,
                                 borderMode=border, borderValue=value)
        else:
            out = np.stack([cv2.warpAffine(np.ascontiguousarray(src[:, :, c]), m, (out_hw[1], out_hw[0]),
                                           flags=interp | cv2.WARP_INVERSE_MAP, borderMode=border,
                                           borderValue=value[:1]) for c in range(channels)], axis=2)
        out = out.reshape(out_hw[0], out_hw[1], *img.shape[2:])
        return np.ascontiguousarray(out if out.dtype == dtype else to_dtype(out, dtype))


def _half_centre_matrix(angle_deg: float, in_hw, out_hw) -> np.ndarray:
    """3x3 output-to-input matrix in DALI's convention (pixel centres at +0.5): the output centre
    maps to the input centre, turned by ``angle_deg`` as :func:`rotation_matrix`."""
    a = math.radians(angle_deg)
    rot = np.array([[math.cos(a), -math.sin(a)], [math.sin(a), math.cos(a)]])
    co = np.array([out_hw[1] / 2.0, out_hw[0] / 2.0])
    ci = np.array([in_hw[1] / 2.0, in_hw[0] / 2.0])
    return np.vstack([np.hstack([rot, (ci - rot @ co)[:, None]]), [0.0, 0.0, 1.0]])
