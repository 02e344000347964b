"""Batch-level reordering: ``permute_batch`` and the random ``batch_permutation``."""

from __future__ import annotations

import numpy as np

from stoker.errors import OperatorError, arg_error
from stoker.operators.base import Operator
from stoker.operators.schema import Arg, Schema, register
from stoker.tensors import TensorListCPU


@register
class PermuteBatch(Operator):
    """Reorders (and may repeat) the samples of a batch."""

    schema = Schema(
        name="permute_batch",
        doc="Output sample i is input sample ``indices[i]``. ``indices`` is a list of ints or a per-"
            "sample int tensor (such as the output of ``batch_permutation``); repetitions are allowed.",
        args=[Arg("indices", "int_list", None, tensor=True, doc="source index of each output sample")],
        devices=("cpu",),
    )

    def run_cpu(self, batch, inputs, arg_inputs):
        tl = inputs[0]
        n = len(tl)
        if "indices" in arg_inputs:
            idx = [int(np.asarray(v).reshape(-1)[0]) for v in arg_inputs["indices"]]
        elif self.args.get("indices") is not None:
            idx = list(self.args["indices"])
        else:
            raise arg_error("permute_batch", "indices", "is required")
        if len(idx) != n:
            raise OperatorError(f"argument 'indices' has {len(idx)} entries for a batch of {n}",
                                operator=self.instance_name, origin=self.origin)
        bad = [i for i in idx if not 0 <= i < n]
        if bad:
            raise OperatorError(f"argument 'indices': {bad[0]} is out of range for a batch of {n}",
                                operator=self.instance_name, origin=self.origin)
        samples = tl.samples()
        sources = [tl.source_info(i) for i in idx]
        return [TensorListCPU([samples[i] for i in idx], tl.layout(), sources)]


@register
class BatchPermutation(Operator):
    """A random permutation of the sample indices of a batch."""

    schema = Schema(
        name="batch_permutation",
        doc="Gives each sample an int32 scalar: together a random permutation of 0 ... batch_size-1 "
            "(with ``allow_repetitions``, independent draws). ``no_fixed_points`` keeps i from "
            "mapping to itself. Feed it to ``permute_batch``.",
        args=[Arg("allow_repetitions", "bool", False, doc="draw indices with replacement"),
              Arg("no_fixed_points", "bool", False, doc="no sample maps to itself")],
        inputs=(0, 0),
        devices=("cpu",),
        random=True,
    )

    def run_cpu(self, batch, inputs, arg_inputs):
        n = batch.batch_size
        rng = self.batch_rng(batch)
        perm = draw_permutation(rng, n, self.args["allow_repetitions"], self.args["no_fixed_points"])
        return [TensorListCPU([np.int32(v).reshape(()) for v in perm], "")]

    def output_layouts(self, input_layouts):
        return [""]


def draw_permutation(rng: np.random.Generator, n: int, repeat: bool, no_fixed: bool) -> np.ndarray:
    """Indices 0 ... n-1 in random order (or drawn with replacement); with ``no_fixed``, out[i] != i
    (impossible for n == 1, where the identity is returned)."""
    if n < 2 or not no_fixed:
        return rng.integers(0, n, n) if repeat else rng.permutation(n)
    if repeat:
        r = rng.integers(0, n - 1, n)
        return r + (r >= np.arange(n))  # skip over i itself
    # A random derangement by rejection: a uniform permutation has no fixed point with
    # probability ~1/e, so a few draws suffice.
    for _ in range(64):
        p = rng.permutation(n)
        if not np.any(p == np.arange(n)):
            return p
    p = rng.permutation(n)  # vanishingly rare: fall back to a random single cycle
    out = np.empty(n, np.int64)
    out[p] = np.roll(p, -1)
    return out
