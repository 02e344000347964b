"""GPU ``cast`` and ``_arithmetic`` over a ragged batch's one buffer (issue 16) against the CPU:
``fn.cast(x, FLOAT) / 255``, integer casts, and per-sample scalars spread over the samples
(``x * fn.random.uniform()``), on batches of differently sized images."""

import numpy as np
import pytest
from gpu_pipelines import run_pipeline

import stoker.fn as fn
import stoker.types as types
from stoker.operators import gpu_registry
from stoker.operators.math import gpu_arithmetic

pytestmark = pytest.mark.gpu


def _compare(build, images, exact=True):
    before = gpu_registry.FALLBACKS["_arithmetic"] + gpu_registry.FALLBACKS["cast"]
    (got, _), = run_pipeline(build, [images], True)
    assert gpu_registry.FALLBACKS["_arithmetic"] + gpu_registry.FALLBACKS["cast"] == before
    (want, _), = run_pipeline(build, [images], False)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        if exact:
            np.testing.assert_array_equal(g, w)
        else:
            np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)


def test_cast_and_scale_of_a_ragged_batch(make_images):
    images = make_images(7)
    _compare(lambda x: fn.cast(x, dtype=types.FLOAT) / 255.0, images, exact=False)
    _compare(lambda x: fn.cast(fn.cast(x, dtype=types.FLOAT) * 1.7 - 100.0, dtype=types.INT16), images)
    _compare(lambda x: fn.cast(fn.cast(x, dtype=types.FLOAT) * 1.3, dtype=types.UINT8), images)


@pytest.mark.parametrize("shape", [None, (1,)], ids=["scalar", "one_value"])
def test_per_sample_scalars_spread_over_a_ragged_batch(make_images, monkeypatch, shape):
    images = make_images(9)
    calls = []
    real = gpu_arithmetic._sample_of_element
    monkeypatch.setattr(gpu_arithmetic, "_sample_of_element", lambda *a: calls.append(1) or real(*a))

    def build(x):
        s = fn.random.uniform(range=(0.5, 1.5), shape=shape, seed=5)
        s = s.gpu() if x.device == "gpu" else s
        return fn.cast(x, dtype=types.FLOAT) * s - s

    _compare(build, images, exact=False)
    assert calls, "the spread path did not run"
