"""normalize's per-sample statistics over a ragged batch in one launch (normalize_stats.py +
kernels/ragged_stats.cu), checked without a GPU three ways:

(a) the plan (``stats_rows``) read by a NumPy transcription of the kernel (:func:`model`: its
    index arithmetic, its float64 formulas) gives per-sample NumPy reductions, over random ragged
    batches of 1-4 dims, every axes subset, zero and one extents;
(b) the .cu file itself, built for the host with g++ (CUDA's keywords defined away, one host
    thread per CUDA thread, a barrier for ``__syncthreads``, as tests/operators/detection/
    gpu_box_kernels_model.py does), run on the same plans for every input type;
(c) ``gpu_normalize`` on the null device (tests/null_device.py) with the kernel emulated by (a)
    or (b): its mean and factor tables equal the per-sample path's, the host plan makes the same
    number of Python calls at 4 and 64 samples, uploads one stats table, launches once, never
    falls back.
What only a GPU can check (NVRTC, the launch itself) is tests/operators/image/test_normalize_gpu.py.
"""

import ctypes
import itertools
import os
import pathlib
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
import host_cuda  # noqa: E402
import null_device  # noqa: E402

from stoker.operators import gpu_registry  # noqa: E402
from stoker.operators.image import gpu_normalize as gn  # noqa: E402
from stoker.operators.image import normalize_stats as ns  # noqa: E402
from stoker.operators.schema import get_operator  # noqa: E402

KERNELS = pathlib.Path(ns.__file__).resolve().parents[2] / "kernels"
TYPES = {"u8": np.uint8, "i8": np.int8, "u16": np.uint16, "i16": np.int16, "i32": np.int32, "f16": np.float16,
         "f32": np.float32, "f64": np.float64}
RTOL = 1e-12


# --- (a) the plan, read as the kernel reads it ---------------------------------------------------

def grid_offsets(index, ext, stride) -> np.ndarray:
    """The kernel's ``grid_offset`` for an array of indices: innermost dim first, the outermost
    coordinate what is left of the index, 0 without dims."""
    index = np.asarray(index, np.int64).copy()
    off = np.zeros_like(index)
    for d in range(len(ext) - 1, 0, -1):
        off += (index % ext[d]) * stride[d]
        index //= ext[d]
    return off + index * stride[0] if len(ext) else off


def model(rows, flat_samples, need_std: bool, ddof: int, eps: float):
    """What the kernel writes for ``rows``, ``flat_samples[s]`` (sample s raveled) standing in for
    its pointer: ``(mean, std or None)`` float64 tables (sums in NumPy's order, not the tree's)."""
    rows = np.asarray(rows, np.int64)
    total = int(rows[-1, 1] + rows[-1, 2]) if len(rows) else 0
    mean = np.zeros(total)
    std = np.zeros(total) if need_std else None
    for r, src in zip(rows, flat_samples):
        nk, nr, count, at, k = int(r[4]), int(r[5]), int(r[3]), int(r[1]), int(r[2])
        base = grid_offsets(np.arange(k), r[ns.KEPT_EXT:ns.KEPT_EXT + nk], r[ns.KEPT_STRIDE:ns.KEPT_STRIDE + nk])
        j = grid_offsets(np.arange(count), r[ns.RED_EXT:ns.RED_EXT + nr], r[ns.RED_STRIDE:ns.RED_STRIDE + nr])
        vals = np.asarray(src).astype(np.float64)[base[:, None] + j[None, :]]
        m = vals.sum(axis=1) / max(count, 1)
        mean[at:at + k] = m
        if need_std:
            d = vals - m[:, None]
            sq = (d * d).sum(axis=1)
            var = sq / (count - ddof) if count - ddof > 0 else np.zeros_like(sq)
            std[at:at + k] = np.sqrt(var + eps)
    return mean, std


