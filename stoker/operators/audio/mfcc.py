"""``mfcc``: mel-frequency cepstral coefficients, a DCT of a (log) mel spectrogram along ``axis``.

The first ``n_mfcc`` coefficients of the DCT of type ``dct_type`` (1 to 4, in the usual
unnormalized forms: type 2 is ``X_k = sum_n x_n cos(pi / N (n + 1/2) k)``) are kept; with
``normalize`` the basis is orthonormal (types 2 to 4). ``lifter`` L > 0 multiplies coefficient
i by ``1 + (L / 2) sin(pi (i + 1) / L)``. The output keeps the input's layout and type float32.
"""

from __future__ import annotations

import functools

import numpy as np

from stoker.errors import arg_error
from stoker.operators.base import Operator
from stoker.operators.schema import Arg, Schema, register


@functools.lru_cache(maxsize=64)
def dct_matrix(dct_type: int, n_in: int, n_out: int, normalize: bool, lifter: float) -> np.ndarray:
    """(n_out, n_in) float32 matrix of the DCT (liftering folded in)."""
    n = np.arange(n_in, dtype=np.float64)[None, :]
    k = np.arange(n_out, dtype=np.float64)[:, None]
    if dct_type == 1:
        # the end points count half; an input of one value is its own transform
        m = np.cos(np.pi / max(n_in - 1, 1) * n * k)
        m[:, 0] *= 0.5
        m[:, -1] *= 0.5 if n_in > 1 else 2.0
        if n_in == 1:
            m[:] = 1.0
    elif dct_type == 2:
        m = np.cos(np.pi / n_in * (n + 0.5) * k)
        if normalize:
            m *= np.sqrt(2.0 / n_in)
            m[0] *= np.sqrt(0.5)
    elif dct_type == 3:
        m = np.cos(np.pi / n_in * n * (k + 0.5))
        if normalize:
            m *= np.sqrt(2.0 / n_in)
            m[:, 0] *= np.sqrt(0.5)
        else:
            m[:, 0] *= 0.5
    else:
        m = np.cos(np.pi / n_in * (n + 0.5) * (k + 0.5))
        if normalize:
            m *= np.sqrt(2.0 / n_in)
    if lifter > 0:
        i = np.arange(n_out, dtype=np.float64)
        m *= (1.0 + 0.5 * lifter * np.sin(np.pi * (i + 1) / lifter))[:, None]
    return m.astype(np.float32)


@register
class Mfcc(Operator):
    """DCT of mel spectrograms: cepstral coefficients."""

    prefers_worker_processes = True  # (NumPy call after NumPy call: base.Operator says why)

    schema = Schema(
        name="mfcc",
        legacy_name="MFCC",
        doc="Mel-frequency cepstral coefficients: the first n_mfcc DCT coefficients along axis.",
        args=[Arg("axis", "int", 0, doc="axis transformed (the mel bands)"),
              Arg("dct_type", "int", 2, doc="DCT type, 1 to 4"),
              Arg("lifter", "float", 0.0, doc="cepstral liftering coefficient (0: none)"),
              Arg("n_mfcc", "int", 20, doc="number of coefficients kept"),
              Arg("normalize", "bool", False, doc="orthonormal DCT basis (not with dct_type 1)")],
        devices=("cpu",),
    )

    def setup(self):
        a, name = self.args, self.schema.name
        if a["dct_type"] not in (1, 2, 3, 4):
            raise arg_error(name, "dct_type", f"must be 1, 2, 3 or 4, got {a['dct_type']}")
        if a["dct_type"] == 1 and a["normalize"]:
            raise arg_error(name, "normalize", "is not supported with dct_type=1")
        if a["n_mfcc"] < 1:
            raise arg_error(name, "n_mfcc", f"must be positive, got {a['n_mfcc']}")
        if a["lifter"] < 0:
            raise arg_error(name, "lifter", f"must not be negative, got {a['lifter']}")

    def run_sample(self, inputs, args, ctx):
        x = np.asarray(inputs[0])
        a = self.args
        axis = a["axis"]
        if not 0 <= axis < x.ndim:
            raise self.error(f"argument 'axis' = {axis} is out of range for a sample of {x.ndim} dimensions")
        n_in = x.shape[axis]
        if a["n_mfcc"] > n_in:
            raise self.error(f"argument 'n_mfcc' = {a['n_mfcc']} exceeds the {n_in} values along axis {axis}")
        m = dct_matrix(a["dct_type"], n_in, a["n_mfcc"], a["normalize"], a["lifter"])
        out = np.tensordot(m, x.astype(np.float32, copy=False), axes=([1], [axis]))
        return np.ascontiguousarray(np.moveaxis(out, 0, axis), dtype=np.float32)
