"""GPU colour operators (stoker/operators/color/gpu_color.py) against their CPU twins: the same
per-sample arguments on batches of differently sized images, uint8 and float32 in and out.
The brightness/contrast kernels keep the CPU's float32 order of operations, so they must match
exactly; the matrix operators (hsv, hue, saturation, color_twist) may differ by one level where
the CPU's summation order moves a rounding tie."""

import numpy as np
import pytest
from gpu_pipelines import run_pipeline

import stoker.fn as fn
import stoker.types as types
from stoker.operators import gpu_registry

pytestmark = pytest.mark.gpu


N = 6
RANGES = {"hue": (-180.0, 180.0), "saturation": (0.0, 2.0), "value": (0.5, 1.5), "brightness": (0.5, 1.5),
          "contrast": (0.5, 1.5), "brightness_shift": (-0.1, 0.1), "contrast_center": (0.2, 200.0)}
OPS = {"hsv": ("hue", "saturation", "value"), "hue": ("hue",), "saturation": ("saturation",),
       "color_twist": ("brightness", "contrast", "hue", "saturation"),
       "brightness": ("brightness", "brightness_shift"), "contrast": ("contrast",),
       "brightness_contrast": ("brightness", "brightness_shift", "contrast", "contrast_center")}
EXACT = {"brightness", "contrast", "brightness_contrast"}


def _run(name, images, arg_values, device, dtype, layout="HWC"):
    def build(x):
        args = {k: fn.external_source(source=[[np.float32(v) for v in vals]], cycle=True)
                for k, vals in arg_values.items()}
        kw = {} if dtype is None else {"dtype": dtype}
        return getattr(fn, name)(x, device=device, **kw, **args)

    return run_pipeline(build, [images], device == "gpu", layout)[0][0]


@pytest.mark.parametrize("name", sorted(OPS))
@pytest.mark.parametrize("in_type,dtype", [("u8", None), ("u8", types.FLOAT), ("f32", None), ("f32", types.UINT8)])
def test_gpu_colour_operator_matches_cpu(name, in_type, dtype, rng, make_images):
    images = make_images(N)
    if in_type == "f32":
        images = [(im.astype(np.float32) / 255.0) for im in images]
    arg_values = {k: rng.uniform(*RANGES[k], N) for k in OPS[name]}
    if in_type == "f32" and "contrast_center" in arg_values:
        arg_values["contrast_center"] /= 255.0
    before = gpu_registry.FALLBACKS[name]
    got = _run(name, images, arg_values, "gpu", dtype)
    assert gpu_registry.FALLBACKS[name] == before, "the GPU kernel did not run"
    want = _run(name, images, arg_values, "cpu", dtype)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        if name in EXACT:
            np.testing.assert_array_equal(g, w)
        elif g.dtype == np.uint8:
            diff = np.abs(g.astype(int) - w.astype(int))
            assert diff.max() <= 1 and diff.mean() < 0.01
        else:
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-4)


def test_sequences_take_the_host_fallback_with_the_same_result(rng, make_images):
    """FHWC input (arguments may be per frame there): the operator runs through the host
    fallback, counted, and still equals the CPU operator."""
    clips = [np.stack(make_images(3, 30, 31)) for _ in range(2)]  # (F, H, W, C), one size per clip
    arg_values = {"hue": rng.uniform(-90, 90, 2), "saturation": rng.uniform(0.5, 1.5, 2)}
    before = gpu_registry.FALLBACKS["hsv"]
    got = _run("hsv", clips, arg_values, "gpu", None, layout="FHWC")
    assert gpu_registry.FALLBACKS["hsv"] > before
    want = _run("hsv", clips, arg_values, "cpu", None, layout="FHWC")
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