def reference(samples, axes, ddof: int, eps: float):
    """Per-sample NumPy: flat float64 (mean, std) tables, sample by sample, kept entries raveled."""
    means, stds = [], []
    for s in samples:
        x = s.astype(np.float64)
        count = int(np.prod([s.shape[d] for d in axes]))
        m = x.sum(axis=tuple(axes), keepdims=True) / max(count, 1)
        sq = ((x - m) ** 2).sum(axis=tuple(axes), keepdims=True)
        var = sq / (count - ddof) if count - ddof > 0 else np.zeros_like(sq)
        means.append(m.ravel())
        stds.append(np.sqrt(var + eps).ravel())
    return np.concatenate(means), np.concatenate(stds)


def random_batch(rng, ndim: int, n: int, dtype=np.float32, zeros: bool = True) -> list:
    """Ragged samples of ``ndim`` dims: extents 1-7 (now and then 0 when ``zeros``), values that
    fit ``dtype``."""
    hi = 8
    shapes = rng.integers(1, hi, (n, ndim))
    if zeros:
        shapes[rng.random((n, ndim)) < 0.05] = 0
    info = np.iinfo(dtype) if np.dtype(dtype).kind in "iu" else None
    out = []
    for shape in shapes:
        if info is not None:
            out.append(rng.integers(max(info.min, -1000), min(info.max, 1000) + 1, shape).astype(dtype))
        else:
            out.append((rng.normal(3.0, 5.0, shape)).astype(dtype))
    return out


def all_axes_subsets(ndim: int):
    return [list(c) for k in range(1, ndim + 1) for c in itertools.combinations(range(ndim), k)]


def _assert_tables(got, want):
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=0)


def test_runs_merge_adjacent_dims_of_one_kind():
    assert ns.runs(4, [1, 2]) == [(0, 0, False), (1, 2, True), (3, 3, False)]
    assert ns.runs(3, [0, 1, 2]) == [(0, 2, True)]
    assert ns.runs(2, [1]) == [(0, 0, False), (1, 1, True)]
    assert ns.runs(4, [0, 2]) == [(0, 0, True), (1, 1, False), (2, 2, True), (3, 3, False)]


def test_rows_of_the_audio_case():
    """(64, T_i) reduced over time: one kept dim (64, stride T_i), one reduced (T_i, stride 1)."""
    rows = ns.stats_rows(np.array([[64, 100], [64, 7]]), [1])
    assert rows[:, 1:6].tolist() == [[0, 64, 100, 1, 1], [64, 64, 7, 1, 1]]
    assert rows[:, ns.KEPT_EXT].tolist() == [64, 64] and rows[:, ns.KEPT_STRIDE].tolist() == [100, 7]
    assert rows[:, ns.RED_EXT].tolist() == [100, 7] and rows[:, ns.RED_STRIDE].tolist() == [1, 1]
    assert ns.block_size(rows) == 128


def test_block_size_is_a_power_of_two_from_a_warp_to_the_shared_array():
    for longest, want in [(0, 32), (1, 32), (32, 32), (33, 64), (256, 256), (257, 256), (10 ** 6, 256)]:
        rows = np.zeros((2, ns.ROW), np.int64)
        rows[1, 3] = longest
        assert ns.block_size(rows) == want


def test_too_many_runs_is_refused():
    assert ns.stats_rows(np.ones((2, 17), np.int64), list(range(0, 17, 2))) is None
    assert ns.stats_rows(np.ones((2, 16), np.int64), list(range(0, 16, 2))) is not None


