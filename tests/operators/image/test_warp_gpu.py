"""GPU warp_affine and rotate (stoker/operators/image/gpu_warp.py) against the CPU operators:
the same output sizes; nearest-neighbour pixels equal; bilinear within a few levels (OpenCV
quantizes source positions to 1/32 pixel, the kernel does not)."""

import numpy as np
import pytest
from gpu_pipelines import run_pipeline

import stoker.fn as fn
import stoker.types as types
from stoker.operators import gpu_registry

pytestmark = pytest.mark.gpu


def _run(images, build, gpu):
    return run_pipeline(build, [images], gpu)[0][0]


def _compare(name, images, build, nearest):
    before = gpu_registry.FALLBACKS[name]
    got = _run(images, build, True)
    assert gpu_registry.FALLBACKS[name] == before, "the host fallback ran instead"
    want = _run(images, build, False)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        if nearest:
            np.testing.assert_array_equal(g, w)
        elif g.dtype == np.uint8:
            diff = np.abs(g.astype(int) - w.astype(int))
            assert diff.max() <= 3 and diff.mean() < 0.3
        else:
            np.testing.assert_allclose(g, w, atol=0.03)


@pytest.mark.parametrize("interp", [types.INTERP_LINEAR, types.INTERP_NN])
@pytest.mark.parametrize("fill", [None, 0.0])
@pytest.mark.parametrize("in_type", ["u8", "f32"])
def test_gpu_rotate_matches_cpu(interp, fill, in_type, make_images, rng):
    images = make_images(5, 30, 70)
    if in_type == "f32":
        images = [im.astype(np.float32) / 255.0 for im in images]
    angles = [np.float32(a) for a in rng.uniform(-180, 180, len(images))]

    def build(x):
        angle = fn.external_source(source=[angles], cycle=True)
        return fn.rotate(x, angle=angle, interp_type=interp, fill_value=fill)

    _compare("rotate", images, build, interp == types.INTERP_NN)


@pytest.mark.parametrize("interp", [types.INTERP_LINEAR, types.INTERP_NN])
@pytest.mark.parametrize("inverse_map", [True, False])
def test_gpu_warp_affine_matches_cpu(interp, inverse_map, make_images):
    images = make_images(5, 30, 70)

    def build(x):
        return fn.warp_affine(x, matrix=[0.9, 0.2, 3.0, -0.1, 1.1, -2.0], size=(40, 50), fill_value=7,
                              inverse_map=inverse_map, interp_type=interp)

    _compare("warp_affine", images, build, interp == types.INTERP_NN)
