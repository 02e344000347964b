"""``resize`` and ``random_resized_crop`` on the CPU.

Sizes and source regions come from :mod:`stoker.operators.image.geometry`
(shared with the GPU), pixels from :mod:`stoker.operators.image.resample`.

``resize`` refuses, as a per-sample error, an output of more pixels than the
pipeline's ``max_pixels`` (default 2**28, the image decoders' limit; 0: no
limit): a small but thin input with ``resize_shorter`` would otherwise ask for
gigapixels (1 x 100000 to 224 x 22,400,000, issue 17). DALI has no such limit;
its ``max_size`` argument, which stoker also takes, caps the output instead.
"""

from __future__ import annotations

import math

import numpy as np

from stoker import types
from stoker.errors import arg_error
from stoker.operators.decoders.cpu import DEFAULT_MAX_PIXELS
from stoker.operators.image import resample_torch
from stoker.operators.image.crop import LayoutAware, spatial_axes_of
from stoker.operators.image.geometry import RESIZE_MODES, resize_plan
from stoker.operators.image.resample import resample
from stoker.operators.random.crop_window import sample_crop_window
from stoker.operators.schema import Arg, Schema, register

INTERP = types.DALIInterpType

_FILTER_ARGS = [
    Arg("interp_type", "interp", INTERP.INTERP_LINEAR, tensor=True,
        doc="interpolation for both shrinking and enlarging (overridden by min_filter / mag_filter)"),
    Arg("min_filter", "interp", None, tensor=True, doc="filter used when shrinking"),
    Arg("mag_filter", "interp", None, tensor=True, doc="filter used when enlarging"),
    Arg("antialias", "bool", True, doc="widen the filter when shrinking (no effect for NN)"),
    Arg("dtype", "dtype", None, doc="output type (default: the input's); integer outputs round and saturate"),
    Arg("image_type", "image_type", None, doc="accepted for compatibility; ignored"),
    Arg("temp_buffer_hint", "int", 0, doc="accepted for compatibility; ignored"),
    Arg("minibatch_size", "int", 32, doc="accepted for compatibility; ignored"),
]


def resize_filters(args: dict) -> tuple:
    """(minification, magnification) filters of resize arguments: ``min_filter`` / ``mag_filter``, else
    ``interp_type``."""
    base = INTERP(int(args["interp_type"]))
    mn = args.get("min_filter")
    mg = args.get("mag_filter")
    return (INTERP(int(mn)) if mn is not None else base), (INTERP(int(mg)) if mg is not None else base)


def _flat(v) -> list[float] | None:
    if v is None:
        return None
    return [float(x) for x in np.asarray(v, dtype=np.float64).reshape(-1)]