@pytest.mark.parametrize("ndim", [1, 2, 3, 4])
def test_model_of_the_plan_matches_per_sample_numpy(ndim):
    rng = np.random.default_rng(ndim)
    worst = 0.0
    for axes in all_axes_subsets(ndim):
        for ddof, eps in [(0, 0.0), (1, 0.5), (3, 0.0)]:
            samples = random_batch(rng, ndim, int(rng.integers(1, 9)))
            rows = ns.stats_rows(np.array([s.shape for s in samples]), axes)
            mean, std = model(rows, [s.ravel() for s in samples], True, ddof, eps)
            want_mean, want_std = reference(samples, axes, ddof, eps)
            _assert_tables(mean, want_mean)
            _assert_tables(std, want_std)
            worst = max(worst, float(np.max(np.abs(mean - want_mean) / np.maximum(np.abs(want_mean), 1e-300),
                                            initial=0)))
    assert worst < RTOL


# --- (b) the .cu file built for the host ---------------------------------------------------------

FAKE_FP16 = r"""
#pragma once
#include <cmath>
struct __half { unsigned short bits; };
static inline float __half2float(__half h) {  // IEEE binary16 bits to float, exactly
  unsigned s = h.bits >> 15, e = (h.bits >> 10) & 31, m = h.bits & 1023;
  float v = e == 0 ? std::ldexp((float)m, -24)
                   : e == 31 ? (m ? NAN : INFINITY) : std::ldexp((float)(m | 1024), (int)e - 25);
  return s ? -v : v;
}
"""

HOST_SHIM = host_cuda.prelude() + r"""
using std::sqrt;
static inline double __dadd_rn(double a, double b) { return a + b; }
static inline double __dsub_rn(double a, double b) { return a - b; }
static inline double __dmul_rn(double a, double b) { return a * b; }
#include "ragged_stats.cu"

#define RUN(suffix)                                                                                \
  extern "C" void run_##suffix(const long long *rows, double *mean, double *stddev, int need_std,   \
                               long long ddof, double eps, unsigned gx, unsigned gy, unsigned threads) { \
    launch(gx, gy, threads, [&] { ragged_stats_##suffix(rows, mean, stddev, need_std, ddof, eps); }); \
  }
RUN(u8) RUN(i8) RUN(u16) RUN(i16) RUN(i32) RUN(f16) RUN(f32) RUN(f64)
"""


@pytest.fixture(scope="module")
def host_lib(tmp_path_factory):
    lib = host_cuda.build(tmp_path_factory.mktemp("ragged_stats"), HOST_SHIM, "raggedstats",
                          {"cuda_fp16.h": FAKE_FP16})
    if lib is None:
        pytest.skip("no g++ to compile the kernel for the host")
    return lib


def _addr(a) -> int:
    return np.asarray(a).__array_interface__["data"][0]


def host_launch(lib, suffix: str, args) -> None:
    """One launch of ``ragged_stats_<suffix>`` with the arguments ``ragged_stats`` passes (rows,
    mean, std, need_std, ddof, eps), the grid and block it asks for."""
    rows, mean, std, need_std, ddof, eps = args
    rows = np.ascontiguousarray(np.asarray(rows, np.int64))
    gx = int(rows[:, 2].max(initial=0))
    if gx == 0:
        return
    getattr(lib, f"run_{suffix}")(
        ctypes.c_void_p(_addr(rows)), ctypes.c_void_p(_addr(mean)), ctypes.c_void_p(_addr(std)),
        ctypes.c_int(int(need_std)), ctypes.c_longlong(int(ddof)), ctypes.c_double(float(eps)),
        ctypes.c_uint(gx), ctypes.c_uint(len(rows)), ctypes.c_uint(ns.block_size(rows)))


def run_host_kernel(lib, samples, axes, need_std: bool, ddof: int, eps: float):
    """``ragged_stats`` on host arrays (NumPy as ``xp``, no upload), the kernel built for the host."""
    samples = [np.ascontiguousarray(s) for s in samples]
    suffix = {np.dtype(t): s for s, t in TYPES.items()}[samples[0].dtype]
    rows = ns.stats_rows(np.array([s.shape for s in samples]), axes)
    ptrs = np.array([_addr(s) for s in samples], np.int64)
    saved = {}

    class Launcher:  # stands in for cuda.load_kernel's function
        def __call__(self, grid, block, args):
            saved["grid"], saved["block"] = grid, block
            host_launch(lib, suffix, args)

    from stoker.backend import cuda

    real = cuda.load_kernel
    cuda.load_kernel = lambda source, name, *a: Launcher()
    try:
        mean, std = ns.ragged_stats(np, lambda t: t, ptrs, rows, suffix, need_std, ddof, eps)
    finally:
        cuda.load_kernel = real
    if saved:
        assert saved["grid"] == (int(rows[:, 2].max()), len(samples), 1)
    return mean[0], None if std is None else std[0]


