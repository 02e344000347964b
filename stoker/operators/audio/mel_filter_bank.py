"""``mel_filter_bank``: a spectrogram's frequency axis mapped onto ``nfilter`` mel bands.

The bands are triangles evenly spaced on the mel scale between ``freq_low`` and ``freq_high``
(default: the Nyquist frequency ``sample_rate / 2``): band m rises from the edge of band m - 1 to
its peak and falls to the peak of band m + 1, with the slopes computed in Hz on the spectrogram's
bin frequencies ``k * sample_rate / nfft``. ``normalize`` scales each triangle to unit area
(Slaney's normalization), otherwise its peak is 1. ``mel_formula``: "slaney" (linear below
1 kHz, logarithmic above; librosa's default) or "htk" (``2595 log10(1 + f / 700)``).

The frequency axis is the 'f' of the input's layout; without a layout, "f", "ft" or "...ft" by
the number of dimensions. The output keeps the layout, with ``nfilter`` in place of the bins.
"""

from __future__ import annotations

import functools

import numpy as np

from stoker.errors import arg_error
from stoker.operators.audio._memory import keep_freed_memory
from stoker.operators.image.crop import LayoutAware
from stoker.operators.schema import Arg, Schema, register

_F_SP = 200.0 / 3  # slaney: Hz per mel below 1 kHz
_MIN_LOG_HZ = 1000.0
_MIN_LOG_MEL = _MIN_LOG_HZ / _F_SP
_LOG_STEP = np.log(6.4) / 27.0


def hz_to_mel(f, formula: str):
    f = np.asarray(f, np.float64)
    if formula == "htk":
        return 2595.0 * np.log10(1.0 + f / 700.0)
    return np.where(f < _MIN_LOG_HZ, f / _F_SP,
                    _MIN_LOG_MEL + np.log(np.maximum(f, 1e-300) / _MIN_LOG_HZ) / _LOG_STEP)


def mel_to_hz(m, formula: str):
    m = np.asarray(m, np.float64)
    if formula == "htk":
        return 700.0 * (10.0 ** (m / 2595.0) - 1.0)
    return np.where(m < _MIN_LOG_MEL, m * _F_SP, _MIN_LOG_HZ * np.exp(_LOG_STEP * (m - _MIN_LOG_MEL)))


def _edges_hz(nfilter: int, freq_low: float, freq_high: float, formula: str) -> np.ndarray:
    """The ``nfilter + 2`` band edges in Hz: band m rises from edge m to m + 1, falls to m + 2."""
    mel_edges = np.linspace(hz_to_mel(freq_low, formula), hz_to_mel(freq_high, formula), nfilter + 2)
    return mel_to_hz(mel_edges, formula)


@functools.lru_cache(maxsize=64)
def mel_weights(nfilter: int, nbins: int, sample_rate: float, freq_low: float, freq_high: float,
                formula: str, normalize: bool) -> np.ndarray:
    """(nfilter, nbins) float32 weights taking ``nbins`` = nfft // 2 + 1 spectrogram bins to mel bands."""
    nfft = 2 * (nbins - 1)
    bins_hz = np.arange(nbins, dtype=np.float64) * (sample_rate / max(nfft, 1))
    hz = _edges_hz(nfilter, freq_low, freq_high, formula)
    left, peak, right = hz[:-2, None], hz[1:-1, None], hz[2:, None]
    up = (bins_hz - left) / (peak - left)
    down = (right - bins_hz) / (right - peak)
    w = np.maximum(0.0, np.minimum(up, down))
    if normalize:
        w *= 2.0 / (right - left)
    return w.astype(np.float32)


# OpenBLAS runs a product of m * n * k <= 2**18 multiply-adds on the calling thread alone (its
# GEMM_MULTITHREAD_THRESHOLD 4 times SMP_THRESHOLD_MIN 65536); above it each product starts BLAS
# threads, which spin against the pipeline's own ones.
_SERIAL_GEMM = 1 << 18
# The cost of one more product, in multiply-adds per frame, when grouping bands (:func:`mel_blocks`).
_CALL_COST = 64


@functools.lru_cache(maxsize=64)
def mel_blocks(nfilter: int, nbins: int, sample_rate: float, freq_low: float, freq_high: float,
               formula: str, normalize: bool) -> tuple[tuple[int, int, int, int, np.ndarray], ...]:
    """The bands of :func:`mel_weights` in runs of neighbours, as ``(first band, end band, first bin,
    end bin, weights)`` with the run's (bands, bins) float32 block of non-zero columns.

    A triangle covers a few bins (~2 bands per bin in all), so the dense ``(nfilter, nbins)``
    product would do ~nfilter / 2 times the work, and a product per band costs a call each. The
    runs (a dynamic programme over cut points) minimise the multiply-adds plus ``_CALL_COST`` for
    each run: ~15 products for 64 bands of 257 bins, with ~4.5 times the non-zero weights."""
    w = mel_weights(nfilter, nbins, sample_rate, freq_low, freq_high, formula, normalize)
    spans = []
    for row in w:
        nz = np.flatnonzero(row)
        spans.append((int(nz[0]), int(nz[-1]) + 1) if nz.size else None)

    def extent(i: int, j: int) -> tuple[int, int]:
        inside = [s for s in spans[i:j] if s is not None]
        return (min(s[0] for s in inside), max(s[1] for s in inside)) if inside else (0, 0)

    best, cut = [0] + [None] * nfilter, [0] * (nfilter + 1)
    for j in range(1, nfilter + 1):
        lo, hi = nbins, 0
        for i in range(j - 1, -1, -1):  # the run i..j-1, grown downwards
            if spans[i] is not None:
                lo, hi = min(lo, spans[i][0]), max(hi, spans[i][1])
            cost = best[i] + (j - i) * max(hi - lo, 0) + _CALL_COST
            if best[j] is None or cost < best[j]:
                best[j], cut[j] = cost, i
    runs, j = [], nfilter
    while j > 0:
        runs.append((cut[j], j))
        j = cut[j]
    blocks = []
    for i, j in reversed(runs):
        lo, hi = extent(i, j)
        blocks.append((i, j, lo, hi, np.ascontiguousarray(w[i:j, lo:hi])))
    return tuple(blocks)


