"""Operators with no GPU kernel yet take GPU batches through the host fallback (as DALI's GPU
operators take them, so a DALI pipeline ports): the result equals the CPU operator's exactly,
and the fallback is counted (and warned about once per operator)."""

import logging

import numpy as np
import pytest
from gpu_pipelines import run_pipeline

import stoker.fn as fn
import stoker.types as types
from stoker.operators import gpu_registry

pytestmark = pytest.mark.gpu

CASES = {
    "rotate": lambda x: fn.rotate(x, angle=30.0, fill_value=0),
    "warp_affine": lambda x: fn.warp_affine(x, matrix=[1.0, 0.1, 2.0, 0.0, 1.0, -3.0], fill_value=0),
    "gaussian_blur": lambda x: fn.gaussian_blur(x, sigma=1.5),
    "laplacian": lambda x: fn.laplacian(x, window_size=3),
    "normalize": lambda x: fn.normalize(x),
    "pad": lambda x: fn.pad(x, fill_value=7),
    "slice": lambda x: fn.slice(x, rel_start=(0.1, 0.2), rel_shape=(0.5, 0.5), axes=(0, 1)),
    "erase": lambda x: fn.erase(x, anchor=(2, 3), shape=(5, 6), axes=(0, 1), fill_value=9),
    "color_space_conversion": lambda x: fn.color_space_conversion(x, image_type=types.RGB,
                                                                  output_type=types.YCbCr),
    "jpeg_compression_distortion": lambda x: fn.jpeg_compression_distortion(x, quality=40),
    "water": lambda x: fn.water(x),
    "noise.gaussian": lambda x: fn.noise.gaussian(x, stddev=10.0, seed=7),
    "reductions.mean": lambda x: fn.reductions.mean(x, axes=(0, 1)),
    "hsv": lambda x: fn.hsv(x, hue=40.0, saturation=0.7),
}


def _run(build, images, gpu):
    return run_pipeline(build, [images], gpu)[0][0]


@pytest.mark.parametrize("name", sorted(CASES))
def test_gpu_batches_through_the_host_fallback_equal_the_cpu_operator(name, make_images, caplog, monkeypatch):
    images = make_images(5)
    gpu_registry.load_gpu_impls()
    # an operator whose kernel has landed since: its kernel is taken out, the fallback tested
    monkeypatch.delitem(gpu_registry._GPU_IMPLS, name, raising=False)
    before = gpu_registry.FALLBACKS[name]
    with caplog.at_level(logging.WARNING, logger="stoker"):
        got = _run(CASES[name], images, gpu=True)
    assert gpu_registry.FALLBACKS[name] > before
    assert before > 0 or any(name in r.getMessage() and "no GPU kernel" in r.getMessage()
                             for r in caplog.records)
    want = _run(CASES[name], images, gpu=False)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g, w)