@pytest.mark.parametrize("suffix", sorted(TYPES))
def test_host_built_kernel_matches_per_sample_numpy(host_lib, suffix):
    rng = np.random.default_rng(len(suffix) * 31 + ord(suffix[0]))
    dtype = TYPES[suffix]
    for ndim in (1, 2, 3):
        for axes in all_axes_subsets(ndim):
            samples = random_batch(rng, ndim, int(rng.integers(1, 5)), dtype)
            for need_std, ddof, eps in [(True, 0, 0.0), (True, 1, 0.25), (False, 0, 0.0)]:
                mean, std = run_host_kernel(host_lib, samples, axes, need_std, ddof, eps)
                want_mean, want_std = reference(samples, axes, ddof, eps)
                _assert_tables(mean, want_mean)
                if need_std:
                    _assert_tables(std, want_std)
                else:
                    assert std is None


def test_host_built_kernel_long_reductions_and_the_audio_shape(host_lib):
    """Reductions longer than a block (the grid-stride loop, a 256-thread tree), shorter than a
    warp, empty (R = 0: mean 0, std sqrt(eps)), ddof past the count, and (64, T_i) over time."""
    rng = np.random.default_rng(7)
    mel = [rng.normal(-40, 12, (64, t)).astype(np.float32) for t in (1, 3, 700, 1999)]
    for axes in ([1], [0, 1], [0]):
        mean, std = run_host_kernel(host_lib, mel, axes, True, 0, 1e-6)
        want_mean, want_std = reference(mel, axes, 0, 1e-6)
        _assert_tables(mean, want_mean)
        _assert_tables(std, want_std)
    odd = [np.zeros((3, 0), np.float32), rng.normal(0, 1, (2, 5)).astype(np.float32),
           np.zeros((0, 4), np.float32), rng.normal(0, 1, (1, 1)).astype(np.float32)]
    for ddof in (0, 1, 5):
        mean, std = run_host_kernel(host_lib, odd, [1], True, ddof, 0.5)
        want_mean, want_std = reference(odd, [1], ddof, 0.5)
        _assert_tables(mean, want_mean)
        _assert_tables(std, want_std)


def test_host_built_kernel_equals_the_model(host_lib):
    """The kernel and its transcription read the same elements: equal up to summation order."""
    rng = np.random.default_rng(11)
    for ndim in (2, 3, 4):
        for axes in all_axes_subsets(ndim):
            samples = random_batch(rng, ndim, 3, np.float64)
            rows = ns.stats_rows(np.array([s.shape for s in samples]), axes)
            want = model(rows, [s.ravel() for s in samples], True, 1, 0.0)
            got = run_host_kernel(host_lib, samples, axes, True, 1, 0.0)
            _assert_tables(got[0], want[0])
            _assert_tables(got[1], want[1])


# --- (c) gpu_normalize on the null device ----------------------------------------------------------

def _op(**kw):
    cls = get_operator("normalize")
    static, _ = cls.schema.bind(kw, lambda v: False)
    return cls(static, "gpu")


def _from_pointer(ptr: int, count: int, dtype) -> np.ndarray:
    dtype = np.dtype(dtype)
    if count == 0:
        return np.zeros(0, dtype)
    return np.frombuffer((ctypes.c_char * (count * dtype.itemsize)).from_address(ptr), dtype).copy()


