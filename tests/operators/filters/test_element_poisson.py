"""noise.shot's sampler (stoker/operators/filters/element_poisson.py): its distribution against
Poisson's and NumPy's, its own exp/log, the constants it shares with kernels/shot_noise.cu, the
8-bit table path against the plain search, and noise.shot's values across thread counts and with
the GPU path on the null device (the table it uploads, one launch per batch)."""

import os
import re
import sys

import numpy as np
import pytest
from oracle import run_op

from stoker.operators.filters import element_poisson as ep

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
import null_device  # noqa: E402

KEY = np.array([0x1234_5678_9ABC, 0x0FED_CBA9_8765], np.uint64)
N = 400_000


@pytest.mark.parametrize("lam", [0.1, 1.0, 5.0, 12.75, 16.0, 50.0, 255.0])
def test_distribution_matches_poisson_and_numpy(lam):
    """Mean and variance within 0.5% (2%: lambda 0.1) of lambda, and a chi-square test of the
    histogram against NumPy's poisson over the same number of draws (p > 0.001)."""
    counts = ep.poisson(KEY + np.uint64(int(lam * 100)), np.full(N, lam))
    assert np.all(counts == np.floor(counts)) and counts.min() >= 0
    tol = 0.02 if lam < 1 else 0.005
    assert abs(counts.mean() / lam - 1) < tol and abs(counts.var() / lam - 1) < 2 * tol
    ref = np.random.default_rng(int(lam * 100)).poisson(lam, N)
    size = int(max(counts.max(), ref.max())) + 1
    a, b = np.bincount(counts.astype(np.int64), minlength=size), np.bincount(ref, minlength=size)
    keep = a + b >= 20  # the tails pooled
    table = np.stack([np.append(a[keep], a[~keep].sum()), np.append(b[keep], b[~keep].sum())])
    table = table[:, table.sum(0) > 0]
    assert _chi2_statistic(table) < _chi2_critical(table.shape[1] - 1)


def _chi2_statistic(table: np.ndarray) -> float:
    """Pearson's chi-square of a 2 x k contingency table (SciPy's chi2_contingency without its
    continuity correction, which it applies only to 2 x 2)."""
    expected = table.sum(1, keepdims=True) * table.sum(0, keepdims=True) / table.sum()
    return float(((table - expected) ** 2 / expected).sum())


def _chi2_critical(df: int, z: float = 3.090232) -> float:
    """The chi-square value exceeded with probability 0.001 (z: the normal's 0.999 quantile), by
    Wilson and Hilferty's cube-root approximation (SciPy is not a test dependency)."""
    return df * (1 - 2 / (9 * df) + z * (2 / (9 * df)) ** 0.5) ** 3


def test_large_lambdas_and_edges():
    counts = ep.poisson(KEY, np.full(100_000, 1e6))
    assert abs(counts.mean() / 1e6 - 1) < 1e-4 and abs(counts.var() / 1e6 - 1) < 0.02
    edge = ep.poisson(KEY, np.array([0.0, 2.0 ** 52, np.inf, np.nan, 15.999, 16.0]))
    assert edge[0] == 0 and edge[1] == 2.0 ** 52 and edge[2] == np.inf and np.isnan(edge[3])


def test_own_exp_and_log_are_accurate():
    x = np.geomspace(1e-300, 1e300, 20001)
    # 5e-16: with NumPy 2.4.6's points, x = 1.318... gives 0.27631021115929594 here, 3.3e-16 from the
    # exact logarithm, where NumPy's log is 0.8e-16 from it: 2 ulps apart, 4.02e-16 relative.
    np.testing.assert_allclose(ep.log_(x), np.log(x), rtol=5e-16, atol=1e-300)
    y = np.linspace(-700, 700, 20001)
    np.testing.assert_allclose(ep.exp_(y), np.exp(y), rtol=5e-16)
    t = np.geomspace(1e-18, 1e3, 2001)
    np.testing.assert_allclose(ep.log1p_(t), np.log1p(t), rtol=5e-16)
    np.testing.assert_allclose(ep.log1p_(-t[t < 0.9]), np.log1p(-t[t < 0.9]), rtol=5e-16)


def _cu_array(src: str, name: str) -> tuple:
    body = re.search(rf"{name}\[\d+\] = \{{([^}}]*)\}}", src).group(1)
    return tuple(float(v) for v in body.replace("\n", " ").split(","))


