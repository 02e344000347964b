"""``random.beta`` and ``random_crop_generator``.

``random.beta`` draws each sample from the sample's own counter-based stream (``ctx.rng``), as the
other generators: a sample's values depend only on (seed, operator, iteration, sample), not on the
other samples' ``alpha``/``beta`` or the thread count. ``random_crop_generator`` uses the same window sampler as
``decoders.image_random_crop`` and ``random_resized_crop`` on each sample's own stream.
Values differ from DALI's (another generator); the distributions are the same.
"""

from __future__ import annotations

import numpy as np

from stoker import types
from stoker.errors import arg_error
from stoker.operators.base import Operator
from stoker.operators.random.crop_window import sample_crop_window
from stoker.operators.schema import Arg, Schema, register


@register
class Beta(Operator):
    """Values from a beta distribution."""

    schema = Schema(
        name="random.beta",
        doc="Random values from the beta distribution Beta(alpha, beta), in [0, 1]. Without an input "
            "each sample has ``shape`` (default: a scalar); with one, sample i has the shape of input i.",
        args=[Arg("alpha", "float", 1.0, tensor=True, doc="first shape parameter, > 0"),
              Arg("beta", "float", 1.0, tensor=True, doc="second shape parameter, > 0"),
              Arg("shape", "int_list", None, tensor=True, doc="shape of each sample (default: a scalar)"),
              Arg("dtype", "dtype", types.FLOAT, doc="FLOAT or FLOAT64")],
        inputs=(0, 1),
        devices=("cpu",),
        random=True,
    )

    def setup(self):
        a = self.args
        if np.dtype(a["dtype"]) not in (np.float32, np.float64):
            raise arg_error("random.beta", "dtype", f"must be FLOAT or FLOAT64, got {np.dtype(a['dtype'])}")
        for k in ("alpha", "beta"):
            if a.get(k) is not None and a[k] <= 0:
                raise arg_error("random.beta", k, f"must be positive, got {a[k]}")
        if a.get("shape") is not None and any(s < 0 for s in a["shape"]):
            raise arg_error("random.beta", "shape", f"must not be negative, got {a['shape']}")

    def output_layouts(self, input_layouts):
        return [""]

    def run_sample(self, inputs, args, ctx):
        al, be = float(args["alpha"]), float(args["beta"])
        for k, v in (("alpha", al), ("beta", be)):
            if not v > 0:
                raise self.error(f"argument '{k}' must be positive, got {v}")
        shape = np.shape(inputs[0]) if inputs else \
            tuple(int(s) for s in np.asarray(args["shape"] if args.get("shape") is not None else []).reshape(-1))
        return np.asarray(ctx.rng.generator().beta(al, be, size=shape)).astype(self.args["dtype"])

def _range_arg(args, name, default):
    v = args.get(name)
    v = default if v is None else [float(x) for x in np.asarray(v, np.float64).reshape(-1)]
    # an area fraction may start at 0; an aspect ratio must be positive
    if len(v) != 2 or v[0] > v[1] or v[0] < 0 or (v[0] == 0 and name != "random_area"):
        raise arg_error("random_crop_generator", name, f"must be (lo, hi) with 0 < lo <= hi, got {v}")
    return v


@register
class RandomCropGenerator(Operator):
    """Random crop windows (anchor and shape) for images of the given shapes."""

    schema = Schema(
        name="random_crop_generator",
        legacy_name="RandomCropGenerator",
        doc="For each input shape (1D: HW or HWC) draws a crop window whose area fraction is uniform in "
            "``random_area`` and whose aspect ratio (width / height) is log-uniform in "
            "``random_aspect_ratio``, trying ``num_attempts`` times before falling back to the whole "
            "image (clipped to the allowed ratio and area). Outputs the anchor (y, x) and shape (h, w) as "
            "int32, ready for ``fn.slice``.",
        args=[Arg("random_area", "float_list", [0.08, 1.0], tensor=True, doc="range of the area fraction"),
              Arg("random_aspect_ratio", "float_list", [3 / 4, 4 / 3], tensor=True,
                  doc="range of the aspect ratio"),
              Arg("num_attempts", "int", 10, doc="random windows tried before the fallback")],
        inputs=(1, 1),
        devices=("cpu",),
        num_outputs=2,
        random=True,
    )

    def setup(self):
        a = self.args
        _range_arg(a, "random_area", [0.08, 1.0])
        _range_arg(a, "random_aspect_ratio", [3 / 4, 4 / 3])
        if a["num_attempts"] < 1:
            raise arg_error("random_crop_generator", "num_attempts", f"must be >= 1, got {a['num_attempts']}")

    def output_layouts(self, input_layouts):
        return ["", ""]

    def run_sample(self, inputs, args, ctx):
        shape = np.asarray(inputs[0]).reshape(-1)
        if shape.size < 2 or shape.dtype.kind not in "iuf":
            raise self.error(f"the input must be a shape with at least 2 extents (HW or HWC), got {shape.tolist()}")
        h, w = int(shape[0]), int(shape[1])
        if h < 0 or w < 0:
            raise self.error(f"the input shape has negative extents: {shape.tolist()}")
        area = _range_arg(args, "random_area", [0.08, 1.0])
        aspect = _range_arg(args, "random_aspect_ratio", [3 / 4, 4 / 3])
        y, x, ch, cw = sample_crop_window(ctx.rng, h, w, area, aspect, self.args["num_attempts"])
        return np.array([y, x], np.int32), np.array([ch, cw], np.int32)
