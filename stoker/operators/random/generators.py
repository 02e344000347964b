"""Random number generators: ``random.uniform``, ``random.normal``, ``random.coin_flip``,
``random.choice``.

Every value comes from the sample's counter-based stream (``ctx.rng``), so a
batch depends only on (seed, operator, iteration, sample): the same for any
``num_threads`` or prefetch depth. Values differ from DALI's (another
generator); the distributions are the same.

Without a positional input each generator makes ``batch_size`` samples of
``shape`` (default: scalars). With one (DALI's ``__shape_like``), sample i
takes the shape of input sample i (``random.choice`` instead takes the values
to choose from).
"""

from __future__ import annotations

import numpy as np

from stoker import types
from stoker.errors import arg_error
from stoker.operators.base import Operator
from stoker.operators.schema import Arg, Schema, register
from stoker.random_state import batch_uniforms
from stoker.tensors import batch_of_rows

_SHAPE = Arg("shape", "int_list", None, tensor=True, doc="shape of each sample (default: a scalar)")


def _shape(inputs, args) -> tuple[int, ...]:
    if inputs:
        return tuple(np.shape(inputs[0]))
    s = args.get("shape")
    if s is None:
        return ()
    shape = tuple(int(v) for v in np.asarray(s).reshape(-1))
    if any(v < 0 for v in shape):
        raise ValueError(f"argument 'shape' must not hold negative extents, got {list(shape)}")
    return shape


class _Generator(Operator):
    draws_per_sample = 1  # uniforms one scalar sample consumes (for the vectorized path)

    def output_layouts(self, input_layouts):
        return [""]

    def run_cpu(self, batch, inputs, arg_inputs):
        # The common case (no input, no per-sample arguments, a static shape) in one NumPy call
        # over the batch: the same values as run_sample, without per-sample Python.
        shape = self.args.get("shape")
        shape = () if shape in (None, []) else tuple(int(v) for v in shape)
        if (inputs or arg_inputs or not hasattr(self, "vectorized") or any(v < 0 for v in shape)
                or (shape and not hasattr(self, "vectorized_shaped"))):
            return super().run_cpu(batch, inputs, arg_inputs)
        n = batch.batch_size
        count = int(np.prod(shape, dtype=np.int64)) if shape else 1
        u = batch_uniforms(self.op_seed, batch.iteration, batch.sample_indices(n), self.draws_per_sample * count)
        # (values[i, ...] is a 0-d array view; iterating would give NumPy scalars, each reshaped
        # and converted back to an array one by one: most of this operator's time per batch in
        # the GPU training pipeline's CPU stage)
        return [batch_of_rows(self.vectorized_shaped(u, shape) if shape else self.vectorized(u))]


@register
class Uniform(_Generator):
    """Uniform values in ``[range[0], range[1])``, or picks from ``values``."""

    schema = Schema(
        name="random.uniform",
        extra_legacy_names=("Uniform",),
        doc="Random values drawn uniformly from range [lo, hi) or from the discrete set values.",
        args=[Arg("range", "float_list", [-1.0, 1.0], tensor=True, doc="(lo, hi)"),
              Arg("values", "float_list", None, tensor=True, doc="a discrete set to draw from (instead of range)"),
              _SHAPE,
              Arg("dtype", "dtype", types.FLOAT, doc="output type; integer types draw integers in [lo, hi)")],
        inputs=(0, 1),
        devices=("cpu",),
        random=True,
    )

    def setup(self):
        r = self.args.get("range")
        if r is not None and (len(r) != 2 or r[0] > r[1]):
            raise arg_error("random.uniform", "range", f"must be (lo, hi) with lo <= hi, got {r}")

    def run_sample(self, inputs, args, ctx):
        shape = _shape(inputs, args)
        dtype = self.args["dtype"]
        if args.get("values") is not None:
            vals = np.asarray(args["values"], np.float64).reshape(-1)
            if vals.size == 0:
                raise self.error("argument 'values' is empty")
            return vals[ctx.rng.integers(0, vals.size, size=shape)].astype(dtype)
        rng = np.asarray(args["range"], np.float64).reshape(-1)
        if rng.size != 2 or rng[0] > rng[1]:
            raise self.error(f"argument 'range' must be (lo, hi) with lo <= hi, got {rng.tolist()}")
        lo, hi = float(rng[0]), float(rng[1])
        if np.dtype(dtype).kind in "iu":
            return np.floor(ctx.rng.uniform(lo, hi, size=shape)).astype(dtype)
        return np.asarray(ctx.rng.uniform(lo, hi, size=shape)).astype(dtype)

    def vectorized(self, u):
        dtype = self.args["dtype"]
        u = u[:, 0]
        if self.args.get("values") is not None:
            vals = np.asarray(self.args["values"], np.float64).reshape(-1)
            if vals.size == 0:
                raise arg_error("random.uniform", "values", "is empty")
            return vals[np.minimum((u * vals.size).astype(np.int64), vals.size - 1)].astype(dtype)
        lo, hi = (float(v) for v in np.asarray(self.args["range"], np.float64).reshape(-1)[:2])
        x = lo + (hi - lo) * u
        return (np.floor(x) if np.dtype(dtype).kind in "iu" else x).astype(dtype)

    def vectorized_shaped(self, u, shape):
        """Samples of a static ``shape``: row i of ``u`` holds sample i's draws, one per value."""
        dtype = self.args["dtype"]
        if self.args.get("values") is not None:
            vals = np.asarray(self.args["values"], np.float64).reshape(-1)
            if vals.size == 0:
                raise arg_error("random.uniform", "values", "is empty")
            out = vals[np.minimum((u * vals.size).astype(np.int64), vals.size - 1)]
        else:
            lo, hi = (float(v) for v in np.asarray(self.args["range"], np.float64).reshape(-1)[:2])
            out = lo + (hi - lo) * u
            if np.dtype(dtype).kind in "iu":
                out = np.floor(out)
        return out.reshape(u.shape[0], *shape).astype(dtype)


