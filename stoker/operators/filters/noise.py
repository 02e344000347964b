"""Noise operators: ``noise.gaussian``, ``noise.salt_and_pepper``, ``noise.shot``.

Output shape and type are the input's; integer outputs are rounded (half up)
and saturated. Random values depend only on (seed, iteration, sample), not on
threads. All three draw each element's randomness from ``element_rng`` (Philox
keyed by the sample's stream), which their GPU kernels compute too: the same
values on either device. ``noise.shot``'s Poisson counts come from
``element_poisson`` (a CDF search for small lambdas, PTRS with a bounded number of
rounds above), whose steps the kernel repeats exactly. They differ from DALI's
values (other generators); the distributions are the same.

``noise.shot``'s ``factor`` defaults to 20, DALI's documented (and schema)
default; DALI 2.4's CPU operator was seen to quantize by 12 when the argument
is left out, so pass ``factor`` explicitly where the two must agree.
"""

from __future__ import annotations

import numpy as np

from stoker.errors import arg_error
from stoker.operators.color._common import scalar, to_dtype
from stoker.operators.filters import element_poisson, element_rng
from stoker.operators.image.crop import LayoutAware
from stoker.operators.schema import Arg, Schema, register


def _numeric(op, img):
    img = np.asarray(img)
    if img.dtype.kind not in "iuf":
        raise op.error(f"expects numeric input, got {img.dtype}")
    return img


@register
class GaussianNoise(LayoutAware):
    """Adds independent normal noise to every element."""

    schema = Schema(
        name="noise.gaussian",
        doc="Adds normal noise N(mean, stddev) to every element (channels independently).",
        args=[Arg("mean", "float", 0.0, tensor=True, doc="mean of the noise"),
              Arg("stddev", "float", 1.0, tensor=True, doc="standard deviation of the noise (>= 0)")],
        random=True,
    )

    def setup(self):
        if self.args.get("stddev") is not None and self.args["stddev"] < 0:
            raise arg_error("noise.gaussian", "stddev", f"must not be negative, got {self.args['stddev']}")

    def params(self, args) -> tuple[np.float32, np.float32]:
        """This sample's (mean, stddev) as float32, checked (shared with the GPU kernel)."""
        mean, std = scalar(self, args, "mean", 0.0), scalar(self, args, "stddev", 1.0)
        if std < 0:
            raise self.error(f"argument 'stddev' must not be negative, got {std}")
        return np.float32(mean), np.float32(std)

    def run_sample(self, inputs, args, ctx):
        img = _numeric(self, inputs[0])
        mean, std = self.params(args)
        noise = element_rng.normals(element_rng.sample_key(ctx.rng), img.size).astype(np.float32)
        noise *= std
        noise += mean
        noise = noise.reshape(img.shape)
        noise += img
        return to_dtype(noise, img.dtype)


