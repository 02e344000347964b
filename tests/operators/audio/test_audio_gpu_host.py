"""The audio GPU operators' host half on the null device (tests/null_device.py: CuPy's host side
on NumPy, kernel launches recorded and skipped; no GPU needed).

What runs here: the planning of every audio GPU operator (tables, shapes, layouts, the launches
it makes, one cuFFT call per batch for the spectrogram) and its Python cost, which must not grow
with the batch (counted with ``sys.setprofile`` at two batch sizes, as
tests/operators/test_gpu_host_cost.py counts it). ``preemphasis_filter`` and ``nonsilent_region``
are CuPy array operations only, which the null device computes with NumPy for real, so their
values are compared with the CPU operator's here too.

What does not: the values of the kernels (framing and power of ``spectrogram``, the
``mel_filter_bank``/``mfcc`` product, ``to_decibels``, ``audio_resample``) and of cuFFT (the
null device's ``cupy.fft`` is NumPy's, fed frames the skipped kernel never wrote). Those are
compared with the CPU on a GPU: tests/operators/audio/test_audio_gpu.py.
"""

import importlib
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
import null_device  # noqa: E402

from stoker import fn, pipeline_def, types  # noqa: E402
from stoker.operators import gpu_registry  # noqa: E402

MODULES = ("stoker.operators.audio.gpu_signal", "stoker.operators.audio.gpu_spectrogram",
           "stoker.operators.audio.gpu_features")
SMALL, LARGE = 3, 24
# (NumPy's FFT of frames that no kernel wrote on the null device overflows: not a finding)
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")
SLACK = 8  # calls allowed to grow from SMALL to LARGE samples: well under one per added sample


@pytest.fixture(autouse=True, scope="module")
def _load_pending():
    for m in MODULES:
        importlib.import_module(m)
    gpu_registry.load_gpu_impls()


