"""GPU gaussian_blur (stoker/operators/filters/gpu_gaussian_blur.py) against the CPU operator:
per-sample sigmas and windows, uint8 and float32 in, the input's type or FLOAT out; uint8 within
one level (summation order moves rounding ties), float within float32 rounding."""

import numpy as np
import pytest
from gpu_pipelines import run_pipeline

import stoker.fn as fn
import stoker.types as types
from stoker.operators import gpu_registry

pytestmark = pytest.mark.gpu


def _run(images, build, gpu, layout="HWC"):
    return run_pipeline(build, [images], gpu, layout)[0][0]


@pytest.mark.parametrize("in_type,dtype", [("u8", None), ("u8", types.FLOAT), ("f32", None)])
@pytest.mark.parametrize("gray", [False, True])
def test_gpu_gaussian_blur_matches_cpu(in_type, dtype, gray, make_images, rng):
    images = make_images(5, 12, 60)
    if gray:
        images = [im[..., 0].copy() for im in images]
    if in_type == "f32":
        images = [im.astype(np.float32) / 255.0 for im in images]
    sigmas = [np.array(s, np.float32) for s in rng.uniform(0.5, 4.0, (len(images), 2))]
    kw = {} if dtype is None else {"dtype": dtype}

    def build(x):
        return fn.gaussian_blur(x, sigma=fn.external_source(source=[sigmas], cycle=True), **kw)

    layout = "HW" if gray else "HWC"
    before = gpu_registry.FALLBACKS["gaussian_blur"]
    got = _run(images, build, True, layout)
    assert gpu_registry.FALLBACKS["gaussian_blur"] == before, "the host fallback ran instead"
    want = _run(images, build, False, layout)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        if g.dtype == np.uint8:
            assert np.abs(g.astype(int) - w.astype(int)).max() <= 1
        else:
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=5e-3 if in_type == "u8" else 1e-5)


def test_gpu_gaussian_blur_with_a_window_only(make_images):
    images = make_images(4, 20, 40)

    def build(x):
        return fn.gaussian_blur(x, window_size=7)

    got, want = _run(images, build, True), _run(images, build, False)
    for g, w in zip(got, want):
        assert np.abs(g.astype(int) - w.astype(int)).max() <= 1
