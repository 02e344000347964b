"""``spectrogram``: short-time Fourier transform magnitudes of a one-channel float signal.

Windows of ``window_length`` samples every ``window_step`` samples are multiplied by
``window_fn`` (default: the periodic Hann window sampled at half steps, ``0.5 - 0.5 cos(2 pi
(t + 0.5) / N)``, which is DALI's), zero-padded to ``nfft`` (default ``window_length``) and
transformed with ``numpy.fft.rfft`` in float64; each bin's magnitude (``power=1``) or squared magnitude
(``power=2``) is kept, ``nfft // 2 + 1`` bins in all.

With ``center_windows`` (default) window ``k`` is centred on sample ``k * window_step``, there
are ``T // window_step + 1`` of them and the signal is extended past its ends by mirroring
(``reflect_padding``, without repeating the edge sample) or with zeros. Without it only the
``(T - window_length) // window_step + 1`` windows inside the signal are taken.

Output: float32 (bins, windows) with layout "ft", or (windows, bins) "tf".
"""

from __future__ import annotations

import threading

import numpy as np

from stoker.errors import arg_error
from stoker.operators.base import Operator
from stoker.operators.schema import Arg, Schema, register


def hann_window(n: int) -> np.ndarray:
    """DALI's default analysis window: ``0.5 (1 - cos(2 pi (t + 0.5) / n))``, float32."""
    t = np.arange(n, dtype=np.float64)
    return (0.5 * (1.0 - np.cos(2.0 * np.pi / n * (t + 0.5)))).astype(np.float32)


def window_indices(n: int, length: int, step: int, center: bool, reflect: bool) -> tuple[np.ndarray, np.ndarray]:
    """(indices, inside): the signal index read by each (window, tap), shape (windows, length),
    and whether it lies in the signal (False only where zero padding applies)."""
    if center:
        count = n // step + 1
        offset = length // 2
    else:
        count = (n - length) // step + 1 if n >= length else 0
        offset = 0
    idx = np.arange(count, dtype=np.int64)[:, None] * step - offset + np.arange(length, dtype=np.int64)
    if reflect and center and n > 0:
        if n == 1:
            idx = np.zeros_like(idx)
        else:
            # mirror about both ends (no repeated edge): the pattern repeats every 2n - 2 samples
            period = 2 * n - 2
            m = np.mod(idx, period)
            idx = np.where(m < n, m, period - m)
    inside = (idx >= 0) & (idx < n)
    return np.clip(idx, 0, max(n - 1, 0)), inside


def frames_view(x: np.ndarray, length: int, step: int, center: bool, reflect: bool) -> np.ndarray:
    """The (windows, length) frames of the 1D signal ``x`` as a strided view (no index arrays):
    the signal padded once (mirrored or zeros) where windows are centred, then every ``step``-th
    window of a sliding view. The same values :func:`window_indices` reads."""
    n = x.shape[0]
    if not center:
        count = (n - length) // step + 1 if n >= length else 0
        padded = x if count else np.zeros(length, x.dtype)
    else:
        count = n // step + 1
        left = length // 2
        right = max((count - 1) * step + length - n - left, 0)
        if n == 0:
            padded = np.zeros(left + right, x.dtype)
        elif reflect and n == 1:
            padded = np.full(left + right + 1, x[0], x.dtype)
        else:  # numpy's "reflect" mirrors without the edge sample, again and again for short signals
            padded = np.pad(x, (left, right), mode="reflect" if reflect else "constant")
    return np.lib.stride_tricks.sliding_window_view(padded, length)[::step][:count]


# Frames transformed per FFT call: the chunk's frames, spectrum and powers (~0.7 MB at nfft 512)
# stay in a core's cache, and the buffers are reused call after call instead of being allocated
# (and page-faulted in) per sample, which made whole-signal temporaries the larger part of the
# cost once many pipeline threads ran at once.
CHUNK = 128
_scratch = threading.local()


def _new_buffers(rows: int, nfft: int):
    nbins = nfft // 2 + 1
    return np.zeros((rows, nfft)), np.empty((rows, nbins), np.complex128), np.empty((rows, nbins))


def _buffers(rows: int, nfft: int, length: int):
    """(frames, spectrum, powers) buffers for ``rows`` frames of ``nfft``, whose frame columns
    from ``length`` on stay zero: this thread's own for full chunks, fresh ones for a short signal."""
    if rows < CHUNK:
        return _new_buffers(rows, nfft)
    cache = getattr(_scratch, "bufs", None)
    if cache is None:
        cache = _scratch.bufs = {}
    bufs = cache.get((nfft, length))
    if bufs is None:
        bufs = cache[(nfft, length)] = _new_buffers(rows, nfft)
    return bufs