def signals(n: int, seed: int = 0, dtype=np.float32) -> list:
    """Ragged speech-like signals (a tone with pauses, plus noise) of 300 to 5000 samples."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        t = np.arange(int(rng.integers(300, 5000))) / 16000
        wave = 0.4 * np.sin(2 * np.pi * 300 * t) * (np.sin(2 * np.pi * 3 * t) > 0) + 0.01 * rng.standard_normal(t.size)
        if i % 3 == 1:
            wave[: t.size // 3] = 0  # leading silence
        out.append(wave.astype(np.float32) if dtype == np.float32 else (wave * 20000).astype(dtype))
    return out


def run(build, batch, gpu: bool, outputs: int = 1):
    """``build(x)`` over ``batch`` (external source, moved to the device when ``gpu``): per output,
    the host arrays and the layout."""
    @pipeline_def(batch_size=len(batch), num_threads=1, device_id=0 if gpu else None, seed=1,
                  exec_async=False, exec_pipelined=False, prefetch_queue_depth=1)
    def pipe():
        x = fn.external_source(source=[batch], cycle=True)
        out = build(x.gpu() if gpu else x)
        return out if isinstance(out, tuple) else (out,)

    p = pipe()
    p.build()
    outs = p.run()
    result = [([np.asarray(s) for s in (o.as_cpu() if gpu else o).samples()], o.layout()) for o in outs]
    p.close()
    return result


SPEC = dict(nfft=256, window_length=200, window_step=80)
CHAINS = {
    "preemphasis_filter": lambda x: fn.preemphasis_filter(x, preemph_coeff=0.9, border="reflect"),
    "nonsilent_region": lambda x: fn.nonsilent_region(x, cutoff_db=-30, window_length=64),
    "audio_resample": lambda x: fn.audio_resample(x, in_rate=16000.0, out_rate=22050.0),
    "spectrogram": lambda x: fn.spectrogram(x, **SPEC),
    "mel_filter_bank": lambda x: fn.mel_filter_bank(fn.spectrogram(x, **SPEC), sample_rate=16000.0, nfilter=40),
    "mfcc": lambda x: fn.mfcc(fn.mel_filter_bank(fn.spectrogram(x, **SPEC), sample_rate=16000.0, nfilter=40),
                              n_mfcc=13),
    "to_decibels": lambda x: fn.to_decibels(fn.spectrogram(x, **SPEC), cutoff_db=-80.0),
}
# What each chain adds over its input (the chain's operators before the last count as input).
BASES = {"mel_filter_bank": "spectrogram", "to_decibels": "spectrogram", "mfcc": "mel_filter_bank"}


@pytest.mark.parametrize("kw", [dict(), dict(border="zero", preemph_coeff=0.5), dict(border="clamp"),
                                dict(dtype=types.INT16)])
def test_preemphasis_values_on_the_null_device(kw):
    batch = signals(5) + [np.zeros(1, np.float32), np.float32([0.25, -0.5])]
    want = run(lambda x: fn.preemphasis_filter(x, **kw), batch, False)
    with null_device.installed():
        before = gpu_registry.FALLBACKS["preemphasis_filter"]
        got = run(lambda x: fn.preemphasis_filter(x, **kw), batch, True)
        assert gpu_registry.FALLBACKS["preemphasis_filter"] == before, "the host fallback ran"
    for (g, gl), (w, wl) in zip(got, want):
        assert gl == wl
        for a, b in zip(g, w):
            assert a.shape == b.shape and a.dtype == b.dtype
            np.testing.assert_array_equal(a, b)  # the same float32 operations


def test_preemphasis_per_sample_coefficients_on_the_null_device():
    batch = signals(4, seed=3)
    coefs = [np.float32(c) for c in (0.1, 0.5, 0.97, 0.0)]

    def build(x):
        c = fn.external_source(source=[coefs], cycle=True)
        return fn.preemphasis_filter(x, preemph_coeff=c)

    want = run(build, batch, False)
    with null_device.installed():
        got = run(build, batch, True)
    for a, b in zip(got[0][0], want[0][0]):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("kw", [dict(cutoff_db=-30, window_length=64), dict(cutoff_db=-20, window_length=16),
                                dict(cutoff_db=-40, window_length=64, reference_power=0.01)])
@pytest.mark.parametrize("dtype", [np.float32, np.int16])
def test_nonsilent_region_on_the_null_device(kw, dtype):
    """Regions as on the CPU. The GPU sums squares in float64 where the CPU repeats DALI's float32
    running sum; on these signals (no burst-then-noise edge) they agree to the sample."""
    batch = signals(6, seed=1, dtype=dtype) + [np.zeros(50, dtype)]
    want = run(lambda x: fn.nonsilent_region(x, **kw), batch, False)
    with null_device.installed():
        got = run(lambda x: fn.nonsilent_region(x, **kw), batch, True)
    for (g, _), (w, _) in zip(got, want):
        assert [int(v) for v in g] == [int(v) for v in w]
        assert all(v.dtype == np.int32 and v.shape == () for v in g)


@pytest.mark.parametrize("layout", ["ft", "tf"])
def test_spectrogram_plan_shapes_and_one_fft(layout, monkeypatch):
    batch = signals(5, seed=2) + [np.zeros(0, np.float32), np.zeros(150, np.float32)]
    want = run(lambda x: fn.spectrogram(x, layout=layout, **SPEC), batch, False)
    with null_device.installed() as cp:
        calls = []
        rfft = cp.fft.rfft
        monkeypatch.setattr(cp.fft, "rfft", lambda a, *args, **kw: calls.append(a.shape) or rfft(a, *args, **kw))
        got = run(lambda x: fn.spectrogram(x, layout=layout, **SPEC), batch, True)
        launched = [name for name, _, _ in null_device.LAUNCHES]
    assert len(calls) == 1 and calls[0][1] == SPEC["nfft"]
    assert launched.count("stoker_spectrogram_frames") == 1 and launched.count("stoker_spectrogram_power") == 1
    assert got[0][1] == want[0][1] == layout
    assert [g.shape for g in got[0][0]] == [w.shape for w in want[0][0]]


def test_spectrogram_fft_rows_take_a_few_sizes():
    from stoker.operators.audio.gpu_spectrogram import size_class

    rows = np.arange(1, 100000)
    sized = np.array([size_class(int(r)) for r in rows[::37]])
    assert (sized >= rows[::37]).all() and (sized <= rows[::37] * 17 / 16 + 1).all()
    assert len(set(size_class(r) for r in range(4000, 8000))) <= 20  # cuFFT plans made, at most


@pytest.mark.parametrize("name", ["mel_filter_bank", "mfcc", "to_decibels", "audio_resample"])
def test_kernel_operators_shapes_layouts_no_fallback(name):
    batch = signals(4, seed=5)
    want = run(CHAINS[name], batch, False)
    with null_device.installed():
        before = sum(gpu_registry.FALLBACKS.values())
        got = run(CHAINS[name], batch, True)
        assert sum(gpu_registry.FALLBACKS.values()) == before, "the host fallback ran"
    for (g, gl), (w, wl) in zip(got, want):
        assert gl == wl
        assert [(a.shape, a.dtype) for a in g] == [(b.shape, b.dtype) for b in w]


def test_mel_bands_cover_the_weights():
    """The kernel reads only each band's non-zero columns: they must hold all its weight."""
    from stoker.operators.audio.gpu_features import bands_of
    from stoker.operators.audio.mel_filter_bank import mel_weights

    for args in [(40, 129, 16000.0, 0.0, 8000.0, "slaney", True), (64, 257, 22050.0, 300.0, 6000.0, "htk", False)]:
        w = mel_weights(*args)
        lo, hi = bands_of(w).T
        k = np.arange(w.shape[1])
        inside = (k[None] >= lo[:, None]) & (k[None] < hi[:, None])
        assert not w[~inside].any()
        assert (hi - lo).sum() < 3 * w.shape[1]  # ~2 bands per bin, not nfilter


