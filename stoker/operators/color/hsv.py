"""``hue``, ``saturation`` and ``hsv``: hue shift (degrees), saturation and value scaling of
RGB images, as one linear map per sample.

Like DALI, the HSV adjustment is approximated by a 3x3 matrix in RGB space:
the colour goes to YIQ, the chroma plane (I, Q) is rotated by the hue delta
and scaled by the saturation, everything is scaled by the value, and the
result goes back with the exact inverse matrix (so neutral arguments are the
identity). Computed in float32 with cv2.transform, then rounded (half up) and
saturated to the output type; no rescaling between types (a float image in
[0, 1] written as uint8 stays in [0, 1]).

Inputs are channel-last with 3 channels (HWC, FHWC, DHWC). ``image_type=BGR``
(hue, saturation, color_twist) applies the same map to BGR pixels; DALI 2.4's
CPU operators ignore that argument and weigh BGR pixels as RGB, stoker honours it.
"""

from __future__ import annotations

import numpy as np

from stoker import types
from stoker.errors import arg_error
from stoker.operators.color._common import (
    apply_affine,
    check_channels_last,
    hsv_matrices,
    hsv_matrix,
    scalar,
    to_dtype,
)
from stoker.operators.image.crop import LayoutAware
from stoker.operators.per_frame import frame_args
from stoker.operators.schema import Arg, Schema, register

HUE_ARG = Arg("hue", "float", 0.0, tensor=True, doc="hue delta in degrees (wraps around at 360)")
SATURATION_ARG = Arg("saturation", "float", 1.0, tensor=True, doc="saturation multiplier (>= 0); 0 gives grey")
IMAGE_TYPE_ARG = Arg("image_type", "image_type", types.RGB, doc="colour space of input and output: RGB or BGR")


@frame_args("hue", "saturation", "value", "brightness", "contrast")  # each subclass's own; all per frame
class LinearColor(LayoutAware):
    """Shared body: build this sample's matrix (and offset), apply it, convert the type."""

    default_dtype = None  # None: the input's
    # (NumPy passes over the image, each letting go of the GIL: base.Operator says why; hsv and
    # color_twist after a decode ran 10-11 % faster in chain workers at 2 threads on 2 cores)
    prefers_worker_processes = True

    def setup(self):
        it = self.args.get("image_type")
        if it is not None and it not in (types.RGB, types.BGR):
            raise arg_error(self.schema.name, "image_type", f"must be types.RGB or types.BGR, got {it}")
        self.bgr = it == types.BGR

    def nonnegative(self, args, name):
        v = scalar(self, args, name, 1.0)
        if v < 0:
            raise self.error(f"argument '{name}' must not be negative, got {v}")
        return v

    def nonnegative_column(self, column, name):
        """:meth:`nonnegative` for the batch: ``column(name, 1.0)`` (see :meth:`affine_batch`),
        ValueError if a sample's value is negative (the per-sample rule then names it)."""
        v = column(name, 1.0)
        if v is not None and (v < 0).any():
            raise ValueError(f"argument '{name}' must not be negative")
        return v

    def affine(self, args, dtype):
        """(matrix, offset) of this sample."""
        raise NotImplementedError

    def affine_batch(self, column, dtype):
        """:meth:`affine` for every sample at once: ``(matrices (n, 3, 3), offsets (n, 3))``, bit for
        bit the per-sample ones. ``column(name, default)`` gives an argument's float64 values for
        the batch (``_common.scalar_column``), or None where they cannot be read in one step; then
        this returns None and the caller plans sample by sample."""
        raise NotImplementedError

    def run_sample(self, inputs, args, ctx):
        img = np.asarray(inputs[0])
        check_channels_last(self, img, self.layout_of(args), (3,))
        if img.dtype.kind not in "iuf":
            raise self.error(f"expects numeric input, got {img.dtype}")
        out_type = np.dtype(self.args.get("dtype") or self.default_dtype or img.dtype)
        matrix, offset = self.affine(args, img.dtype)
        return to_dtype(apply_affine(img, matrix, offset), out_type)


@register
class Hsv(LinearColor):
    """Hue delta, saturation and value multipliers on RGB images; writes uint8 by default."""

    schema = Schema(
        name="hsv",
        doc="Shifts hue (degrees) and scales saturation and value of RGB images with a linear map "
            "in YIQ space. The output type defaults to UINT8 (as DALI).",
        args=[HUE_ARG, SATURATION_ARG,
              Arg("value", "float", 1.0, tensor=True, doc="value (brightness) multiplier"),
              Arg("dtype", "dtype", types.UINT8, doc="output type (default UINT8, whatever the input)")],
    )

    def affine(self, args, dtype):
        m = hsv_matrix(scalar(self, args, "hue", 0.0), scalar(self, args, "saturation", 1.0),
                       scalar(self, args, "value", 1.0))
        return m, np.zeros(3)

    def affine_batch(self, column, dtype):
        cols = column("hue", 0.0), column("saturation", 1.0), column("value", 1.0)
        if any(c is None for c in cols):
            return None
        return hsv_matrices(*cols), np.zeros((len(cols[0]), 3))


@register
class Hue(LinearColor):
    """Shifts the hue of RGB (or BGR) images by ``hue`` degrees."""

    schema = Schema(
        name="hue",
        doc="Shifts the hue of RGB images by hue degrees (linear map in YIQ space, as hsv).",
        args=[HUE_ARG, IMAGE_TYPE_ARG, Arg("dtype", "dtype", None, doc="output type (default: the input's)")],
    )

    def affine(self, args, dtype):
        return hsv_matrix(scalar(self, args, "hue", 0.0), bgr=self.bgr), np.zeros(3)

    def affine_batch(self, column, dtype):
        hue = column("hue", 0.0)
        if hue is None:
            return None
        ones = np.ones(len(hue))  # hsv_matrix's default saturation and value
        return hsv_matrices(hue, ones, ones, bgr=self.bgr), np.zeros((len(hue), 3))


@register
class Saturation(LinearColor):
    """Scales the saturation of RGB (or BGR) images."""

    schema = Schema(
        name="saturation",
        doc="Scales the saturation of RGB images (0: grey, 1: unchanged), as hsv does.",
        args=[SATURATION_ARG, IMAGE_TYPE_ARG, Arg("dtype", "dtype", None, doc="output type (default: the input's)")],
    )

    def affine(self, args, dtype):
        return hsv_matrix(saturation=self.nonnegative(args, "saturation"), bgr=self.bgr), np.zeros(3)

    def affine_batch(self, column, dtype):
        sat = self.nonnegative_column(column, "saturation")
        if sat is None:
            return None
        n = len(sat)
        return hsv_matrices(np.zeros(n), sat, np.ones(n), bgr=self.bgr), np.zeros((n, 3))
