"""``nonsilent_region``: where the sound is, from leading and trailing silence.

The short-term power at sample i is the mean of ``x^2`` over the ``window_length`` samples
ending at i (divided by ``window_length`` also for the shorter first windows). A sample counts
as loud when that power is at least ``cutoff_db`` decibels relative to ``reference_power`` (0:
the signal's own largest short-term power). The region runs from the start of the first loud
window to the last loud sample; outputs are its begin and length (int32 scalars); when no sample
is loud, (0, 0). Integer inputs are taken as they are (not normalized), as DALI takes them,
which matters for an explicit ``reference_power``.

For float inputs the short-term power is a float32 running sum restarted every
``reset_interval`` samples, like DALI's (see :func:`moving_mean_square`). Regions agree with
DALI's to the sample, except where, after a long loud burst, the running sum's leftover
rounding decides when quiet noise turns silent: that end may then differ by up to a restart
interval (measured: 2,047 samples in one of two such random signals).
"""

from __future__ import annotations

import numpy as np

from stoker.errors import arg_error
from stoker.operators.base import Operator
from stoker.operators.schema import Arg, Schema, register


def moving_mean_square(x: np.ndarray, window: int, reset_interval: int = -1) -> np.ndarray:
    """float32 mean of ``x**2`` over the ``window`` samples ending at each index (the first
    windows hold fewer samples and are still divided by ``window``).

    Computed the way DALI computes it: a float32 running sum that adds the newest square, then drops
    the oldest (two roundings a step), restarted from a direct in-order sum whenever the window's
    first sample is a multiple of ``reset_interval`` (-1: never). The running sum's rounding is
    part of the result: once a loud burst has passed, what is left of it can outweigh quiet noise,
    and whether that noise counts as silence depends on it. ``np.add.accumulate`` adds in order;
    stoker's steps and DALI's still do not round alike everywhere (see the module's note).
    """
    x = np.asarray(x)
    n = x.size
    if x.dtype.kind in "iub":
        # integer squares sum exactly (DALI needs no restarts for them either)
        csum = np.concatenate([[0.0], np.cumsum(x.astype(np.float64) ** 2)])
        hi = np.arange(1, n + 1)
        return ((csum[hi] - csum[np.maximum(hi - window, 0)]) * (1.0 / window)).astype(np.float32)
    sq = x.astype(np.float32) ** 2
    if n == 0:
        return sq
    dropped = np.zeros(n, np.float32)
    if n > window:
        dropped[window:] = sq[:n - window]
    restarts = []
    if reset_interval is not None and reset_interval > 0:
        restarts = [i for i in range(window - 1, n, reset_interval) if i > 0]
    bounds = [0, *restarts, n]
    sums = np.empty(n, np.float32)
    for s, e in zip(bounds[:-1], bounds[1:]):
        first = s + 1 if s else 0  # the first step taken from the running sum
        steps = np.empty(1 + 2 * (e - first), np.float32)
        steps[0] = np.add.accumulate(sq[s - window + 1:s + 1], dtype=np.float32)[-1] if s else 0.0
        steps[1::2] = sq[first:e]
        steps[2::2] = -dropped[first:e]
        acc = np.add.accumulate(steps, dtype=np.float32)[::2]
        sums[s:e] = acc if s else acc[1:]
    return sums * np.float32(1.0 / window)


def nonsilent_region(x: np.ndarray, cutoff_db: float, window: int, reference_power: float,
                     reset_interval: int = -1) -> tuple[int, int]:
    """(begin, length) of the non-silent part of the 1D signal ``x``."""
    if x.size == 0:
        return 0, 0
    mms = moving_mean_square(x, window, reset_interval)
    ref = np.float32(reference_power) if reference_power else mms.max()
    threshold = np.float32(ref * np.float32(10.0 ** (cutoff_db / 10.0)))
    loud = np.flatnonzero(mms >= threshold)
    if loud.size == 0:
        return 0, 0
    first, last = int(loud[0]), int(loud[-1])
    begin = max(0, first - window + 1)  # the loud sound may lie anywhere in the first loud window
    return begin, last + 1 - begin


@register
class NonsilentRegion(Operator):
    """Begin and length of the part of a 1D signal above a power threshold."""

    schema = Schema(
        name="nonsilent_region",
        legacy_name="NonsilentRegion",
        doc="Begin and length (int32 scalars) of the region of a 1D signal whose short-term power is at least "
            "cutoff_db relative to reference_power (0: the signal's maximum).",
        args=[Arg("cutoff_db", "float", -60.0, doc="threshold in dB below which the signal is silent"),
              Arg("window_length", "int", 2048, doc="samples in the short-term power's window"),
              Arg("reference_power", "float", 0.0, doc="power of 0 dB; 0 means the signal's largest"),
              Arg("reset_interval", "int", 8192, doc="samples between restarts of the running sum of "
                                                     "float inputs: -1 (never) or a multiple of window_length")],
        num_outputs=2,
        devices=("cpu",),
    )

    def setup(self):
        a, name = self.args, self.schema.name
        if a["window_length"] < 1:
            raise arg_error(name, "window_length", f"must be positive, got {a['window_length']}")

    def output_layouts(self, input_layouts):
        return ["", ""]

    def run_sample(self, inputs, args, ctx):
        x = np.asarray(inputs[0])
        if x.ndim != 1:
            raise self.error(f"expects 1D audio, got shape {x.shape} (downmix it first)")
        a = self.args
        ri = a["reset_interval"]
        if x.dtype.kind == "f" and ri != -1 and (ri < 1 or ri % a["window_length"]):
            # (DALI checks this for float inputs only: integer sums are never restarted)
            raise self.error(f"argument 'reset_interval' must be -1 or a multiple of window_length "
                             f"({a['window_length']}) for float inputs, got {ri}")
        if a["reference_power"] < 0:
            raise self.error(f"argument 'reference_power' must be positive, got {a['reference_power']}")
        begin, length = nonsilent_region(x, a["cutoff_db"], a["window_length"], a["reference_power"],
                                         a["reset_interval"])
        return np.int32(begin), np.int32(length)
