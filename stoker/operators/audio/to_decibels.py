"""``to_decibels``: ``multiplier * log10(max(x / reference, 10 ** (cutoff_db / multiplier)))``.

``reference`` 0 (default) takes each sample's own maximum; ``cutoff_db`` bounds the result from
below. Use multiplier 10 for powers and 20 for magnitudes. Output float32, same shape and layout.
"""

from __future__ import annotations

import numpy as np

from stoker.operators.base import Operator
from stoker.operators.schema import Arg, Schema, register


def to_decibels(x: np.ndarray, multiplier: float, reference: float, cutoff_db: float) -> np.ndarray:
    """The decibel values of ``x`` (float32); ``reference`` 0 means ``x.max()``."""
    x = np.asarray(x, np.float32)
    ref = float(reference)
    if ref == 0.0:
        ref = float(x.max()) if x.size else 1.0
    floor = 10.0 ** (cutoff_db / multiplier)
    # x * (1/ref) in float64 keeps tiny references (1e-30) from flushing to zero or overflowing
    ratio = np.maximum(x.astype(np.float64) * (1.0 / ref) if ref else np.full(x.shape, floor), floor)
    return (multiplier * np.log10(ratio)).astype(np.float32)


@register
class ToDecibels(Operator):
    """Magnitudes or powers on the decibel scale."""

    schema = Schema(
        name="to_decibels",
        legacy_name="ToDecibels",
        doc="multiplier * log10(max(x / reference, 10^(cutoff_db / multiplier))); reference 0 = the sample's max.",
        args=[Arg("multiplier", "float", 10.0, doc="10 for powers, 20 for magnitudes"),
              Arg("reference", "float", 0.0, doc="value of 0 dB; 0 means each sample's maximum"),
              Arg("cutoff_db", "float", -200.0, doc="lowest value produced (dB)")],
        devices=("cpu",),
    )

    def run_sample(self, inputs, args, ctx):
        a = self.args
        return to_decibels(inputs[0], a["multiplier"], a["reference"], a["cutoff_db"])