def _model_emulator(dtype):
    """``ragged_stats_<suffix>`` on the null device through :func:`model` (sample data read at
    the rows' pointers, as the kernel does)."""

    def emulate(args):
        rows, mean, std, need_std, ddof, eps = args
        rows = np.asarray(rows, np.int64)
        flat = [_from_pointer(int(r[0]), int(r[2] * r[3]), dtype) for r in rows]
        m, s = model(rows, flat, bool(need_std), int(ddof), float(eps))
        np.asarray(mean)[...] = m
        if need_std:
            np.asarray(std)[...] = s

    return emulate


@pytest.fixture
def device(monkeypatch):
    """The null device, normalize's uploads recorded, build_tables' results recorded, and the stats
    kernel emulated (by the model unless a test swaps in the host build)."""
    uploads, built = [], []

    def record(table, batch):
        uploads.append(np.array(table))
        return table

    real = gn.build_tables

    def build_tables(*args, **kwargs):
        out = real(*args, **kwargs)
        built.append(out)
        return out

    with null_device.installed():
        monkeypatch.setattr(gn, "upload_table", record)
        monkeypatch.setattr(gn, "upload_tables", lambda batch, *ts: [record(t, batch) for t in ts])
        monkeypatch.setattr(gn, "build_tables", build_tables)
        for s, t in TYPES.items():
            monkeypatch.setitem(null_device.EMULATED, f"ragged_stats_{s}", _model_emulator(t))
        yield uploads, built


def _run(op, images, layout):
    x, batch = null_device.device_batch(images, layout)
    return op.run_gpu(batch, [x], {})


def _want_tables(op, images, axes):
    """The per-sample path's tables (``build_tables`` without ``batch_stats``: compute_stats on
    each sample, NumPy for CuPy)."""
    shapes = np.array([s.shape for s in images])
    keeps = shapes.copy()
    keeps[:, axes] = 1
    counts = np.prod(shapes[:, axes], axis=1).tolist()
    return REAL_BUILD_TABLES(np, lambda t: t, op, (None, None), keeps, images, tuple(axes), counts, None)


REAL_BUILD_TABLES = gn.build_tables

CASES = [(dict(axes=[1]), "ft", (64, None)), (dict(), "ft", (64, None)),
         (dict(axes=[1], ddof=1, epsilon=0.5), "ft", (64, None)),
         (dict(axis_names="HW", scale=2.0), "HWC", (None, None, 3)), (dict(), "HWC", (None, None, 3)),
         (dict(axis_names="C"), "HWC", (None, None, 3)), (dict(axis_names="W", ddof=1), "HWC", (None, None, 3))]


def _images(rng, n, template, dtype=np.float32):
    shape_of = [lambda t=t: t if t is not None else int(rng.integers(1, 40)) for t in template]
    if np.dtype(dtype).kind == "f":
        return [rng.normal(-30, 10, tuple(f() for f in shape_of)).astype(dtype) for _ in range(n)]
    return [rng.integers(0, 256, tuple(f() for f in shape_of)).astype(dtype) for _ in range(n)]


@pytest.mark.parametrize("kw,layout,template", CASES, ids=[str(c[0]) + c[1] for c in CASES])
def test_gpu_normalize_tables_equal_the_per_sample_path(device, kw, layout, template):
    uploads, built = device
    rng = np.random.default_rng(3)
    images = _images(rng, 6, template)
    op = _op(**kw)
    before = dict(gpu_registry.FALLBACKS)
    null_device.LAUNCHES.clear()
    (out,) = _run(op, images, layout)
    assert out.shape() == [im.shape for im in images]
    assert dict(gpu_registry.FALLBACKS) == before
    names = [name for name, _, _ in null_device.LAUNCHES]
    assert names.count("ragged_stats_f32") == 1 and names[-1] == "normalize_f32_f32"
    assert len(uploads) == 2 and uploads[0].shape == (len(images), ns.ROW)  # stats rows, then the map's
    axes = gn.batch_params(op, np.array([s.shape for s in images]), layout, {})[0]
    (mean, _), (factor, _) = built[-1]
    (want_mean, _), (want_factor, _) = _want_tables(op, images, axes)
    _assert_tables(np.asarray(mean), np.asarray(want_mean))
    _assert_tables(np.asarray(factor), np.asarray(want_factor))


