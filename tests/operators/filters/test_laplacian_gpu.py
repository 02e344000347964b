"""GPU laplacian (stoker/operators/filters/gpu_laplacian.py) against the CPU operator: per-sample
window sizes, smoothing sizes and scales, normalized kernels, uint8 / uint16 / int16 / float32 in,
the input's type or FLOAT out, images (HW, HWC, CHW), volumes (DHW, DHWC) and sequences (FHWC).

Tolerances: the integer inputs here, with integer scales, give sums that are exact in float32
(2-D windows up to 7, 3-D up to 5), so those results must equal the CPU's to the bit. Float inputs
and fractional scales are summed in another order than OpenCV's: within rtol 1e-5 and an absolute
1e-6 times the input's largest magnitude times the windows' total weight (the size of the sums
that cancel)."""

import numpy as np
import pytest
from gpu_pipelines import compare_exact, load_gpu_module, run_pipeline

import stoker.fn as fn
import stoker.types as types
from stoker.errors import OperatorError
from stoker.operators import gpu_registry
from stoker.operators.filters.laplacian import derivative_window, smoothing_window

pytestmark = pytest.mark.gpu

MODULE = "stoker.operators.filters.gpu_laplacian"


@pytest.fixture(autouse=True, scope="module")
def _gpu_laplacian():
    load_gpu_module(MODULE)


def _per_sample(values, dtype=np.int32):
    return fn.external_source(source=[[np.asarray(v, dtype) for v in values]], cycle=True)


def _both(build, samples, layout, kernel=True):
    before = gpu_registry.FALLBACKS["laplacian"]
    (got, _), = run_pipeline(build, [samples], True, layout)
    if kernel:
        assert gpu_registry.FALLBACKS["laplacian"] == before, "the host fallback ran instead of the kernel"
    else:
        assert gpu_registry.FALLBACKS["laplacian"] > before, "expected the host fallback"
    (want, _), = run_pipeline(build, [samples], False, layout)
    return got, want


def _weight(window: int, smoothing: int, axes: int) -> float:
    """Total absolute weight of the Laplacian's windows (all partials, the largest sizes)."""
    one = np.abs(derivative_window(window)).sum() * np.abs(smoothing_window(smoothing)).sum() ** (axes - 1)
    return float(one * axes)


def _assert_close(got, want, samples, weight):
    for g, w, x in zip(got, want, samples):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6 * max(1.0, float(np.abs(x).max())) * weight)


CASES = {
    "default": {},
    "window 5": dict(window_size=5),
    "per-axis windows and smoothing": dict(window_size=[7, 3], smoothing_size=[1, 5]),
    "normalized": dict(window_size=5, smoothing_size=3, normalized_kernel=True),
    "integer scales": dict(scale=[2.0, -1.0]),
    "float out": dict(window_size=3, dtype=types.FLOAT),
}


@pytest.mark.parametrize("layout", ["HWC", "HW"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_uint8_images_equal_the_cpu(case, layout, make_images):
    images = make_images(5, 12, 60)
    if layout == "HW":
        images = [im[..., 1].copy() for im in images]
    compare_exact(lambda x: fn.laplacian(x, **CASES[case]), images, "laplacian", layout)


def test_per_sample_windows_smoothing_and_integer_scales(make_images):
    """Every argument as an argument input: a different window per sample and per axis."""
    images = make_images(4, 10, 50)
    windows = [[3, 5], [7], [5, 3], [3]]
    smoothing = [[1], [3, 5], [5], [1, 3]]
    scales = [[1.0], [2.0, -3.0], [4.0], [1.0, 1.0]]

    def build(x):
        return fn.laplacian(x, window_size=_per_sample(windows), smoothing_size=_per_sample(smoothing),
                            scale=_per_sample(scales, np.float32))

    compare_exact(build, images, "laplacian")


@pytest.mark.parametrize("dtype", [None, types.FLOAT])
def test_float_images_and_fractional_scales(dtype, make_images, rng):
    images = [im.astype(np.float32) / 255.0 for im in make_images(5, 12, 60)]
    scales = [rng.uniform(0.1, 3.0, 2).astype(np.float32) for _ in images]
    kw = {} if dtype is None else {"dtype": dtype}

    def build(x):
        return fn.laplacian(x, window_size=5, scale=_per_sample(scales, np.float32), **kw)

    got, want = _both(build, images, "HWC")
    _assert_close(got, want, images, 3.0 * _weight(5, 5, 2))
    u8 = make_images(4, 12, 40)
    got, want = _both(lambda x: fn.laplacian(x, scale=_per_sample(scales[:4], np.float32), dtype=types.FLOAT), u8,
                      "HWC")
    _assert_close(got, want, u8, 3.0 * _weight(3, 3, 2))


@pytest.mark.parametrize("layout", ["CHW", "DHW", "DHWC", "FHWC"])
def test_other_layouts_and_types(layout, rng):
    """Planar images, volumes (three partials of three passes each) and sequences (frames are not
    filtered across), in uint8, uint16 and int16; windows up to 5 keep 3-D sums exact."""
    shapes = {"CHW": [(3, 17, 30), (3, 40, 9)], "DHW": [(6, 11, 13), (9, 5, 20)],
              "DHWC": [(5, 12, 10, 3), (7, 8, 9, 3)], "FHWC": [(3, 14, 15, 3), (2, 30, 11, 3)]}[layout]
    for dtype, hi in ((np.uint8, 256), (np.uint16, 4000), (np.int16, 2000)):
        lo = -hi if dtype == np.int16 else 0
        samples = [rng.integers(lo, hi, s).astype(dtype) for s in shapes]
        for kw in ({}, dict(window_size=5, smoothing_size=3), dict(window_size=3, dtype=types.FLOAT)):
            compare_exact(lambda x, kw=kw: fn.laplacian(x, **kw), samples, "laplacian", layout)


def test_types_the_kernel_does_not_take_run_on_the_host(rng):
    samples = [rng.integers(-1000, 1000, s).astype(np.int32) for s in [(10, 12, 3), (7, 20, 3)]]
    got, want = _both(lambda x: fn.laplacian(x, window_size=5), samples, "HWC", kernel=False)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_bad_window_fails_as_on_the_cpu(make_images):
    """An even per-sample window: the same error on both devices, naming the argument."""
    images = make_images(3, 12, 30)

    def build(x):
        return fn.laplacian(x, window_size=_per_sample([[3], [4], [5]]))

    errors = []
    for gpu in (True, False):
        with pytest.raises(OperatorError, match="window_size") as e:
            run_pipeline(build, [images], gpu)
        errors.append(str(e.value))
    assert errors[0] == errors[1]


def test_empty_sample_behaves_as_on_the_cpu(make_images):
    """An empty sample goes to the host: whatever the CPU operator does with it (today OpenCV
    refuses it), the GPU does too."""
    samples = [make_images(1, 12, 13)[0], np.zeros((0, 9, 3), np.uint8)]
    outcomes = []
    for gpu in (True, False):
        try:
            (out, _), = run_pipeline(lambda x: fn.laplacian(x), [samples], gpu)
            outcomes.append([o.shape for o in out])
        except OperatorError as e:
            outcomes.append(str(e))
    assert outcomes[0] == outcomes[1]
