"""GPU noise.gaussian and noise.salt_and_pepper (stoker/operators/filters/gpu_noise.py) against the
CPU operators with the same pipeline seed: the same random values on both devices (noise.shot:
kernels/shot_noise.cu against element_poisson).

Tolerances: salt_and_pepper and shot are exact (shot: IEEE steps only, its own exp/log, no fused
multiply-adds); salt_and_pepper is exact (integer words and thresholds). gaussian is exact except where
float64 log/cos/sin of CUDA and of NumPy round differently (an ulp) and that crosses a float32
rounding boundary: practically never, so a tiny fraction of elements (``TINY``) may differ, by one
level (1 for integers, 1e-6 relative for floats).
"""

import numpy as np
import pytest
from gpu_pipelines import load_gpu_module, run_pipeline

import stoker.fn as fn
from stoker.errors import OperatorError
from stoker.operators import gpu_registry

pytestmark = pytest.mark.gpu

TINY = 1e-4


@pytest.fixture(autouse=True, scope="module")
def _pending():
    load_gpu_module("stoker.operators.filters.gpu_noise")


def _const(values, dtype=np.float32):
    """A per-sample argument input: one array per sample."""
    return fn.external_source(source=[[np.asarray(v, dtype) for v in values]], cycle=True)


def _both(name, build, batch, layout="HWC", kernel=True, iterations=1):
    """(GPU, CPU) samples of every iteration of ``build`` over ``batch``; asserts that operator
    ``name``'s kernel ran (with ``kernel=False``: that its host fallback did)."""
    before = gpu_registry.FALLBACKS[name]
    got = run_pipeline(build, [batch], True, layout, iterations)
    if kernel:
        assert gpu_registry.FALLBACKS[name] == before, "the host fallback ran instead of the kernel"
    else:
        assert gpu_registry.FALLBACKS[name] > before, "expected the host fallback"
    want = run_pipeline(build, [batch], False, layout, iterations)
    for (g, g_layout), (w, w_layout) in zip(got, want):
        assert g_layout == w_layout and len(g) == len(w)
        for a, b in zip(g, w):
            assert a.shape == b.shape and a.dtype == b.dtype
    return [g for g, _ in got], [w for w, _ in want]


def _assert_same(got, want, level=None):
    """Equal samples; with ``level``, a tiny fraction of elements may differ, by at most ``level``
    (one integer level or a relative float tolerance)."""
    differ = total = 0
    for g, w in zip(got, want):
        d = g != w
        if g.dtype.kind == "f":
            d &= ~(np.isnan(g) & np.isnan(w))
        differ += int(d.sum())
        total += g.size
        if d.any():
            assert level is not None, f"{int(d.sum())} of {g.size} elements differ"
            gd, wd = g[d].astype(np.float64), w[d].astype(np.float64)
            bound = level if g.dtype.kind in "iu" else level * np.maximum(np.abs(wd), 1e-30)
            assert np.all(np.abs(gd - wd) <= bound)
    assert differ <= TINY * max(total, 1), f"{differ} of {total} elements differ"


def _images(make_images, dtype, n=5):
    images = make_images(n, 15, 70)
    images.append(np.zeros((0, 9, 3), np.uint8))  # an empty sample
    if dtype == np.float32:
        return [im.astype(np.float32) / 255 for im in images]
    return [im.astype(dtype) for im in images]


@pytest.mark.parametrize("dtype", [np.uint8, np.float32], ids=["u8", "f32"])
def test_gaussian_matches_cpu(dtype, make_images):
    std = 12.0 if dtype == np.uint8 else 0.05
    got, want = _both("noise.gaussian", lambda x: fn.noise.gaussian(x, stddev=std, mean=std / 4),
                      _images(make_images, dtype), iterations=2)
    for g, w in zip(got, want):
        _assert_same(g, w, level=1 if dtype == np.uint8 else 1e-6)
    assert not np.array_equal(got[0][0], got[1][0])  # a new draw every iteration
    assert any(im.size % 4 for im in want[0])  # (a sample that ends inside a thread's block of four)


@pytest.mark.parametrize("dtype", [np.uint8, np.float32], ids=["u8", "f32"])
@pytest.mark.parametrize("kwargs", [dict(prob=0.3), dict(prob=0.3, per_channel=True, salt_vs_pepper=0.2),
                                    dict(prob=1.0, salt_val=7.0, pepper_val=2.0), dict(prob=0.0)],
                         ids=["pixels", "per_channel", "all_custom_values", "none"])
def test_salt_and_pepper_matches_cpu(dtype, kwargs, make_images):
    got, want = _both("noise.salt_and_pepper", lambda x: fn.noise.salt_and_pepper(x, **kwargs),
                      _images(make_images, dtype))
    _assert_same(got[0], want[0])


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.uint16, np.int16, np.float32, np.float64])
@pytest.mark.parametrize("n", [1, 4, 9])
def test_shot_matches_cpu(dtype, n, make_images):
    """Factors per sample over both regimes (search below lambda 16, PTRS above) and 0 (a copy)."""
    images = make_images(n, 15, 70)
    if dtype in (np.float32, np.float64):
        batch = [(im.astype(dtype) / 255) * 300 for im in images]  # lambdas up to 300 / factor
    elif dtype in (np.uint16, np.int16):
        batch = [(im.astype(np.int32) * 120 - 9000).astype(dtype) for im in images]
    else:
        batch = [(im.astype(np.int16) - (128 if dtype == np.int8 else 0)).astype(dtype) for im in images]
    factors = [20.0, 1.0, 0.0, 12.75, 0.3, 255.0, 3.0, 50.0, 7.0][:n]
    got, want = _both("noise.shot", lambda x: fn.noise.shot(x, factor=_const(factors)), batch, iterations=2)
    for g, w in zip(got, want):
        _assert_same(g, w)
    assert not all(np.array_equal(a, b) for a, b in zip(got[0], got[1])) or factors == [0.0]