def apply_mel(x2: np.ndarray, blocks: tuple[tuple[int, int, int, int, np.ndarray], ...],
              nfilter: int) -> np.ndarray:
    """``weights @ x2`` for a float32 (nbins, M) ``x2``, from :func:`mel_blocks`: (nfilter, M).

    One BLAS product per block of bands (over its bins alone), split along M where needed so that
    none exceeds ``_SERIAL_GEMM`` multiply-adds: a pipeline runs samples on its own threads, and an
    OpenBLAS product above that threshold starts one thread per core, all of them spinning
    against each other (measured on 2 cores: the front end ran 3.6 times faster with
    OPENBLAS_NUM_THREADS=1). This replaced an ``einsum`` per band (64 calls a sample, mostly call
    overhead)."""
    m = x2.shape[1]
    out = np.empty((nfilter, m), np.float32)
    for i, j, lo, hi, w in blocks:
        if hi <= lo:
            out[i:j] = 0
            continue
        step = max(1, _SERIAL_GEMM // w.size)
        for t in range(0, m, step):
            np.matmul(w, x2[lo:hi, t:t + step], out=out[i:j, t:t + step])
    return out


def freq_axis(layout: str, ndim: int) -> int:
    """Index of the frequency axis: the 'f' of ``layout``, else by convention ("f", "ft", "...ft")."""
    if layout and "f" in layout:
        return layout.index("f")
    return 0 if ndim == 1 else ndim - 2


@register
class MelFilterBank(LayoutAware):
    """Triangular mel filters over the frequency axis of a spectrogram."""

    prefers_worker_processes = True  # (NumPy call after NumPy call: base.Operator says why)

    schema = Schema(
        name="mel_filter_bank",
        legacy_name="MelFilterBank",
        doc="Maps a spectrogram's frequency axis ('f' of the layout) onto nfilter triangular mel bands.",
        args=[Arg("nfilter", "int", 128, doc="number of mel bands"),
              Arg("sample_rate", "float", 44100.0, doc="sample rate of the audio (Hz)"),
              Arg("freq_low", "float", 0.0, doc="lowest frequency (Hz)"),
              Arg("freq_high", "float", 0.0, doc="highest frequency (Hz); 0 means sample_rate / 2"),
              Arg("mel_formula", "str", "slaney", doc="'slaney' or 'htk'"),
              Arg("normalize", "bool", True, doc="unit-area triangles (True) or unit peaks (False)")],
        devices=("cpu",),
    )

    def setup(self):
        keep_freed_memory()  # (see ._memory: per-sample arrays of a few MB, freed a batch at a time)
        a, name = self.args, self.schema.name
        if a["nfilter"] < 1:
            raise arg_error(name, "nfilter", f"must be positive, got {a['nfilter']}")
        if a["mel_formula"] not in ("slaney", "htk"):
            raise arg_error(name, "mel_formula", f"must be 'slaney' or 'htk', got {a['mel_formula']!r}")
        if a["sample_rate"] <= 0:
            raise arg_error(name, "sample_rate", f"must be positive, got {a['sample_rate']}")
        self.freq_high = a["freq_high"] if a["freq_high"] > 0 else a["sample_rate"] / 2
        if not 0 <= a["freq_low"] < self.freq_high:
            raise arg_error(name, "freq_low", f"must be in [0, freq_high={self.freq_high}), got {a['freq_low']}")
        if self.freq_high > a["sample_rate"] / 2:
            raise arg_error(name, "freq_high", f"must not exceed the Nyquist frequency {a['sample_rate'] / 2}, "
                                               f"got {self.freq_high}")

    def weights(self, nbins: int) -> np.ndarray:
        a = self.args
        return mel_weights(a["nfilter"], nbins, a["sample_rate"], a["freq_low"], self.freq_high,
                           a["mel_formula"], a["normalize"])

    def output_layouts(self, input_layouts):
        return [input_layouts[0] if input_layouts else ""]

    def run_sample(self, inputs, args, ctx):
        x = np.asarray(inputs[0])
        if x.ndim == 0:
            raise self.error("expects a spectrogram, got a scalar")
        axis = freq_axis(self.layout_of(args), x.ndim)
        a, nbins = self.args, x.shape[axis]
        blocks = mel_blocks(a["nfilter"], nbins, a["sample_rate"], a["freq_low"], self.freq_high,
                            a["mel_formula"], a["normalize"])
        front = np.moveaxis(x.astype(np.float32, copy=False), axis, 0)
        out = apply_mel(front.reshape(nbins, -1), blocks, a["nfilter"])
        out = out.reshape((a["nfilter"],) + front.shape[1:])
        return np.ascontiguousarray(np.moveaxis(out, 0, axis))


