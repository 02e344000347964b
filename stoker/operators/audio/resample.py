"""``audio_resample``: band-limited resampling of (T,) or (T, C) audio along its first axis.

The ratio comes from exactly one of: ``in_rate`` and ``out_rate`` together, ``scale``
(out / in), or ``out_length``. The output has ``ceil(T * out_rate / in_rate)`` samples (or
``out_length``). Integer inputs are read as normalized values (see :mod:`._convert`) and the
result is converted to ``dtype`` (default: the input's type) the same way. The filter and its
numbers are DALI's (see :mod:`._resampling`): float32 outputs agree within ~3e-6.
"""

from __future__ import annotations

import numpy as np

from stoker.errors import arg_error
from stoker.operators.audio._convert import check_audio_dtype, from_float, to_float
from stoker.operators.audio._resampling import resample, resampled_length
from stoker.operators.base import Operator
from stoker.operators.schema import Arg, Schema, register


def _f32(v) -> float:
    # DALI holds these arguments as float32: 1.7 is 1.70000005, which can add an output sample
    return float(np.float32(v))


@register
class AudioResample(Operator):
    """Resamples audio signals with a windowed-sinc filter."""

    schema = Schema(
        name="audio_resample",
        legacy_name="AudioResample",
        doc="Resamples (T,) or (T, C) audio with a Hann-windowed sinc filter; the ratio is out_rate / in_rate, "
            "scale, or out_length / T.",
        args=[Arg("in_rate", "float", None, tensor=True, doc="input sample rate (with out_rate; any unit)"),
              Arg("out_rate", "float", None, tensor=True, doc="output sample rate (with in_rate; same unit)"),
              Arg("scale", "float", None, tensor=True, doc="output rate / input rate"),
              Arg("out_length", "int", None, tensor=True, doc="number of output samples"),
              Arg("quality", "float", 50.0, doc="in [0, 100]: 3 sinc lobes at 0, 16 at 50, 64 at 100"),
              Arg("dtype", "dtype", None, doc="output type (default: the input's); values are normalized")],
        devices=("cpu",),
    )

    def setup(self):
        a = self.args
        self.dtype = check_audio_dtype(self.schema.name, "dtype", a["dtype"])
        if not 0 <= a["quality"] <= 100:
            raise arg_error(self.schema.name, "quality", f"must be in [0, 100], got {a['quality']}")

    def _given(self, args, name):
        return args.get(name) is not None

    def run_cpu(self, batch, inputs, arg_inputs):
        # which ratio argument was given is a property of the graph, whether constant or per sample
        given = {k for k in ("in_rate", "out_rate", "scale", "out_length")
                 if self.args.get(k) is not None or k in arg_inputs}
        name = self.schema.name
        if ("in_rate" in given) != ("out_rate" in given):
            raise arg_error(name, "in_rate", "in_rate and out_rate must be given together")
        if ("in_rate" in given) + ("scale" in given) + ("out_length" in given) != 1:
            raise arg_error(name, "scale", "give exactly one of: in_rate with out_rate, scale, out_length")
        return super().run_cpu(batch, inputs, arg_inputs)

    def run_sample(self, inputs, args, ctx):
        x = np.asarray(inputs[0])
        if x.ndim not in (1, 2):
            raise self.error(f"expects (T,) or (T, C) audio, got shape {x.shape}")
        dtype = self.dtype or x.dtype
        check_audio_dtype(self.schema.name, "dtype", dtype)
        n = x.shape[0]
        if args.get("in_rate") is not None:
            in_rate, out_rate = _f32(args["in_rate"]), _f32(args["out_rate"])
            if not in_rate > 0:
                raise self.error(f"argument 'in_rate' must be positive, got {in_rate}")
            if not out_rate >= 0:
                raise self.error(f"argument 'out_rate' must not be negative, got {out_rate}")
            out_len = resampled_length(n, in_rate, out_rate)
        elif args.get("scale") is not None:
            in_rate, out_rate = 1.0, _f32(args["scale"])
            if not out_rate >= 0:
                raise self.error(f"argument 'scale' must not be negative, got {out_rate}")
            out_len = resampled_length(n, 1.0, out_rate)
        else:
            out_len = int(args["out_length"])
            if out_len < 0:
                raise self.error(f"argument 'out_length' must not be negative, got {out_len}")
            if n == 0 and out_len:
                raise self.error("cannot make a non-empty signal from an empty one (out_length)")
            in_rate, out_rate = float(n or 1), float(out_len or 1)
        if out_rate == 0:
            return np.zeros((0,) + x.shape[1:], dtype)
        y = resample(to_float(x), in_rate, out_rate, out_len, self.args["quality"])
        return from_float(y, dtype)