def test_shot_large_lambdas_and_empty_samples(make_images):
    batch = [np.full((7, 9, 3), v, np.float32) for v in (1e6, 1e12, 1e17, 0.0, 5.0)]
    batch.append(np.zeros((0, 9, 3), np.float32))
    got, want = _both("noise.shot", lambda x: fn.noise.shot(x, factor=1.0), batch)
    _assert_same(got[0], want[0])


def test_other_layouts(make_images):
    """CHW, HW and FHWC samples: salt_and_pepper shares a draw along the layout's channel axis."""
    images = make_images(4, 15, 50)
    chw = [np.ascontiguousarray(im.transpose(2, 0, 1)) for im in images]
    got, want = _both("noise.salt_and_pepper", lambda x: fn.noise.salt_and_pepper(x, prob=0.5), chw, "CHW")
    _assert_same(got[0], want[0])
    hw = [im[..., 0].copy() for im in images]
    got, want = _both("noise.salt_and_pepper", lambda x: fn.noise.salt_and_pepper(x, prob=0.5), hw, "HW")
    _assert_same(got[0], want[0])
    clips = [np.stack(make_images(3, 20, 21)) for _ in range(3)]
    got, want = _both("noise.salt_and_pepper", lambda x: fn.noise.salt_and_pepper(x, prob=0.5), clips, "FHWC")
    _assert_same(got[0], want[0])
    got, want = _both("noise.gaussian", lambda x: fn.noise.gaussian(x, stddev=9.0), clips, "FHWC")
    _assert_same(got[0], want[0], level=1)


def test_other_types(make_images):
    images = make_images(3, 15, 40)
    for dtype in (np.int8, np.uint16, np.int16, np.float64):
        batch = [(im.astype(np.int16) - 100).astype(dtype) for im in images]
        got, want = _both("noise.gaussian", lambda x: fn.noise.gaussian(x, stddev=30.0), batch)
        _assert_same(got[0], want[0], level=1 if dtype != np.float64 else 1e-6)
        got, want = _both("noise.salt_and_pepper", lambda x: fn.noise.salt_and_pepper(x, prob=0.2), batch)
        _assert_same(got[0], want[0])


def test_per_sample_arguments(make_images):
    images = make_images(4, 20, 60)

    def gaussian(x):
        return fn.noise.gaussian(x, stddev=_const([0.0, 3.0, 20.0, 60.0]), mean=_const([5.0, 0.0, -4.0, 1.0]))

    got, want = _both("noise.gaussian", gaussian, images)
    _assert_same(got[0], want[0], level=1)
    np.testing.assert_array_equal(got[0][0], np.clip(images[0].astype(np.int16) + 5, 0, 255))  # stddev 0

    def salt_and_pepper(x):
        return fn.noise.salt_and_pepper(x, prob=_const([0.0, 0.1, 0.6, 1.0]), salt_vs_pepper=_const([0.5, 1, 0, 0.3]),
                                        salt_val=_const([1, 2, 3, 4]), pepper_val=_const([9, 8, 7, 6]))

    got, want = _both("noise.salt_and_pepper", salt_and_pepper, images)
    _assert_same(got[0], want[0])


def test_unsupported_type_takes_the_host_fallback(make_images):
    """int32 samples (whose rounding at the saturation limits the kernel does not reproduce) run
    on the host, with the CPU's values."""
    batch = [im.astype(np.int32) * 1000 for im in make_images(3)]
    for name, build in (("noise.gaussian", lambda x: fn.noise.gaussian(x, stddev=5.0)),
                        ("noise.salt_and_pepper", lambda x: fn.noise.salt_and_pepper(x, prob=0.3)),
                        ("noise.shot", lambda x: fn.noise.shot(x, factor=3.0))):
        got, want = _both(name, build, batch, kernel=False)
        _assert_same(got[0], want[0])


@pytest.mark.parametrize("name,build,arg", [
    ("gaussian", lambda x: fn.noise.gaussian(x, stddev=_const([1.0, -2.0, 1.0])), "stddev"),
    ("salt_and_pepper", lambda x: fn.noise.salt_and_pepper(x, prob=_const([0.1, 0.2, 1.5])), "prob"),
    ("salt_and_pepper", lambda x: fn.noise.salt_and_pepper(x, salt_vs_pepper=_const([[0.1, 0.2]] * 3)),
     "salt_vs_pepper"),
    ("shot", lambda x: fn.noise.shot(x, factor=_const([1.0, np.inf, 2.0])), "factor"),
])
def test_bad_argument_fails_as_on_the_cpu(name, build, arg, make_images):
    images = make_images(3)
    for gpu in (True, False):
        with pytest.raises(OperatorError, match=f"(?s)noise.{name}.*'{arg}'"):
            run_pipeline(build, [images], gpu)