@register
class Normal(_Generator):
    """Gaussian values with ``mean`` and ``stddev``."""

    schema = Schema(
        name="random.normal",
        extra_legacy_names=("NormalDistribution",),
        doc="Random values from a normal distribution.",
        args=[Arg("mean", "float", 0.0, tensor=True), Arg("stddev", "float", 1.0, tensor=True), _SHAPE,
              Arg("dtype", "dtype", types.FLOAT, doc="output type")],
        inputs=(0, 1),
        devices=("cpu",),
        random=True,
    )

    def run_sample(self, inputs, args, ctx):
        std = float(args.get("stddev"))
        if std < 0:
            raise self.error(f"argument 'stddev' must not be negative, got {std}")
        x = ctx.rng.normal(float(args.get("mean")), std, size=_shape(inputs, args))
        return self._to_dtype(x)

    draws_per_sample = 2

    def vectorized(self, u):
        std = float(self.args["stddev"])
        if std < 0:
            raise arg_error("random.normal", "stddev", f"must not be negative, got {std}")
        z = np.sqrt(-2.0 * np.log1p(-u[:, 0])) * np.cos(2.0 * np.pi * u[:, 1])  # as SampleRNG.normal
        return self._to_dtype(float(self.args["mean"]) + std * z)

    def _to_dtype(self, x):
        dtype = np.dtype(self.args["dtype"])
        if dtype.kind in "iu":
            info = np.iinfo(dtype)
            return np.clip(np.rint(x), info.min, info.max).astype(dtype)
        return np.asarray(x).astype(dtype)


@register
class CoinFlip(_Generator):
    """1 with ``probability``, else 0."""

    schema = Schema(
        name="random.coin_flip",
        extra_legacy_names=("CoinFlip",),
        doc="Random 0/1 values (Bernoulli); 1 with the given probability.",
        args=[Arg("probability", "float", 0.5, tensor=True), _SHAPE,
              Arg("dtype", "dtype", types.INT32, doc="output type")],
        inputs=(0, 1),
        devices=("cpu",),
        random=True,
    )

    def run_sample(self, inputs, args, ctx):
        p = float(args.get("probability"))
        if not 0.0 <= p <= 1.0:
            raise self.error(f"argument 'probability' must be in [0, 1], got {p}")
        return (ctx.rng.random(size=_shape(inputs, args)) < p).astype(self.args["dtype"])

    def vectorized(self, u):
        p = float(self.args["probability"])
        if not 0.0 <= p <= 1.0:
            raise arg_error("random.coin_flip", "probability", f"must be in [0, 1], got {p}")
        return (u[:, 0] < p).astype(self.args["dtype"])


@register
class Choice(_Generator):
    """Picks from ``range(n)`` (a scalar input n) or from the input's values, with probabilities ``p``;
    a second input (DALI's ``shape_like``) gives each sample the shape of its sample."""

    schema = Schema(
        name="random.choice",
        doc="Random picks: from 0..n-1 when the input is a scalar n, else from the input's 1D values.",
        args=[Arg("p", "float_list", None, tensor=True, doc="probability of each choice (default: equal)"),
              _SHAPE],
        inputs=(1, 2),
        devices=("cpu",),
        random=True,
    )

    def run_sample(self, inputs, args, ctx):
        a = np.asarray(inputs[0])
        if a.ndim == 0:
            if a.dtype.kind not in "iu" or int(a) < 1:
                raise self.error(f"a scalar input must be a positive integer n, got {a!r}")
            values = np.arange(int(a), dtype=a.dtype)
        else:
            values = a.reshape(-1)
        p = args.get("p")
        if p is not None:
            p = np.asarray(p, np.float64).reshape(-1)
            if p.size != values.size or np.any(p < 0) or not np.isclose(p.sum(), 1.0, atol=1e-4):
                raise self.error(f"argument 'p' must hold {values.size} non-negative probabilities summing to 1")
            p = p / p.sum()
        shape = _shape(inputs[1:], args)
        return np.asarray(values[ctx.rng.choice(values.size, size=shape, p=p)])