def test_gpu_normalize_given_stddev_computes_means_only(device):
    uploads, built = device
    rng = np.random.default_rng(4)
    images = _images(rng, 5, (64, None))
    op = _op(axes=[1], stddev=4.0)
    _run(op, images, "ft")
    (mean, _), (factor, _) = built[-1]
    _assert_tables(np.asarray(mean), np.concatenate([im.astype(np.float64).mean(axis=1) for im in images]))
    np.testing.assert_allclose(np.asarray(factor), 1 / 4.0)


def test_given_means_and_batch_keep_the_per_sample_path(device):
    """Deviations about given means, and batch=True, reduce sample by sample: no stats launch."""
    uploads, built = device
    rng = np.random.default_rng(5)
    images = _images(rng, 4, (None, None, 3))
    for kw in (dict(mean=10.0, axis_names="HW"), dict(batch=True, axis_names="HW")):
        null_device.LAUNCHES.clear()
        _run(_op(**kw), images, "HWC")
        assert not any(name.startswith("ragged_stats") for name, _, _ in null_device.LAUNCHES)


def test_every_input_type_through_the_host_built_kernel(device, host_lib, monkeypatch):
    uploads, built = device
    rng = np.random.default_rng(6)
    for s in TYPES:
        monkeypatch.setitem(null_device.EMULATED, f"ragged_stats_{s}",
                            lambda args, s=s: host_launch(host_lib, s, args))
    for t in TYPES.values():
        images = _images(rng, 4, (None, 5), t)
        op = _op(axes=[1], ddof=1, epsilon=0.01)
        _run(op, images, "ft")
        (mean, _), (factor, _) = built[-1]
        want_mean, want_std = reference(images, [1], 1, 0.01)
        _assert_tables(np.asarray(mean), want_mean)
        _assert_tables(np.asarray(factor), 1.0 / want_std)


def _count_calls(op, images, layout) -> int:
    x, batch = null_device.device_batch(images, layout)
    op.run_gpu(batch, [x], {})  # warm: kernels loaded, arenas made
    return null_device.python_calls(lambda: op.run_gpu(batch, [x], {}))


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # (the stats kernel skipped: tables of whatever memory held)
@pytest.mark.parametrize("kw,layout,template", CASES[:2] + CASES[3:5], ids=["time", "all", "HW", "HWC-all"])
def test_host_calls_do_not_grow_with_the_batch(device, monkeypatch, kw, layout, template):
    """The statistics of a ragged batch cost the same host work at 4 and 64 samples (before:
    about eight CuPy calls a sample), one stats upload, one launch, no fallback."""
    uploads, built = device
    for s in TYPES:  # the emulator's own Python (the model, sample by sample) is no host cost
        monkeypatch.delitem(null_device.EMULATED, f"ragged_stats_{s}")
    rng = np.random.default_rng(8)
    op = _op(**kw)
    before = dict(gpu_registry.FALLBACKS)
    counts = {}
    for n in (4, 64):
        counts[n] = _count_calls(op, _images(rng, n, template), layout)
    assert counts[64] - counts[4] <= 4, counts
    assert dict(gpu_registry.FALLBACKS) == before
    null_device.LAUNCHES.clear()
    uploads.clear()
    _run(op, _images(rng, 64, template), layout)
    assert [name for name, _, _ in null_device.LAUNCHES].count("ragged_stats_f32") == 1
    assert sum(u.shape == (64, ns.ROW) for u in uploads) == 1