def test_bad_arguments_raise_the_cpu_error_on_the_null_device():
    from stoker.errors import StokerError

    with null_device.installed(), pytest.raises(StokerError, match="one channel"):
        run(lambda x: fn.spectrogram(x), [np.zeros((50, 2), np.float32)], True)


def count_calls(build, n: int) -> int:
    """Python calls of one iteration (after two warm-ups) of external source -> GPU -> ``build``."""
    batch = signals(n, seed=n)

    @pipeline_def(batch_size=n, num_threads=1, device_id=0, seed=3, exec_async=False, exec_pipelined=False,
                  prefetch_queue_depth=1)
    def pipe():
        x = fn.external_source(source=[batch], cycle=True).gpu()
        out = build(x) if build is not None else x
        return out if isinstance(out, tuple) else (out,)

    p = pipe()
    p.build()
    p.run()
    p.run()
    calls = null_device.python_calls(p.run)
    p.close()
    return calls


@pytest.mark.parametrize("name", sorted(CHAINS))
def test_host_calls_do_not_grow_with_batch(name):
    base = CHAINS.get(BASES.get(name))
    with null_device.installed():
        own = {n: count_calls(CHAINS[name], n) - count_calls(base, n) for n in (SMALL, LARGE)}
    growth = own[LARGE] - own[SMALL]
    assert growth <= SLACK, (f"{name}: {own[SMALL]} Python calls at {SMALL} samples, {own[LARGE]} at {LARGE}: "
                             f"its GPU path plans sample by sample")


def test_kernel_caches_start_afresh_under_another_cupy():
    """A kernel made under one CuPy (a real one on a GPU machine) is never handed to code running
    under another (the null device): the caches live with stoker.backend.cuda's, which
    null_device.installed() empties on the way in and out."""
    from stoker.operators.audio._gpu_common import elementwise, raw_kernel
    from stoker.operators.detection import gpu_boxes
    from stoker.operators.tensor import gpu_lookup

    def made():
        return (raw_kernel('extern "C" __global__ void k(float* x) {}', "k"),
                elementwise("cache_probe", "float32 x", "float32 y", "y = x"),
                gpu_lookup._elementwise("cache_probe_lookup", "T x", "T y", "y = x"),
                gpu_boxes._elementwise("cache_probe_boxes", "float32 x", "y = x"))

    with null_device.installed():
        first = made()
        assert made() == first  # (cached within one CuPy)
    with null_device.installed():
        second = made()
    assert all(a is not b for a, b in zip(first, second))