@register
class Resize(LayoutAware):
    """Resizes images (HWC, HW, DHWC, FHWC...) like DALI's ``fn.resize``."""

    schema = Schema(
        name="resize",
        legacy_name="Resize",
        doc="Resizes images. Give the output size with resize_x/resize_y(/resize_z), size, "
            "resize_shorter or resize_longer; missing extents keep the aspect ratio.",
        args=[
            Arg("resize_x", "float", 0.0, tensor=True, doc="output width (0: from the others)"),
            Arg("resize_y", "float", 0.0, tensor=True, doc="output height (0: from the others)"),
            Arg("resize_z", "float", 0.0, tensor=True, doc="output depth for volumes (0: from the others)"),
            Arg("size", "float_list", None, tensor=True,
                doc="output extents in layout order, e.g. (H, W); 0 entries are computed"),
            Arg("resize_shorter", "float", 0.0, tensor=True,
                doc="length of the shorter side; the longer keeps the aspect ratio"),
            Arg("resize_longer", "float", 0.0, tensor=True,
                doc="length of the longer side; the shorter keeps the aspect ratio"),
            Arg("mode", "str", "default", doc="'default', 'stretch', 'not_larger' or 'not_smaller'"),
            Arg("max_size", "float_list", None, doc="limit of the output extents (one value or one per axis)"),
            Arg("roi_start", "float_list", None, tensor=True, doc="start of the input region (layout order)"),
            Arg("roi_end", "float_list", None, tensor=True, doc="end of the input region (layout order)"),
            Arg("roi_relative", "bool", False, doc="ROI given as fractions of the input extents"),
            Arg("subpixel_scale", "bool", True,
                doc="fractional output sizes keep their exact scale (the ROI adjusts)"),
            Arg("save_attrs", "bool", False, doc="second output: the input's spatial shape (int32)"),
            *_FILTER_ARGS,
        ],
        devices=("cpu",),
        num_outputs=lambda a: 2 if a.get("save_attrs") else 1,
    )

    def setup(self):
        a = self.args
        if a["mode"] not in RESIZE_MODES:
            raise arg_error("resize", "mode", f"must be one of {', '.join(RESIZE_MODES)}, got {a['mode']!r}")
        if a.get("resize_shorter") and a.get("resize_longer"):  # (absent when given per sample)
            raise arg_error("resize", "resize_shorter", "cannot be used together with resize_longer")
        if a["max_size"] is not None and any(m < 0 for m in a["max_size"]):
            raise arg_error("resize", "max_size", "must not be negative")
        if len(self.size_methods(())) > 1:
            raise arg_error("resize", self.size_methods(())[1], self._methods_message(self.size_methods(())))
        self._plans: dict = {}  # resize plans by input size and per-sample size arguments
        self.max_output_pixels = DEFAULT_MAX_PIXELS  # the pipeline's max_pixels once bound (bind_pipeline)
        # Import torch for the 8-bit fast path now, on the thread that builds the pipeline, rather
        # than inside the first batch on a pool thread (see resample_torch). Not for a GPU resize:
        # a GPU pipeline would pay seconds of import in its first batch for nothing.
        if self.device == "cpu":
            resample_torch.available()

    def bind_pipeline(self, pipe) -> None:
        """Take the pipeline's max_pixels as the largest output (None there: the default 2**28)."""
        limit = getattr(pipe, "max_pixels", None)
        if limit is not None:
            self.max_output_pixels = limit

    _SEPARATE = ("resize_x", "resize_y", "resize_z")

    def size_methods(self, tensor_args) -> list[str]:
        """Which ways of giving the output size are used (DALI allows exactly one)."""
        a = self.args
        used = []
        if any(a.get(k) for k in self._SEPARATE) or any(k in tensor_args for k in self._SEPARATE):
            used.append("resize_x/resize_y/resize_z")
        for k in ("size", "resize_shorter", "resize_longer"):
            if (a.get(k) is not None and a.get(k) != 0) or k in tensor_args:
                used.append(k)
        return used

    @staticmethod
    def _methods_message(used) -> str:
        got = ", ".join(used) if used else "none"
        return ("give the output size in exactly one way: resize_x/resize_y(/resize_z), size, resize_shorter "
                f"or resize_longer (got: {got})")

    run_cpu_wraps_samples = True  # run_cpu only checks the size arguments (Operator.run_cpu_wraps_samples)

    def run_cpu(self, batch, inputs, arg_inputs):
        used = self.size_methods(arg_inputs)
        if len(used) != 1:
            raise arg_error("resize", used[1] if used else "size", self._methods_message(used))
        return super().run_cpu(batch, inputs, arg_inputs)

    def requested(self, args: dict, nd: int) -> list[float]:
        """Requested extents (outermost first) from size / resize_x,y,z."""
        size = _flat(args.get("size"))
        if size is not None:
            if len(size) == 1:
                size = size * nd
            if len(size) != nd:
                raise ValueError(f"argument 'size' has {len(size)} values; the sample has {nd} spatial axes")
            return size
        xyz = [float(args.get("resize_z") or 0), float(args.get("resize_y") or 0), float(args.get("resize_x") or 0)]
        return xyz[3 - nd:]

    def run_sample(self, inputs, args, ctx):
        img = inputs[0]
        axes, _ = spatial_axes_of(self.layout_of(args), img.ndim)
        in_size = [img.shape[a] for a in axes]
        if min(in_size) < 1:
            raise self.error(f"cannot resize an empty sample of shape {img.shape}")
        requested = self.requested(args, len(axes))
        shorter, longer = float(args.get("resize_shorter") or 0), float(args.get("resize_longer") or 0)
        roi_start, roi_end = _flat(args.get("roi_start")), _flat(args.get("roi_end"))
        # The plan depends only on these values: cache it (training data has few distinct sizes),
        # which takes its Python arithmetic out of the per-sample path that holds the GIL.
        key = (tuple(in_size), tuple(requested), shorter, longer,
               None if roi_start is None else tuple(roi_start), None if roi_end is None else tuple(roi_end))
        plan = self._plans.get(key)
        if plan is None:
            plan = resize_plan(in_size, requested, mode=self.args["mode"], max_size=self.args["max_size"],
                               resize_shorter=shorter, resize_longer=longer, roi_start=roi_start,
                               roi_end=roi_end, roi_relative=self.args["roi_relative"],
                               subpixel_scale=self.args["subpixel_scale"])
            if len(self._plans) >= 8192:
                self._plans.clear()
            self._plans[key] = plan
        pixels = math.prod(plan.out_size)
        if self.max_output_pixels and pixels > self.max_output_pixels:
            method = "resize_shorter" if shorter else "resize_longer" if longer else \
                "size" if args.get("size") is not None else "resize_x/resize_y"
            raise self.error(
                f"argument '{method}': the {'x'.join(map(str, in_size))} input would become "
                f"{'x'.join(map(str, plan.out_size))} = {pixels} pixels, more than the pipeline's "
                f"max_pixels={self.max_output_pixels}; cap the output with max_size, or raise the pipeline's "
                "max_pixels (0: no limit)")
        mn, mg = resize_filters(args)
        out = resample(img, axes, plan.out_size, plan.lo, plan.hi, min_filter=mn, mag_filter=mg,
                       antialias=self.args["antialias"], dtype=self.args["dtype"])
        if self.args["save_attrs"]:
            return out, np.asarray(in_size, np.int32)
        return out

    def output_layouts(self, input_layouts):
        lay = input_layouts[0] if input_layouts else ""
        return [lay, ""] if self.args["save_attrs"] else [lay]


