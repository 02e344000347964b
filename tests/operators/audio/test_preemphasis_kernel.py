"""``preemphasis_filter``'s float32 kernel (stoker/kernels/preemphasis.cu), its source compiled for
the host with g++ (tests/host_cuda.py), run by the GPU operator's own host half on the null
device: the outputs must equal the CPU operator's to the bit, for every border, per-sample
coefficients, and one-sample and empty signals. (On a GPU: tests/operators/audio/test_audio_gpu.py.)"""

import ctypes
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
import host_cuda  # noqa: E402
import null_device  # noqa: E402
from test_audio_gpu_host import run, signals  # noqa: E402

from stoker import fn, types  # noqa: E402

SHIM = host_cuda.prelude("long long") + r"""
static Dim gridDim;
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
#include "preemphasis.cu"

extern "C" void run(const float *x, float *y, const long long *table, const float *coef, int border,
                    long long gx, long long gy, unsigned threads) {
  gridDim.x = gx;
  launch(gx, gy, threads, [&] { preemphasis_f32(x, y, table, coef, border); });
}
"""


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    lib = host_cuda.build(tmp_path_factory.mktemp("preemphasis"), SHIM, "preemphasis")
    if lib is None:
        pytest.skip("no g++ to compile the kernel for the host")
    launches = []

    def emulate(args):
        x, y, table, coef, border = (np.asarray(a) for a in args)
        ptr = [ctypes.c_void_p(a.__array_interface__["data"][0]) for a in (x, y, table, coef)]
        n = table.size // 2
        launches.append(n)
        # a small grid, so that threads stride over each signal more than once
        lib.run(*ptr, ctypes.c_int(int(border)), ctypes.c_longlong(3), ctypes.c_longlong(n), ctypes.c_uint(32))

    return emulate, launches


CASES = [dict(), dict(border="zero", preemph_coeff=0.5), dict(border="clamp"),
         dict(border="reflect", preemph_coeff=0.2)]


@pytest.mark.parametrize("kw", CASES, ids=str)
def test_kernel_equals_the_cpu_operator(kernel, monkeypatch, kw):
    emulate, launches = kernel
    batch = signals(6) + [np.zeros(1, np.float32), np.float32([0.25, -0.5]), np.zeros(0, np.float32)]
    want = run(lambda x: fn.preemphasis_filter(x, **kw), batch, False)
    with null_device.installed():
        monkeypatch.setitem(null_device.EMULATED, "preemphasis_f32", emulate)
        before = len(launches)
        got = run(lambda x: fn.preemphasis_filter(x, **kw), batch, True)
        assert len(launches) == before + 1, "one launch for the batch"
    for (g, gl), (w, wl) in zip(got, want):
        assert gl == wl
        for a, b in zip(g, w):
            assert a.shape == b.shape and a.dtype == b.dtype
            np.testing.assert_array_equal(a, b)


def test_kernel_with_per_sample_coefficients(kernel, monkeypatch):
    emulate, _ = kernel
    batch = signals(5, seed=4)
    coefs = [np.float32(c) for c in (0.1, 0.97, 0.0, 0.5, 1.0)]

    def build(x):
        return fn.preemphasis_filter(x, preemph_coeff=fn.external_source(source=[coefs], cycle=True))

    want = run(build, batch, False)
    with null_device.installed():
        monkeypatch.setitem(null_device.EMULATED, "preemphasis_f32", emulate)
        got = run(build, batch, True)
    for a, b in zip(got[0][0], want[0][0]):
        np.testing.assert_array_equal(a, b)


def test_other_types_keep_the_array_path(kernel, monkeypatch):
    """int16 in or out: not the float32 kernel (the CuPy steps, compared in test_audio_gpu_host)."""
    emulate, launches = kernel
    with null_device.installed():
        monkeypatch.setitem(null_device.EMULATED, "preemphasis_f32", emulate)
        before = len(launches)
        run(lambda x: fn.preemphasis_filter(x, dtype=types.INT16), signals(3), True)
        assert len(launches) == before