@register
class SaltAndPepperNoise(LayoutAware):
    """Replaces a fraction ``prob`` of the pixels (or values) with salt or pepper."""

    schema = Schema(
        name="noise.salt_and_pepper",
        doc="Sets a fraction prob of the pixels to salt_val (a fraction salt_vs_pepper of them) or pepper_val; "
            "all channels of a pixel alike unless per_channel.",
        args=[Arg("prob", "float", 0.05, tensor=True, doc="probability that a value is replaced, in [0, 1]"),
              Arg("salt_vs_pepper", "float", 0.5, tensor=True, doc="probability that a replaced value is salt"),
              Arg("salt_val", "float", None, tensor=True,
                  doc="value of salt (default: 1.0 for floats, the type's maximum for integers)"),
              Arg("pepper_val", "float", None, tensor=True,
                  doc="value of pepper (default: -1.0 for floats, the type's minimum for integers)"),
              Arg("per_channel", "bool", False, doc="draw each channel independently")],
        random=True,
    )

    def setup(self):
        for name in ("prob", "salt_vs_pepper"):
            v = self.args.get(name)
            if v is not None and not 0.0 <= v <= 1.0:
                raise arg_error("noise.salt_and_pepper", name, f"must be in [0, 1], got {v}")

    def params(self, dtype, args) -> tuple[int, int, float, float]:
        """This sample's (salt threshold, replace threshold, salt, pepper), checked (shared with
        the GPU kernel): a draw's 32-bit word below the salt threshold gives salt, below the
        other pepper; salt and pepper as values of ``dtype``."""
        prob, svp = scalar(self, args, "prob", 0.05), scalar(self, args, "salt_vs_pepper", 0.5)
        for name, v in (("prob", prob), ("salt_vs_pepper", svp)):
            if not 0.0 <= v <= 1.0:
                raise self.error(f"argument '{name}' must be in [0, 1], got {v}")
        is_int = dtype.kind in "iu"
        salt = scalar(self, args, "salt_val", float(np.iinfo(dtype).max) if is_int else 1.0)
        pepper = scalar(self, args, "pepper_val", float(np.iinfo(dtype).min) if is_int else -1.0)
        salt, pepper = to_dtype(np.float64(salt), dtype), to_dtype(np.float64(pepper), dtype)
        return element_rng.threshold32(prob * svp), element_rng.threshold32(prob), salt, pepper

    def run_sample(self, inputs, args, ctx):
        img = _numeric(self, inputs[0])
        thr_salt, thr, salt, pepper = self.params(img.dtype, args)
        shape = list(img.shape)
        axis = shared_axis(self.layout_of(args), img.ndim, bool(self.args.get("per_channel")))
        if axis is not None:
            shape[axis] = 1  # one draw per pixel, shared by its channels
        count = int(np.prod(shape, dtype=np.int64))
        high = (element_rng.words(element_rng.sample_key(ctx.rng), count) >> np.uint64(32)).reshape(shape)
        out = img.copy()
        np.copyto(out, salt, where=high < thr_salt)
        np.copyto(out, pepper, where=(high >= thr_salt) & (high < thr))
        return out


def shared_axis(layout: str, ndim: int, per_channel: bool) -> int | None:
    """The axis whose values share one salt-and-pepper draw (the channels, unless per_channel),
    or None: "C" of the layout, else the last axis of a 3+-dimensional sample without one."""
    if per_channel:
        return None
    if "C" in layout:
        return layout.index("C")
    return ndim - 1 if not layout and ndim >= 3 else None


@register
class ShotNoise(LayoutAware):
    """Poisson (photon-counting) noise: ``poisson(max(0, in / factor)) * factor``."""

    schema = Schema(
        name="noise.shot",
        doc="Replaces each value x with poisson(max(0, x / factor)) * factor (identity when factor is 0).",
        args=[Arg("factor", "float", 20.0, tensor=True,
                  doc="the value one event adds; larger is noisier (0: no noise)")],
        random=True,
    )

    def setup(self):
        factor = self.args.get("factor")
        if factor is not None and not np.isfinite(factor):
            raise arg_error("noise.shot", "factor", f"must be finite, got {factor}")

    def params(self, args) -> float:
        """This sample's factor, checked finite (shared with the GPU kernel)."""
        factor = scalar(self, args, "factor", 20.0)
        if not np.isfinite(factor):
            raise self.error(f"argument 'factor' must be finite, got {factor}")
        return factor

    def run_sample(self, inputs, args, ctx):
        img = _numeric(self, inputs[0])
        factor = self.params(args)
        if factor == 0:
            return img.copy()
        key = element_rng.sample_key(ctx.rng)
        lam = np.maximum(img.astype(np.float64) / factor, 0.0)
        coded = None
        if img.dtype.itemsize == 1:  # few distinct lambdas: the CDF search becomes a table look-up
            lo = int(np.iinfo(img.dtype).min)
            table = np.maximum(np.arange(lo, lo + 256).astype(np.float64) / factor, 0.0)
            coded = (table, img.reshape(-1).astype(np.intp) - lo)
        counts = element_poisson.poisson(key, lam, coded).reshape(img.shape)
        return to_dtype((counts * factor).astype(np.float32), img.dtype)