@register
class RandomResizedCrop(LayoutAware):
    """A random window (area fraction, aspect ratio) of each image, resized to ``size``."""

    schema = Schema(
        name="random_resized_crop",
        legacy_name="RandomResizedCrop",
        doc="Crops a random window of each image (its area and aspect ratio drawn from random_area and "
            "random_aspect_ratio) and resizes it to size.",
        args=[
            Arg("size", "float_list", None, doc="output (H, W) (required)"),
            Arg("random_area", "float_list", [0.08, 1.0], doc="range of the window's area fraction"),
            Arg("random_aspect_ratio", "float_list", [3 / 4, 4 / 3], doc="range of the window's width/height"),
            Arg("num_attempts", "int", 10, doc="windows tried before falling back"),
            *_FILTER_ARGS,
        ],
        devices=("cpu",),
        random=True,
    )

    def setup(self):
        a = self.args
        if a["size"] is None:
            raise arg_error("random_resized_crop", "size", "is required")
        size = a["size"] * 2 if len(a["size"]) == 1 else a["size"]
        if len(size) != 2 or min(size) <= 0:
            raise arg_error("random_resized_crop", "size", f"must be 1 or 2 positive extents, got {a['size']}")
        self.size = tuple(int(round(s)) for s in size)
        ranges = []
        for name in ("random_area", "random_aspect_ratio"):
            v = a[name]
            if len(v) == 1:
                v = v * 2
            if len(v) != 2 or v[0] > v[1] or v[0] <= 0:
                raise arg_error("random_resized_crop", name, f"must be a range (lo, hi) with 0 < lo <= hi, got {v}")
            ranges.append((float(v[0]), float(v[1])))
        self.area, self.aspect = ranges

    def run_sample(self, inputs, args, ctx):
        img = inputs[0]
        axes, _ = spatial_axes_of(self.layout_of(args), img.ndim)
        if len(axes) != 2:
            raise self.error(f"expects 2D images, got a sample of shape {img.shape}")
        h, w = img.shape[axes[0]], img.shape[axes[1]]
        y, x, ch, cw = sample_crop_window(ctx.rng, h, w, self.area, self.aspect,
                                          self.args["num_attempts"])
        mn, mg = resize_filters(args)
        return resample(img, axes, self.size, (y, x), (y + ch, x + cw), min_filter=mn, mag_filter=mg,
                        antialias=self.args["antialias"], dtype=self.args["dtype"])
