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
from stoker.operators.audio._memory import keep_freed_memory
from stoker.operators.base import Operator
from stoker.operators.schema import Arg, Schema, register


def hann_window(n: int) -> np.ndarray:
    """DALI's default analysis window: ``0.5 (1 - cos(2 pi (t + 0.5) / n))``, float32."""
    t = np.arange(n, dtype=np.float64)
    return (0.5 * (1.0 - np.cos(2.0 * np.pi / n * (t + 0.5)))).astype(np.float32)


def window_indices(n: int, length: int, step: int, center: bool, reflect: bool, start: int = 0,
                   stop: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(indices, inside): the signal index read by each (window, tap) of windows ``start`` to
    ``stop`` (default: all), shape (windows, length), and whether it lies in the signal (False
    only where zero padding applies)."""
    count, offset, _, _ = frame_range(n, length, step, center)
    stop = count if stop is None else min(stop, count)
    rows = np.arange(start, max(stop, start), dtype=np.int64)
    idx = rows[:, None] * step - offset + np.arange(length, dtype=np.int64)
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


def frame_range(n: int, length: int, step: int, center: bool) -> tuple[int, int, int, int]:
    """(count, offset, first, stop): the number of windows, how far window 0 starts before the
    signal, and the windows ``first <= k < stop`` that lie wholly inside it (the others need
    padding)."""
    if center:
        count, offset = n // step + 1, length // 2
    else:
        count, offset = ((n - length) // step + 1 if n >= length else 0), 0
    first = min(-(-offset // step), count)
    stop = max(min((n - length + offset) // step + 1, count), first) if n >= length else first
    return count, offset, first, stop


def frames_view(x: np.ndarray, length: int, step: int, center: bool, reflect: bool, start: int = 0,
                stop: int | None = None) -> np.ndarray:
    """Windows ``start <= k < stop`` of the 1D signal ``x`` as a (windows, length) array, the same
    values :func:`window_indices` reads: a strided view of ``x`` where they lie inside it, a
    gathered copy (mirrored or zero padded) where they do not."""
    n = x.shape[0]
    count, offset, first, last = frame_range(n, length, step, center)
    stop = count if stop is None else min(stop, count)
    if start >= stop:
        return np.zeros((0, length), x.dtype)
    if first <= start and stop <= last:
        lo = start * step - offset
        return np.lib.stride_tricks.sliding_window_view(x[lo:(stop - 1) * step - offset + length], length)[::step]
    idx, inside = window_indices(n, length, step, center, reflect, start, stop)
    if n == 0:
        return np.zeros(idx.shape, x.dtype)
    frames = x[idx]
    if not reflect:
        frames[~inside] = 0
    return frames


# Windows transformed per FFT call. Each NumPy call releases the GIL for its work but holds it
# for its dispatch, and with two pipeline threads busy each call may wait for the GIL on its way
# back: few, large calls are what lets two threads overlap. On 2 cores, the benchmark's front end
# at 2 threads ran at 402 utterances/s with 64 windows a call (and gathered edge windows), 488 with
# 128, ~500 with 256 to 1024 (benchmarks/audio_frontend.py). 256 windows' buffers (frames and
# spectrum, ~2 MB at nfft 512) stay in a core's L2 cache; they are kept per thread and reused
# call after call instead of being allocated (and page-faulted in) per sample.
CHUNK = 256
_scratch = threading.local()


def _buffers(nfft: int, length: int, rows: int) -> tuple[np.ndarray, np.ndarray]:
    """This thread's (frames, spectrum) buffers of at least ``rows`` rows for ``nfft`` (grown when
    a longer signal comes): frame columns from ``length`` on stay zero (never written), so only
    the window's taps are filled."""
    cache = getattr(_scratch, "bufs", None)
    if cache is None:
        cache = _scratch.bufs = {}
    bufs = cache.get((nfft, length))
    if bufs is None or bufs[0].shape[0] < rows:
        bufs = cache[(nfft, length)] = (np.zeros((rows, nfft)), np.empty((rows, nfft // 2 + 1), np.complex128))
    return bufs


def _scratch_f32(name: str, size: int) -> np.ndarray:
    """This thread's float32 buffer ``name`` of at least ``size`` values (its first ``size``)."""
    buf = getattr(_scratch, name, None)
    if buf is None or buf.size < size:
        buf = np.empty(max(size, 1 << 18), np.float32)
        setattr(_scratch, name, buf)
    return buf[:size]


def all_windows(x: np.ndarray, length: int, step: int, center: bool, reflect: bool) -> np.ndarray:
    """Every window of the 1D float32 signal ``x`` as a read-only (windows, length) array, the
    values :func:`window_indices` reads: a strided view of ``x``, or with ``center_windows`` of a
    padded copy of it in this thread's scratch buffer (valid until the thread's next call). One
    view for all windows, so the transform loop has no edge cases and no per-chunk gathers; a
    signal too short to mirror once at an end takes the gathered copy of :func:`frames_view`."""
    n = x.shape[0]
    count, offset, _, _ = frame_range(n, length, step, center)
    right = max(0, (count - 1) * step - offset + length - n)
    if count == 0 or n == 0 or (center and reflect and (offset >= n or right >= n)):
        return frames_view(x, length, step, center, reflect)
    src = x
    if center:
        src = _scratch_f32("padded", offset + n + right)
        src[offset:offset + n] = x
        if reflect:  # mirrored without the edge sample: x[offset], ..., x[1] | x | x[n-2], x[n-3], ...
            src[:offset] = x[offset:0:-1]
            src[offset + n:] = x[n - 2:n - 2 - right:-1] if n - 2 - right >= 0 else x[n - 2::-1]
        else:
            src[:offset] = 0
            src[offset + n:] = 0
    return np.lib.stride_tricks.as_strided(src, (count, length), (step * src.strides[0], src.strides[0]),
                                           writeable=False)


def stft_power(x: np.ndarray, nfft: int, length: int, step: int, window: np.ndarray, power: int,
               center: bool, reflect: bool, freq_major: bool = False) -> np.ndarray:
    """The float32 spectrogram of the 1D float32 signal ``x``: (windows, nfft // 2 + 1), or
    (nfft // 2 + 1, windows) with ``freq_major``.

    Each window's taps are multiplied in float32 (DALI's products) and transformed in float64:
    NumPy's float64 FFT runs faster than its float32 one (NumPy 2.x) and is the more exact. Windows
    are taken ``CHUNK`` at a time from :func:`all_windows`; the squared magnitudes are summed in
    place from the spectrum's (re, im) pairs and rounded to float32 as they are stored."""
    x = np.asarray(x, np.float32)
    windows = all_windows(x, length, step, center, reflect)
    count, nbins = windows.shape[0], nfft // 2 + 1
    # a freq-major output is transposed from time-major rows in one copy, which writes whole
    # rows of it (storing each chunk transposed wrote a few values per row, a page apart)
    rows = _scratch_f32("staging", count * nbins).reshape(count, nbins) if freq_major \
        else np.empty((count, nbins), np.float32)
    buf, spec = _buffers(nfft, length, min(count, CHUNK))
    pairs = spec.view(np.float64)  # (rows, 2 * nbins): re, im, re, im, ...
    window = np.asarray(window, np.float32)
    for k in range(0, count, CHUNK):
        e = min(k + CHUNK, count)
        m = e - k
        # float32 products, widened as they are stored
        np.multiply(windows[k:e], window, out=buf[:m, :length], dtype=np.float32, casting="unsafe")
        np.fft.rfft(buf[:m], axis=1, out=spec[:m])
        if power == 2:
            np.square(pairs[:m], out=pairs[:m])
            np.add(pairs[:m, 0::2], pairs[:m, 1::2], out=rows[k:e])
        else:
            np.abs(spec[:m], out=rows[k:e])
    if not freq_major:
        return rows
    out = np.empty((nbins, count), np.float32)
    out[...] = rows.T
    return out


@register
class Spectrogram(Operator):
    """Power or magnitude spectrogram of 1D audio."""

    prefers_worker_processes = True  # (NumPy call after NumPy call: base.Operator says why)

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
        keep_freed_memory()  # (see ._memory: per-sample arrays of a few MB, freed a batch at a time)
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
