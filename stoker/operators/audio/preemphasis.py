"""``preemphasis_filter``: ``y[t] = x[t] - coeff * x[t - 1]``.

The sample before the first is 0 (``border="zero"``), ``x[0]`` ("clamp", the default) or
``x[1]`` ("reflect"). A sample of several dimensions is filtered as one sequence in memory
order, as DALI filters it: right for (T,) audio, and across the channels of interleaved (T, C)
audio, so downmix such audio first to get a per-channel filter. Arithmetic is float32 on the
input's values as they are (integers are not normalized); the result is cast to ``dtype``
(default FLOAT), rounding (halves away from zero) and saturating for integer types.
"""

from __future__ import annotations

import numpy as np

from stoker import types
from stoker.errors import arg_error
from stoker.operators.audio._convert import cast_saturate
from stoker.operators.base import Operator
from stoker.operators.schema import Arg, Schema, register

BORDERS = ("zero", "clamp", "reflect")


def preemphasis(x: np.ndarray, coeff: float, border: str) -> np.ndarray:
    """The filtered float32 signal, ``x`` taken as one sequence in memory order (same shape out)."""
    shape = np.shape(x)
    x = np.asarray(x, np.float32).reshape(-1)
    out = np.empty_like(x)
    if x.shape[0] == 0:
        return out.reshape(shape)
    c = np.float32(coeff)
    # x + (-(c * prev)) rounds as x - c * prev does, written in place: no whole-signal temporary
    np.multiply(x[:-1], -c, out=out[1:])
    out[1:] += x[1:]
    if border == "zero":
        prev = np.float32(0)
    elif border == "clamp" or x.shape[0] < 2:
        prev = x[0]
    else:
        prev = x[1]
    out[0] = x[0] - c * prev
    return out.reshape(shape)


@register
class PreemphasisFilter(Operator):
    """First-order high-pass that boosts high frequencies before a spectrogram."""

    schema = Schema(
        name="preemphasis_filter",
        legacy_name="PreemphasisFilter",
        doc="y[t] = x[t] - preemph_coeff * x[t-1] along the first axis; x[-1] is 0, x[0] or x[1] by border.",
        args=[Arg("preemph_coeff", "float", 0.97, tensor=True, doc="the coefficient of the previous sample"),
              Arg("border", "str", "clamp", doc="value before the first sample: 'zero', 'clamp' (x[0]) or "
                                                "'reflect' (x[1])"),
              Arg("dtype", "dtype", types.FLOAT, doc="output type")],
        devices=("cpu",),
    )

    def setup(self):
        if self.args["border"] not in BORDERS:
            raise arg_error(self.schema.name, "border",
                            f"must be one of {', '.join(BORDERS)}, got {self.args['border']!r}")
        self.dtype = np.dtype(self.args["dtype"])

    def run_sample(self, inputs, args, ctx):
        x = np.asarray(inputs[0])
        y = preemphasis(x, float(args["preemph_coeff"]), self.args["border"])
        return cast_saturate(y, self.dtype)