def test_kernel_constants_are_the_modules():
    with open(os.path.join(os.path.dirname(ep.__file__), "..", "..", "kernels", "shot_noise.cu")) as f:
        src = f.read()
    for name in ("EXP_C", "LOG_C", "LOGFACT", "STIRLING_C"):
        assert _cu_array(src, name) == getattr(ep, name), name
    for name in ("SEARCH_BELOW", "PTRS_BELOW", "SEARCH_MAX", "ROUNDS", "LN2_HI", "LN2_LO", "INV_LN2",
                 "SQRT_HALF", "TWO_PI"):
        assert float(re.search(rf"#define {name} (\S+)", src).group(1)) == getattr(ep, name), name


@pytest.mark.parametrize("factor", [20.0, 3.0, 0.7, -5.0])
def test_table_search_equals_the_plain_search(factor):
    rng = np.random.default_rng(int(abs(factor) * 10))
    for dtype in (np.uint8, np.int8):
        lo = np.iinfo(dtype).min
        x = rng.integers(lo, lo + 256, 50_000).astype(dtype)
        table = np.maximum(np.arange(lo, lo + 256).astype(np.float64) / factor, 0.0)
        lam = np.maximum(x.astype(np.float64) / factor, 0.0)
        coded = ep.poisson(KEY, lam, (table, x.astype(np.intp) - lo))
        np.testing.assert_array_equal(coded, ep.poisson(KEY, lam))


def test_element_j_depends_on_its_own_words_only():
    lam = np.random.default_rng(3).uniform(0, 300, 5000)
    whole = ep.poisson(KEY, lam)
    for j in (0, 1, 2, 777, 4999):
        one = np.full(j + 1, 0.0)
        one[j] = lam[j]
        assert ep.poisson(KEY, one)[j] == whole[j]


def _pipeline_out(threads: int, images, factors):
    import stoker.fn as fn
    from stoker import pipeline_def

    @pipeline_def(batch_size=len(images), num_threads=threads, device_id=None, seed=11)
    def pipe():
        x = fn.external_source(source=[images], cycle=True, layout="HWC")
        return fn.noise.shot(x, factor=fn.external_source(source=[factors], cycle=True))

    p = pipe()
    p.build()
    try:
        return [np.array(t) for t in p.run()[0]]
    finally:
        p.close()


def test_same_values_with_1_and_4_threads():
    rng = np.random.default_rng(5)
    images = [rng.integers(0, 256, (30 + i, 40, 3), np.uint8) for i in range(8)]
    factors = [np.float32(f) for f in (20, 1, 0.5, 7, 0, 12.75, 3, 100)]
    one, four = _pipeline_out(1, images, factors), _pipeline_out(4, images, factors)
    for a, b in zip(one, four):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(one[4], images[4])  # factor 0: a copy


def test_non_finite_factor_is_refused():
    from stoker.errors import PipelineBuildError

    with pytest.raises(PipelineBuildError, match="noise.shot.*'factor'"):
        run_op("stoker", "noise.shot", [np.zeros((4, 4, 3), np.uint8)], factor=float("inf"))


def test_gpu_path_uploads_the_table_and_launches_once(monkeypatch):
    """On the null device: one noise_shot_u8 launch for the batch, no host fallback; the uploaded
    table holds each sample's element count, key (what the CPU's sample_key gives) and factor."""
    import stoker.fn as fn
    from stoker import pipeline_def
    from stoker.operators import gpu_registry
    from stoker.operators.filters import gpu_noise

    tables = []
    real = gpu_noise.upload_table
    monkeypatch.setattr(gpu_noise, "upload_table", lambda t, batch: tables.append(np.array(t)) or real(t, batch))
    rng = np.random.default_rng(0)
    images = [rng.integers(0, 256, (10 + i, 12, 3), np.uint8) for i in range(5)]
    factors = [np.float32(f) for f in (20, 1, 0, 3.5, 255)]

    @pipeline_def(batch_size=5, num_threads=1, device_id=0, seed=3, exec_async=False, exec_pipelined=False,
                  prefetch_queue_depth=1)
    def pipe():
        x = fn.external_source(source=[images], cycle=True, layout="HWC").gpu()
        return fn.noise.shot(x, factor=fn.external_source(source=[factors], cycle=True))

    with null_device.installed():
        before = gpu_registry.FALLBACKS["noise.shot"]
        null_device.LAUNCHES.clear()
        p = pipe()
        p.build()
        try:
            p.run()
        finally:
            p.close()
        assert [k for k, _, _ in null_device.LAUNCHES] == ["noise_shot_u8"]
        assert gpu_registry.FALLBACKS["noise.shot"] == before
    itab, ftab = tables[-2:]
    assert itab.shape == (5, 8) and ftab.shape == (5, 4)
    np.testing.assert_array_equal(itab[:, 2], [im.size for im in images])
    np.testing.assert_array_equal(ftab[:, 0], np.array(factors, np.float64))
    assert len({tuple(k) for k in itab[:, 3:5].tolist()}) == 5  # a key per sample
