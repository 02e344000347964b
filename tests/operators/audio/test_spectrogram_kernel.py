"""``spectrogram``'s two kernels (stoker/operators/audio/gpu_spectrogram.py), their source compiled
for the host with g++ (tests/host_cuda.py), run by the GPU operator's own host half on the null
device (NumPy's FFT standing in for cuFFT): the spectrogram must match the CPU operator's.

The framing kernel finds each row's sample by a binary search of the samples' first rows, so the
batches here mix empty signals, signals shorter than one window and signals too short to mirror,
at the start, the middle and the end of a batch. (On a GPU: tests/operators/audio/test_audio_gpu.py.)"""

import ctypes
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
import host_cuda  # noqa: E402
import null_device  # noqa: E402
from test_audio_gpu_host import run, signals  # noqa: E402

from stoker import fn  # noqa: E402
from stoker.operators.audio import gpu_spectrogram  # noqa: E402

SHIM = host_cuda.prelude("long long") + r"""
static Dim gridDim;
struct float2 { float x, y; };
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fadd_rn(float a, float b) { return a + b; }
#include "spectrogram_kernels.cu"

extern "C" void frames(const float *x, const long long *stab, int nsamples, const float *window, float *out,
                       long long total, long long used, long long nfft, long long length, long long step,
                       long long shift, int reflect, long long gx, unsigned threads) {
  gridDim.x = gx;
  launch(gx, 1, threads, [&] {
    stoker_spectrogram_frames(x, stab, nsamples, window, out, total, used, nfft, length, step, shift, reflect);
  });
}

extern "C" void power(const float2 *spec, const long long *stab, float *out, long long nbins, int pw, int fm,
                      long long gx, long long gy, unsigned threads) {
  gridDim.x = gx;
  launch(gx, gy, threads, [&] { stoker_spectrogram_power(spec, stab, out, nbins, pw, fm); });
}
"""


def _ptr(a) -> ctypes.c_void_p:
    return ctypes.c_void_p(np.asarray(a).__array_interface__["data"][0])


@pytest.fixture(scope="module")
def kernels(tmp_path_factory):
    lib = host_cuda.build(tmp_path_factory.mktemp("spectrogram"), SHIM, "spectrogram",
                          headers={"spectrogram_kernels.cu": gpu_spectrogram._KERNELS})
    if lib is None:
        pytest.skip("no g++ to compile the kernels for the host")
    i64, i32 = ctypes.c_longlong, ctypes.c_int

    def frames(args):
        x, stab, n, window, out = args[:5]
        rest = [i64(int(v)) for v in args[5:11]]
        # a small grid, so that threads stride over the rows more than once
        lib.frames(_ptr(x), _ptr(stab), i32(int(n)), _ptr(window), _ptr(out), *rest, i32(int(args[11])),
                   i64(3), ctypes.c_uint(32))

    def power(args):
        spec, stab, out, nbins, pw, fm = args
        spec64 = np.ascontiguousarray(spec, np.complex64)  # (NumPy's FFT gives complex128; cuFFT complex64)
        lib.power(_ptr(spec64), _ptr(stab), _ptr(out), i64(int(nbins)), i32(int(pw)), i32(int(fm)),
                  i64(2), i64(np.asarray(stab).size // 4), ctypes.c_uint(32))

    return {"stoker_spectrogram_frames": frames, "stoker_spectrogram_power": power}


def _batch(seed: int) -> list:
    rng = np.random.default_rng(seed)
    short = [np.zeros(0, np.float32), rng.standard_normal(1).astype(np.float32),
             rng.standard_normal(2).astype(np.float32), rng.standard_normal(150).astype(np.float32)]
    return [short[0], short[1]] + signals(3, seed=seed) + [short[2], short[3]] + signals(2, seed=seed + 1) + [short[0]]


CASES = [dict(), dict(center_windows=False), dict(reflect_padding=False), dict(layout="tf", power=1),
         dict(window_length=256, window_step=256, center_windows=False)]


@pytest.mark.parametrize("kw", CASES, ids=str)
def test_kernels_match_the_cpu_operator(kernels, monkeypatch, kw):
    args = {**dict(nfft=256, window_length=200, window_step=80), **kw}
    batch = _batch(3)
    want = run(lambda x: fn.spectrogram(x, **args), batch, False)
    with null_device.installed():
        for name, emulate in kernels.items():
            monkeypatch.setitem(null_device.EMULATED, name, emulate)
        got = run(lambda x: fn.spectrogram(x, **args), batch, True)
    assert got[0][1] == want[0][1]
    for i, (g, w) in enumerate(zip(got[0][0], want[0][0])):
        assert g.shape == w.shape and g.dtype == w.dtype == np.float32, i
        if w.size:
            scale = float(np.abs(w).max()) or 1.0
            np.testing.assert_allclose(g, w, rtol=0, atol=2e-5 * scale, err_msg=f"sample {i}")


def test_window_counts_place_each_sample_after_the_last():
    lengths = np.array([0, 1, 199, 200, 201, 1000, 0], np.int64)
    counts, first, shift = gpu_spectrogram.window_counts(lengths, 200, 80, center=False)
    assert counts.tolist() == [0, 0, 0, 1, 1, 11, 0] and shift == 0
    assert first.tolist() == [0, 0, 0, 0, 1, 2, 13]
    counts, first, shift = gpu_spectrogram.window_counts(lengths, 200, 80, center=True)
    assert counts.tolist() == [1, 1, 3, 3, 3, 13, 1] and shift == 100
    assert first.tolist() == [0, 1, 2, 5, 8, 11, 24]
