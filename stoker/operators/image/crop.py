"""``crop``: a window of each image at a normalized position, with DALI's anchor rule."""

from __future__ import annotations

import numpy as np

from stoker.errors import arg_error
from stoker.operators.base import Operator
from stoker.operators.image.geometry import crop_window
from stoker.operators.schema import Arg, Schema, register
from stoker.operators.tensor.basic import convert

OOB_POLICIES = ("error", "pad", "trim_to_shape")

CROP_ARGS = [
    Arg("crop", "float_list", None, tensor=True, doc="window extents in layout order, e.g. (H, W)"),
    Arg("crop_h", "float", 0.0, tensor=True, doc="window height (fractions are truncated)"),
    Arg("crop_w", "float", 0.0, tensor=True, doc="window width"),
    Arg("crop_d", "float", 0.0, tensor=True, doc="window depth (volumes)"),
    Arg("crop_pos_x", "float", 0.5, tensor=True, doc="normalized horizontal position in [0, 1]"),
    Arg("crop_pos_y", "float", 0.5, tensor=True, doc="normalized vertical position in [0, 1]"),
    Arg("crop_pos_z", "float", 0.5, tensor=True, doc="normalized depth position in [0, 1]"),
    Arg("out_of_bounds_policy", "str", "error", doc="'error', 'pad' (with fill_values) or 'trim_to_shape'"),
    Arg("fill_values", "float_list", [0.0], doc="padding value, one or one per channel"),
]


def spatial_axes_of(layout: str, ndim: int) -> tuple[list[int], int | None]:
    """(D/H/W axes, channel axis) of a sample; without a layout: HW, HWC or DHWC by rank."""
    if layout and len(layout) == ndim:
        axes = [i for i, ch in enumerate(layout) if ch in "DHW"]
        return axes, (layout.index("C") if "C" in layout else None)
    if ndim == 2:
        return [0, 1], None
    if ndim == 3:
        return [0, 1], 2
    if ndim == 4:
        return [0, 1, 2], 3
    raise ValueError(f"cannot tell the spatial axes of a {ndim}D sample without a layout")


def check_crop_args(op: str, args: dict) -> None:
    if args["out_of_bounds_policy"] not in OOB_POLICIES:
        raise arg_error(op, "out_of_bounds_policy",
                        f"must be one of {', '.join(OOB_POLICIES)}, got {args['out_of_bounds_policy']!r}")


def requested_window(args: dict, nd: int) -> tuple[list[float] | None, list[float]]:
    """(extents or None when no crop is asked, normalized positions), outermost axis first."""
    names = ["crop_pos_z", "crop_pos_y", "crop_pos_x"][3 - nd:]
    pos = [float(args.get(n, 0.5)) for n in names]
    for n, p in zip(names, pos):
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"argument '{n}' must be in [0, 1], got {p}")
    crop = args.get("crop")
    if crop is not None:
        ext = [float(c) for c in np.asarray(crop, np.float64).reshape(-1)]
        if len(ext) == 1:
            ext = ext * nd
        if len(ext) != nd:
            raise ValueError(f"argument 'crop' has {len(ext)} values; the sample has {nd} spatial axes")
        return ext, pos
    hwd = [float(args.get("crop_d") or 0), float(args.get("crop_h") or 0), float(args.get("crop_w") or 0)][3 - nd:]
    if not any(hwd):
        return None, pos
    return hwd, pos


def crop_array(img: np.ndarray, axes: list[int], channel_axis: int | None, anchors: list[int],
               extents: list[int], policy: str, fill: list[float], op: str) -> np.ndarray:
    """Cuts ``img`` to the window; ``policy`` says what happens where it leaves the image."""
    for a, e, ax in zip(anchors, extents, axes):
        n = img.shape[ax]
        if e < 1:
            raise ValueError(f"{op}: crop extent must be at least 1, got {e}")
        if (a < 0 or a + e > n) and policy == "error":
            raise ValueError(f"{op}: the crop window [{a}, {a + e}) leaves the sample's axis of extent {n} "
                             f"(shape {img.shape}); use out_of_bounds_policy='pad' or 'trim_to_shape'")
    index = [slice(None)] * img.ndim
    for a, e, ax in zip(anchors, extents, axes):
        index[ax] = slice(max(a, 0), min(a + e, img.shape[ax]))
    inner = img[tuple(index)]
    if policy != "pad" or all(a >= 0 and a + e <= img.shape[ax] for a, e, ax in zip(anchors, extents, axes)):
        return inner
    shape = list(img.shape)
    for e, ax in zip(extents, axes):
        shape[ax] = e
    out = np.empty(shape, img.dtype)
    out[...] = fill_array(fill, img.ndim, channel_axis, img.shape, img.dtype, op)
    dst = [slice(None)] * img.ndim
    for a, ax in zip(anchors, axes):
        lo = max(-a, 0)
        dst[ax] = slice(lo, lo + inner.shape[ax])
    out[tuple(dst)] = inner
    return out


def fill_array(fill: list[float], ndim: int, channel_axis: int | None, shape, dtype, op: str) -> np.ndarray:
    """Fill values shaped to broadcast over a sample (per channel when several are given)."""
    vals = np.asarray(fill, np.float64)
    if vals.size > 1:
        if channel_axis is None or shape[channel_axis] != vals.size:
            raise ValueError(f"{op}: {vals.size} fill_values do not match the sample's channels (shape {shape})")
        bshape = [1] * ndim
        bshape[channel_axis] = vals.size
        vals = vals.reshape(bshape)
    else:
        vals = vals.reshape(())
    return convert(vals, np.dtype(dtype)) if np.dtype(dtype).kind in "iu" else vals.astype(dtype)


