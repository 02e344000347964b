"""GPU random_resized_crop (stoker/operators/image/gpu_random_resized_crop.py) against the CPU
operator: the same seed gives the same windows, and the resampled pixels agree within one level
(the GPU resize kernel's tolerance against the CPU resampler)."""

import numpy as np
import pytest
from gpu_pipelines import run_pipeline

import stoker.fn as fn
from stoker.operators import gpu_registry

pytestmark = pytest.mark.gpu


def _run(images, gpu, iterations=2, **kw):
    # a second iteration draws new windows, on both devices alike
    results = run_pipeline(lambda x: fn.random_resized_crop(x, **kw), [images], gpu, iterations=iterations,
                           seed=11)
    return [samples for samples, _ in results]


@pytest.mark.parametrize("size", [(32, 48), (96, 96)])
def test_gpu_random_resized_crop_matches_cpu(size, make_images):
    images = make_images(6, 40, 120)
    before = gpu_registry.FALLBACKS["random_resized_crop"]
    got = _run(images, True, size=size)
    assert gpu_registry.FALLBACKS["random_resized_crop"] == before, "the host fallback ran instead"
    want = _run(images, False, size=size)
    for g_batch, w_batch in zip(got, want):
        for g, w in zip(g_batch, w_batch):
            assert g.shape == w.shape == (*size, 3) and g.dtype == w.dtype == np.uint8
            assert np.abs(g.astype(int) - w.astype(int)).max() <= 1


def test_other_filters_take_the_host_fallback(make_images):
    from stoker import types

    images = make_images(3, 40, 60)
    before = gpu_registry.FALLBACKS["random_resized_crop"]
    got = _run(images, True, iterations=1, size=(20, 20), interp_type=types.INTERP_NN)
    assert gpu_registry.FALLBACKS["random_resized_crop"] > before
    want = _run(images, False, iterations=1, size=(20, 20), interp_type=types.INTERP_NN)
    for g, w in zip(got[0], want[0]):
        np.testing.assert_array_equal(g, w)
