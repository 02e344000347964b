"""The audio GPU operators (stoker/operators/audio/gpu_*.py) against their CPU
twins on the same ragged batches, several arguments each. The host half alone, on the null
device: tests/operators/audio/test_audio_gpu_host.py.

Tolerances (float32):
* preemphasis_filter: equal (the same float32 operations in the same order);
* audio_resample: within 2e-6 absolute on [-1, 1] signals (the filter taps agree; the sum over
  taps runs in another order); integer outputs within one level;
* spectrogram: within 2e-6 of each sample's largest bin (cuFFT against NumPy's float32 FFT);
* mel_filter_bank, mfcc: within 2e-6 of the largest output (another summation order);
* to_decibels: within 1e-4 dB (the same float64 formula; a float32 max reference);
* nonsilent_region: the same regions on these signals (the GPU's float64 window sums against the
  CPU's float32 running sum differ only where rounding residue decides, see gpu_signal.py).
"""

import numpy as np
import pytest
from gpu_pipelines import load_gpu_module, run_pipeline

import stoker.fn as fn
import stoker.types as types
from stoker.operators import gpu_registry

pytestmark = pytest.mark.gpu

MODULES = ("stoker.operators.audio.gpu_signal", "stoker.operators.audio.gpu_spectrogram",
           "stoker.operators.audio.gpu_features")


@pytest.fixture(autouse=True, scope="module")
def _audio_gpu_loaded():
    for m in MODULES:
        load_gpu_module(m)


