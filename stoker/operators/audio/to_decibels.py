"""``to_decibels``: ``multiplier * log10(max(x / reference, 10 ** (cutoff_db / multiplier)))``.

``reference`` 0 (default) takes each sample's own maximum; ``cutoff_db`` bounds the result from
below. Use multiplier 10 for powers and 20 for magnitudes. Output float32, same shape and layout.
"""

from __future__ import annotations

import numpy as np

from stoker.operators.base import Operator
from stoker.operators.schema import Arg, Schema, register

_F32 = np.finfo(np.float32)


def to_decibels(x: np.ndarray, multiplier: float, reference: float, cutoff_db: float) -> np.ndarray:
    """The decibel values of ``x`` (float32); ``reference`` 0 means ``x.max()``.

    Computed in float32 in one output buffer, as DALI computes it, unless ``x / reference`` or the
    cutoff's ratio would leave float32's normal range (then in float64, which keeps tiny references
    such as 1e-30 from flushing to zero or overflowing)."""
    x = np.asarray(x, np.float32)
    ref = float(reference)
    if ref == 0.0:
        ref = float(x.max()) if x.size else 1.0
    floor = 10.0 ** (cutoff_db / multiplier)
    if ref > 0 and _F32.tiny <= 1.0 / ref <= _F32.max and _F32.tiny <= floor <= _F32.max and (
            ref >= 1.0 or not x.size or float(x.max()) / ref < _F32.max):
        if ref == 1.0:  # x * 1 is x: one pass less (each NumPy call costs a GIL hand-over with 2 threads)
            out = np.maximum(x, np.float32(floor))
        else:
            out = np.multiply(x, np.float32(1.0 / ref))
            np.maximum(out, np.float32(floor), out=out)
        np.log10(out, out=out)
        out *= np.float32(multiplier)
        return out
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