class LayoutAware(Operator):
    """Hands the input batch's layout to run_sample as ``args["__layout"]`` (without
    storing it on the instance, which eager mode may share between threads)."""

    run_cpu_wraps_samples = True  # run_cpu only adds "__layout" (Operator.run_cpu_wraps_samples)

    def run_cpu(self, batch, inputs, arg_inputs):
        layout = inputs[0].layout() if inputs else ""
        n = len(inputs[0]) if inputs else batch.batch_size
        return super().run_cpu(batch, inputs, {**arg_inputs, "__layout": [layout] * n})

    def sample_args(self, arg_inputs, i):
        """As Operator's; where the only per-sample entry is the input's layout (no argument
        varies by sample), one dictionary per layout, the same object for every sample (no copy
        per sample; :class:`Windowed` recognises its window arguments as the operator's own)."""
        if len(arg_inputs) == 1 and "__layout" in arg_inputs:
            layout = arg_inputs["__layout"][i]
            args = self._args_by_layout.get(layout)
            if args is None:
                args = self._args_by_layout[layout] = {**self.args, "__layout": layout}
            return args
        return super().sample_args(arg_inputs, i)

    @property
    def _args_by_layout(self) -> dict:
        return self.__dict__.setdefault("_layout_args", {})

    @staticmethod
    def layout_of(args: dict) -> str:
        return str(args.get("__layout") or "")


# the arguments a window depends on (with the sample's shape, its layout and ``rounding``)
WINDOW_ARGS = ("crop", "crop_h", "crop_w", "crop_d", "crop_pos_x", "crop_pos_y", "crop_pos_z")


class Windowed(LayoutAware):
    """A LayoutAware operator with :data:`CROP_ARGS` and ``rounding`` (crop,
    crop_mirror_normalize): its window per sample from :meth:`window_plan`, shared by the
    samples of one shape and layout while the window's arguments are the operator's own. (The
    windows of a validation pipeline repeat; working them out for every sample was most of
    crop_mirror_normalize's Python under the GIL.)"""

    def window_plan(self, shape: tuple, args: dict):
        """(axes, channel axis, window) of a sample of ``shape``: its D/H/W axes, its channel axis,
        and the window (anchors, extents, whether it lies inside the sample) or None when no crop
        is asked. Raises ValueError for a window position outside [0, 1]."""
        if any(args.get(k) is not self.args.get(k) for k in WINDOW_ARGS):
            return self._window_plan(shape, args)  # (the window varies by sample)
        plans = self.__dict__.setdefault("_window_plans", {})
        key = (shape, self.layout_of(args))
        plan = plans.get(key)
        if plan is None:
            if len(plans) >= 1024:
                plans.clear()
            plan = plans[key] = self._window_plan(shape, args)
        return plan

    def _window_plan(self, shape: tuple, args: dict):
        axes, ch = spatial_axes_of(self.layout_of(args), len(shape))
        ext, pos = requested_window(args, len(axes))
        if ext is None:
            return axes, ch, None
        # As DALI: an extent below one pixel (0, 0.5, negative) keeps that axis whole.
        ext = [e if int(e) >= 1 else shape[a] for e, a in zip(ext, axes)]
        anchors, extents = crop_window([shape[a] for a in axes], ext, pos, self.args["rounding"])
        inside = all(a >= 0 and a + e <= shape[x] for a, e, x in zip(anchors, extents, axes))
        return axes, ch, (anchors, extents, inside)


@register
class Crop(Windowed):
    """Cuts a window of each sample (HWC, CHW, DHWC ...)."""

    schema = Schema(
        name="crop",
        legacy_name="Crop",
        doc="Crops each sample to a window of extent crop (or crop_h/crop_w/crop_d) whose position is "
            "given by crop_pos_x/y/z in [0, 1]; the anchor is round(pos * (in - crop)).",
        args=[*CROP_ARGS,
              Arg("rounding", "str", "round", doc="'round' (halves away from zero) or 'truncate': how the "
                                                   "window's anchor is made whole"),
              Arg("dtype", "dtype", None, doc="output type (default: the input's)"),
              Arg("output_dtype", "dtype", None, doc="deprecated name of dtype"),
              Arg("image_type", "image_type", None, doc="accepted for compatibility; ignored")],
        devices=("cpu",),
    )

    def setup(self):
        check_crop_args("crop", self.args)
        if self.args["rounding"] not in ("round", "truncate"):
            raise arg_error("crop", "rounding", f"must be 'round' or 'truncate', got {self.args['rounding']!r}")
        self.dtype = _dtype_or_alias("crop", self.args, "output_dtype")

    def run_sample(self, inputs, args, ctx):
        img = inputs[0]
        axes, ch, window = self.window_plan(img.shape, args)
        out = img
        if window is not None:
            anchors, extents, _ = window
            out = crop_array(img, axes, ch, anchors, extents, self.args["out_of_bounds_policy"],
                             self.args["fill_values"], "crop")
        if self.dtype is not None and out.dtype != self.dtype:
            return convert(out, self.dtype)
        return np.array(out, order="C", copy=True)  # a new buffer, never a view of the input


def _dtype_or_alias(op: str, args: dict, alias: str):
    """``dtype``, or its deprecated name ``alias`` (DALI still accepts both, never together)."""
    if args.get(alias) is None:
        return args["dtype"]
    if args["dtype"] is not None:
        raise arg_error(op, alias, "is a deprecated name of 'dtype'; give only one of them")
    return args[alias]