def stft_power(x: np.ndarray, nfft: int, length: int, step: int, window: np.ndarray, power: int,
               center: bool, reflect: bool, freq_major: bool = False) -> np.ndarray:
    """The float32 spectrogram of the 1D float32 signal ``x``: (windows, nfft // 2 + 1), or
    (nfft // 2 + 1, windows) with ``freq_major``.

    The windowed frames are transformed in float64: NumPy's float64 FFT runs ~2.8 times faster
    than its float32 one (NumPy 2.x), and is the more exact. Frames come from a strided view of
    the signal (no index arrays), ``CHUNK`` at a time."""
    frames = frames_view(np.asarray(x, np.float32), length, step, center, reflect)
    count, nbins = frames.shape[0], nfft // 2 + 1
    out = np.empty((nbins, count) if freq_major else (count, nbins), np.float32)
    rows = min(CHUNK, max(count, 1))
    buf, spec, pw = _buffers(rows, nfft, length)
    window = np.asarray(window, np.float32)
    for k in range(0, count, rows):
        m = min(rows, count - k)
        # float32 products (the frames' values), widened as they are stored; the zero padding
        # past ``length`` is never written, and stale rows past ``m`` are not read back
        np.multiply(frames[k:k + m], window, out=buf[:m, :length], dtype=np.float32, casting="unsafe")
        np.fft.rfft(buf, axis=1, out=spec)
        if power == 2:
            np.multiply(spec.real, spec.real, out=pw)
            pw += np.square(spec.imag)
        else:
            np.abs(spec, out=pw)
        if freq_major:
            out[:, k:k + m] = pw[:m].T
        else:
            out[k:k + m] = pw[:m]
    return out


@register
class Spectrogram(Operator):
    """Power or magnitude spectrogram of 1D audio."""

    schema = Schema(
        name="spectrogram",
        legacy_name="Spectrogram",
        doc="Short-time Fourier transform of a 1D float signal ((T,), (T, 1) or (1, T)): float32 (bins, windows) "
            "with layout 'ft', or 'tf'.",
        args=[Arg("nfft", "int", None, doc="FFT size (default: window_length); gives nfft // 2 + 1 bins"),
              Arg("window_length", "int", 512, doc="samples per window"),
              Arg("window_step", "int", 256, doc="samples between the starts of consecutive windows"),
              Arg("window_fn", "float_list", None, doc="window_length weights of each window (default: Hann)"),
              Arg("power", "int", 2, doc="1: magnitude, 2: power"),
              Arg("center_windows", "bool", True, doc="centre window k on sample k * window_step (pads the ends)"),
              Arg("reflect_padding", "bool", True, doc="pad by mirroring (True) or with zeros (False)"),
              Arg("layout", "layout", "ft", doc="'ft' (frequency major) or 'tf' (time major)")],
        devices=("cpu",),
    )

    def setup(self):
        a, name = self.args, self.schema.name
        if a["window_length"] < 1:
            raise arg_error(name, "window_length", f"must be positive, got {a['window_length']}")
        if a["window_step"] < 1:
            raise arg_error(name, "window_step", f"must be positive, got {a['window_step']}")
        self.nfft = a["nfft"] if a["nfft"] is not None else a["window_length"]
        if self.nfft < a["window_length"]:
            raise arg_error(name, "nfft", f"must be at least window_length ({a['window_length']}), got {self.nfft}")
        if a["power"] not in (1, 2):
            raise arg_error(name, "power", f"must be 1 (magnitude) or 2 (power), got {a['power']}")
        if a["layout"] not in ("ft", "tf"):
            raise arg_error(name, "layout", f"must be 'ft' or 'tf', got {a['layout']!r}")
        if a["window_fn"] is not None:
            if len(a["window_fn"]) != a["window_length"]:
                raise arg_error(name, "window_fn", f"needs window_length ({a['window_length']}) values, "
                                                   f"got {len(a['window_fn'])}")
            self.window = np.asarray(a["window_fn"], np.float32)
        else:
            self.window = hann_window(a["window_length"])

    def output_layouts(self, input_layouts):
        return [self.args["layout"]]

    def run_sample(self, inputs, args, ctx):
        x = np.asarray(inputs[0])
        if x.ndim == 2 and 1 in x.shape:
            x = x.reshape(-1)
        if x.ndim != 1:
            raise self.error(f"expects one channel of audio, (T,), (T, 1) or (1, T), got shape {x.shape}")
        if x.dtype != np.float32:
            raise self.error(f"expects float32 audio, got {x.dtype} (cast it, or decode with dtype=FLOAT)")
        a = self.args
        return stft_power(x, self.nfft, a["window_length"], a["window_step"], self.window, a["power"],
                          a["center_windows"], a["reflect_padding"], freq_major=a["layout"] == "ft")