def signals(n=7, seed=0, dtype=np.float32, channels=0):
    """Ragged speech-like signals (a tone with pauses plus noise, some with leading silence),
    including a one-sample and a very short one; (T, C) when ``channels``."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        size = (1, 37)[i] if i < 2 else int(rng.integers(400, 9000))
        t = np.arange(size) / 16000
        wave = 0.4 * np.sin(2 * np.pi * (200 + 50 * i) * t) * (np.sin(2 * np.pi * 3 * t) > -0.2)
        wave = wave + 0.01 * rng.standard_normal(size)
        if i % 3 == 2:
            wave[: size // 4] = 0
        if channels:
            wave = np.stack([wave * (1 - 0.2 * c) for c in range(channels)], 1)
        out.append(wave.astype(np.float32) if np.dtype(dtype).kind == "f" else (wave * 20000).astype(dtype))
    return out


def both(build, batch, name, layout=""):
    """(GPU samples, CPU samples) of ``build`` over ``batch``, with the GPU kernel (not the host
    fallback) of operator ``name`` checked, and the layouts equal."""
    before = gpu_registry.FALLBACKS[name]
    (got, gl), = run_pipeline(build, [batch], True, layout)
    assert gpu_registry.FALLBACKS[name] == before, "the host fallback ran instead of the kernel"
    (want, wl), = run_pipeline(build, [batch], False, layout)
    assert gl == wl and len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, w.shape, g.dtype, w.dtype)
    return got, want


def close_to_peak(got, want, tol):
    for g, w in zip(got, want):
        if w.size:
            assert np.abs(g.astype(np.float64) - w).max() <= tol * max(np.abs(w).max(), 1e-30)


@pytest.mark.parametrize("kw", [dict(), dict(border="zero", preemph_coeff=0.5), dict(border="reflect"),
                                dict(dtype=types.INT16)])
@pytest.mark.parametrize("dtype", [np.float32, np.int16])
def test_preemphasis(kw, dtype):
    got, want = both(lambda x: fn.preemphasis_filter(x, **kw), signals(dtype=dtype), "preemphasis_filter")
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("kw", [dict(in_rate=16000.0, out_rate=22050.0), dict(scale=0.5), dict(out_length=1000),
                                dict(in_rate=44100.0, out_rate=16000.0, quality=100.0),
                                dict(scale=1.7, dtype=types.INT16),
                                dict(in_rate=8000.0, out_rate=16000.0, quality=0.0)])
@pytest.mark.parametrize("channels", [0, 2])
def test_audio_resample(kw, channels):
    got, want = both(lambda x: fn.audio_resample(x, **kw), signals(channels=channels), "audio_resample")
    for g, w in zip(got, want):
        tol = 1 if g.dtype.kind == "i" else 2e-6
        assert np.abs(g.astype(np.float64) - w).max(initial=0) <= tol


def test_audio_resample_integer_input():
    got, want = both(lambda x: fn.audio_resample(x, scale=1.3), signals(dtype=np.int16), "audio_resample")
    for g, w in zip(got, want):
        assert np.abs(g.astype(np.int64) - w).max(initial=0) <= 1


@pytest.mark.parametrize("kw", [dict(), dict(nfft=512, window_length=400, window_step=160),
                                dict(window_length=400, window_step=160, nfft=512, power=1),
                                dict(center_windows=False, window_length=256, window_step=128),
                                dict(reflect_padding=False, window_length=128, window_step=64, layout="tf"),
                                dict(window_length=5, window_step=2, window_fn=[0.1, 0.5, 1, 0.5, 0.2], nfft=8)])
def test_spectrogram(kw):
    got, want = both(lambda x: fn.spectrogram(x, **kw), signals(), "spectrogram")
    close_to_peak(got, want, 2e-6)


def test_spectrogram_column_signals():
    batch = [s[:, None] for s in signals()]
    got, want = both(lambda x: fn.spectrogram(x, window_length=256, window_step=100), batch, "spectrogram")
    close_to_peak(got, want, 2e-6)


@pytest.mark.parametrize("layout, kw", [
    ("ft", dict(sample_rate=16000.0)),
    ("ft", dict(sample_rate=16000.0, nfilter=64, mel_formula="htk", normalize=False)),
    ("tf", dict(sample_rate=22050.0, nfilter=40, freq_low=100.0, freq_high=8000.0)),
])
def test_mel_filter_bank(layout, kw):
    rng = np.random.default_rng(0)
    batch = [rng.random((257, n)).astype(np.float32) * 10 for n in (30, 7, 1, 120)]
    if layout == "tf":
        batch = [b.T.copy() for b in batch]
    got, want = both(lambda x: fn.mel_filter_bank(x, **kw), batch, "mel_filter_bank", layout)
    close_to_peak(got, want, 2e-6)


@pytest.mark.parametrize("kw", [dict(), dict(dct_type=1, n_mfcc=13), dict(dct_type=3, normalize=True),
                                dict(normalize=True, lifter=22.0), dict(dct_type=4), dict(axis=1, n_mfcc=5)])
def test_mfcc(kw):
    rng = np.random.default_rng(1)
    batch = [rng.standard_normal((40, n)).astype(np.float32) for n in (30, 9, 64)]
    if kw.get("axis") == 1:
        batch = [rng.standard_normal((n, 40)).astype(np.float32) for n in (30, 9, 64)]
    got, want = both(lambda x: fn.mfcc(x, **kw), batch, "mfcc", "ft" if kw.get("axis") != 1 else "tf")
    close_to_peak(got, want, 2e-6)


@pytest.mark.parametrize("kw", [dict(), dict(multiplier=20.0, reference=1.0), dict(cutoff_db=-40.0),
                                dict(reference=1e-3, cutoff_db=-120.0)])
def test_to_decibels(kw):
    rng = np.random.default_rng(2)
    batch = [(rng.random((64, n)) ** 4).astype(np.float32) for n in (50, 3, 200)] + [np.zeros((64, 5), np.float32)]
    got, want = both(lambda x: fn.to_decibels(x, **kw), batch, "to_decibels", "ft")
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=0, atol=1e-4)


@pytest.mark.parametrize("kw", [dict(), dict(cutoff_db=-30, window_length=64), dict(cutoff_db=-20, window_length=16),
                                dict(cutoff_db=-40, window_length=64, reference_power=0.01)])
@pytest.mark.parametrize("dtype", [np.float32, np.int16])
def test_nonsilent_region(kw, dtype):
    batch = signals(dtype=dtype) + [np.zeros(50, dtype)]
    for k in (0, 1):  # begin, then length
        def build(x, k=k):
            return fn.nonsilent_region(x, **kw)[k]

        before = gpu_registry.FALLBACKS["nonsilent_region"]
        (got, _), = run_pipeline(build, [batch], True, "")
        assert gpu_registry.FALLBACKS["nonsilent_region"] == before
        (want, _), = run_pipeline(build, [batch], False, "")
        assert [int(v) for v in got] == [int(v) for v in want]
        assert all(v.dtype == np.int32 and v.shape == () for v in got)


def test_front_end_chain():
    """preemphasis -> spectrogram -> mel -> decibels on the GPU against the same chain on the CPU."""
    def chain(x):
        x = fn.preemphasis_filter(x)
        spec = fn.spectrogram(x, nfft=512, window_length=400, window_step=160)
        return fn.to_decibels(fn.mel_filter_bank(spec, sample_rate=16000.0, nfilter=64), cutoff_db=-80.0)

    got, want = both(chain, signals(9, seed=4)[2:], "to_decibels")
    for g, w in zip(got, want):
        # bins within 50 dB of the sample's peak: the float32 differences of the chain (~1e-6 of the
        # peak) are a large part of the quietest bins, whose decibels then move by more
        loud = w > w.max() - 50.0
        assert np.abs(g - w)[loud].max() < 1e-2
