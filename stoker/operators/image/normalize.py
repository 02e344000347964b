"""``normalize``: ``(x - mean) / stddev * scale + shift`` with given or computed statistics.

Statistics are reduced over ``axes`` / ``axis_names`` (default: all axes, or the
axes where a given ``mean``/``stddev`` tensor has extent 1), per sample or, with
``batch=True``, over the whole batch. A computed standard deviation is
``sqrt(sum((x - mean)^2) / (N - ddof) + epsilon)``; where it is zero the output
is ``shift`` (as DALI). A given ``stddev`` is used as ``sqrt(stddev^2 + epsilon)``.
"""

from __future__ import annotations

import numpy as np

from stoker import types
from stoker.errors import OperatorError, arg_error
from stoker.operators.image.crop import LayoutAware
from stoker.operators.schema import Arg, Schema, register
from stoker.operators.tensor._axes import resolve_axes
from stoker.operators.tensor.basic import convert
from stoker.tensors import TensorListCPU


@register
class Normalize(LayoutAware):
    """Normalizes samples with given or computed mean and standard deviation."""

    schema = Schema(
        name="normalize",
        legacy_name="Normalize",
        doc="Computes (x - mean) / stddev * scale + shift. ``mean`` / ``stddev`` are scalars or "
            "tensors (per sample allowed) shaped like the input with the reduced axes of extent 1; "
            "missing ones are computed over ``axes`` / ``axis_names`` (per sample, or over the whole "
            "batch with ``batch=True``). ``ddof`` corrects the variance's divisor, ``epsilon`` is "
            "added to the variance. Output ``dtype`` defaults to float32; integer outputs round "
            "halves away from zero and saturate.",
        args=[Arg("mean", "float_list", None, tensor=True, doc="mean (scalar or tensor)"),
              Arg("stddev", "float_list", None, tensor=True, doc="standard deviation (scalar or tensor)"),
              Arg("axes", "int_list", None, doc="axes to reduce over (default: all)"),
              Arg("axis_names", "layout", None, doc="layout letters of the axes to reduce over"),
              Arg("batch", "bool", False, doc="compute statistics over the whole batch"),
              Arg("scale", "float", 1.0, doc="multiplier applied after normalization"),
              Arg("shift", "float", 0.0, doc="value added at the end"),
              Arg("epsilon", "float", 0.0, doc="added to the variance"),
              Arg("ddof", "int", 0, doc="delta degrees of freedom of the variance"),
              Arg("dtype", "dtype", types.FLOAT, doc="output type")],
        devices=("cpu",),
    )

    def setup(self):
        a = self.args
        if a["ddof"] < 0:
            raise arg_error("normalize", "ddof", "must be non-negative")
        if a["epsilon"] < 0:
            raise arg_error("normalize", "epsilon", "must be non-negative")

    @property
    def samples_independent(self) -> bool:
        """Whether each sample is computed on its own (per-sample statistics), so that pipeline
        fusion may chain it; batch=True needs the whole batch's statistics first."""
        return not self.args["batch"]

    def run_sample(self, inputs, args, ctx):
        x = inputs[0]
        axes, mean, std = self._params(x, args, self.layout_of(args))
        computed = std is None
        return self._apply(x, axes, mean, self._given_std(std) if std is not None else None, computed)

    # run_cpu only wraps the per-sample path when batch=False; with batch=True the instance's
    # samples_independent is False, which keeps it out of fused chains regardless.
    run_cpu_wraps_samples = True

    def run_cpu(self, batch, inputs, arg_inputs):
        if not self.args["batch"]:  # sample by sample (run_sample), which fusion can chain
            return super().run_cpu(batch, inputs, arg_inputs)
        tl = inputs[0]
        samples = tl.samples()
        layout = tl.layout()
        if not samples:
            return [tl]
        try:
            stats = self._batch_stats(samples, layout, arg_inputs)
        except ValueError as e:
            raise OperatorError(str(e), operator=self.instance_name, origin=self.origin) from None

        def one(i):
            args = self.sample_args(arg_inputs, i)
            x = samples[i]
            axes, mean, std = self._params(x, args, layout)
            computed = std is None
            std = self._given_std(std) if std is not None else None
            mean = stats[0] if mean is None else mean  # batch-wide statistics stand in for the ones
            std = stats[1] if std is None else std  # not given
            return self._apply(x, axes, mean, std, computed)

        results = self.map_samples(batch, len(samples), one)
        kept = [i for i in range(len(samples)) if results[i] is not None]
        return [TensorListCPU([results[i] for i in kept], layout, [tl.source_info(i) for i in kept])]

    # --- parameters -----------------------------------------------------------
    def _params(self, x, args, layout):
        """(reduced axes, given mean or None, given stddev or None), the given ones shaped to broadcast."""
        mean = param_array(args.get("mean"))
        std = param_array(args.get("stddev"))
        a = self.args
        if a["axes"] is not None or a["axis_names"]:
            axes = resolve_axes("normalize", a["axes"], a["axis_names"], layout, x.ndim)
        else:
            shaped = [p for p in (mean, std) if p is not None and p.ndim == x.ndim and p.size > 1]
            axes = [d for d in range(x.ndim) if shaped[0].shape[d] == 1] if shaped else list(range(x.ndim))
        keep = tuple(1 if d in axes else x.shape[d] for d in range(x.ndim))
        for name, p in (("mean", mean), ("stddev", std)):
            if p is not None and p.size > 1 and p.shape != keep:
                raise ValueError(f"normalize: argument '{name}' has shape {p.shape}; the sample of shape "
                                 f"{x.shape} reduced over axes {axes} needs {keep} (or a scalar)")
        return axes, mean, std

    def _batch_stats(self, samples, layout, arg_inputs):
        """Mean and standard deviation over the batch (only those not given)."""
        args0 = self.sample_args(arg_inputs, 0)
        axes, mean, std = self._params(samples[0], args0, layout)
        kept = [d for d in range(samples[0].ndim) if d not in axes]
        for x in samples[1:]:
            if [x.shape[d] for d in kept] != [samples[0].shape[d] for d in kept]:
                raise ValueError(f"normalize: with batch=True the non-reduced extents must agree across the "
                                 f"batch; shapes {samples[0].shape} and {x.shape} differ on axes {kept}")
        ax = tuple(axes)
        if mean is None:
            total = sum(x.astype(np.float64).sum(axis=ax, keepdims=True) for x in samples)
            count = sum(int(np.prod([x.shape[d] for d in axes])) for x in samples)
            mean = total / max(count, 1)
        if std is None:
            sq = sum(np.square(x.astype(np.float64) - mean).sum(axis=ax, keepdims=True) for x in samples)
            count = sum(int(np.prod([x.shape[d] for d in axes])) for x in samples)
            std = self._computed_std(sq, count)
        return mean, std

    def _computed_std(self, sq, count):
        denom = count - self.args["ddof"]
        var = sq / denom if denom > 0 else np.zeros_like(sq)
        return np.sqrt(var + self.args["epsilon"])

    def _given_std(self, std):
        return np.sqrt(np.square(std) + self.args["epsilon"]) if self.args["epsilon"] else std

    # --- the arithmetic -------------------------------------------------------------
    def _apply(self, x, axes, mean, std, std_computed: bool):
        # statistics in float64 (no float64 copy of the sample: the mean casts in its buffered loop,
        # the deviation takes one float64 temporary, squared in place)
        ax = tuple(axes)
        if mean is None:
            mean = x.mean(axis=ax, keepdims=True, dtype=np.float64) if ax else x.astype(np.float64)
        if std is None:
            n = int(np.prod([x.shape[d] for d in axes])) if axes else 1
            dev = np.subtract(x, mean, dtype=np.float64)
            np.square(dev, out=dev)
            std = self._computed_std(dev.sum(axis=ax, keepdims=True), n)
            del dev
        std = np.asarray(std, np.float64)
        with np.errstate(divide="ignore"):
            factor = self.args["scale"] / std
        if std_computed:  # a computed deviation of zero gives the output `shift`, as in DALI
            factor = np.where(std > 0, factor, 0.0)
        if x.dtype in _FLOAT32_EXACT:  # the output arithmetic in float32, in place, as DALI's
            out = np.subtract(x, np.asarray(mean, np.float32), dtype=np.float32)
            out *= np.asarray(factor, np.float32)
            out += np.float32(self.args["shift"])
        else:  # wider inputs: float64 arithmetic, then rounded once
            out = ((x.astype(np.float64) - mean) * factor + self.args["shift"]).astype(np.float32)
        dtype = np.dtype(self.args["dtype"])
        if dtype.kind in "iu":
            return convert(out, dtype)
        return out.astype(dtype, copy=False)


# inputs that float32 holds exactly
_FLOAT32_EXACT = frozenset(np.dtype(t) for t in (np.float32, np.float16, np.int8, np.uint8, np.int16, np.uint16,
                                                 np.bool_))


def param_array(v):
    """A mean/stddev argument as a float64 array (None stays None)."""
    if v is None:
        return None
    arr = np.asarray(v, np.float64)
    return arr.reshape(()) if arr.size == 1 else arr
