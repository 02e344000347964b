"""GPU water, sphere and jitter (stoker/operators/image/gpu_distortions.py) against the CPU
operators: batches of differently sized images (and one of a single size), nearest and linear,
fill values inside and outside the type's range, ``mask`` as a per-sample argument input, other
types and channel counts, empty samples, jitter over several iterations and with large degrees,
the host fallback and bad arguments.

Tolerances: none. The kernel computes every source point in float32 in the CPU's order (the water
waves are the CPU's own values, uploaded; jitter's shifts are computed on the device from each
sample's Philox key, word for word as the CPU's ``jitter_offsets`` computes them), nearest
neighbour only moves values, and linear repeats OpenCV's float remap operation for operation (fused multiply-adds in its
order). That remap is OpenCV's since 4.11; an older OpenCV remaps with weights quantized to 1/32
pixel, and then (only then, detected by a probe) linear results are compared within 1/32 of the
image's value range plus one level.
"""

import cv2
import numpy as np
import pytest
from gpu_pipelines import load_gpu_module, run_pipeline

import stoker.fn as fn
import stoker.types as types
from stoker.errors import StokerError
from stoker.operators import gpu_registry

pytestmark = pytest.mark.gpu

MODULE = "stoker.operators.image.gpu_distortions"
NN, LINEAR = types.INTERP_NN, types.INTERP_LINEAR


@pytest.fixture(autouse=True, scope="module")
def _gpu_distortions():
    load_gpu_module(MODULE)


def _opencv_float_remap() -> bool:
    """Whether cv2.remap interpolates with exact float weights (OpenCV >= 4.11): at 0.01 pixel
    between 0 and 255 it gives 3 (2.55 rounded); with 1/32-pixel weights, 0."""
    img = np.array([[0, 255, 0, 0]] * 2, np.uint8)
    mx, my = np.full((1, 1), 0.01, np.float32), np.zeros((1, 1), np.float32)
    return int(cv2.remap(img, mx, my, cv2.INTER_LINEAR).ravel()[0]) == 3


EXACT_LINEAR = _opencv_float_remap()


def _mask(values):
    """``mask`` as an argument input: one int32 scalar per sample."""
    return fn.external_source(source=[[np.int32(v) for v in values]], cycle=True)


def _both(name, build, samples, kernel=True, iterations=1):
    """(GPU, CPU) results of ``build`` on ``samples`` (per iteration, the samples as host arrays);
    asserts that the kernel ran (or, with ``kernel=False``, that the host fallback did)."""
    before = gpu_registry.FALLBACKS[name]
    got = run_pipeline(build, [samples], True, iterations=iterations)
    if kernel:
        assert gpu_registry.FALLBACKS[name] == before, "the host fallback ran instead of the kernel"
    else:
        assert gpu_registry.FALLBACKS[name] > before, "expected the host fallback"
    want = run_pipeline(build, [samples], False, iterations=iterations)
    return got, want


def _check(name, build, samples, linear=False, kernel=True, iterations=1):
    """GPU == CPU, to the bit (linear under an old OpenCV: see the module's docstring)."""
    got, want = _both(name, build, samples, kernel, iterations)
    assert len(got) == len(want) == iterations
    for (g_batch, g_layout), (w_batch, w_layout) in zip(got, want):
        assert g_layout == w_layout
        assert len(g_batch) == len(w_batch) == len(samples)
        for g, w, x in zip(g_batch, w_batch, samples):
            assert g.shape == w.shape == x.shape and g.dtype == w.dtype == x.dtype
            if linear and not EXACT_LINEAR and x.size:
                span = float(x.max()) - float(x.min())
                np.testing.assert_allclose(g.astype(np.float64), w, rtol=0, atol=span / 32 + 1)
            else:
                np.testing.assert_array_equal(g, w)


WATER = {
    "default": {},
    "waves and fill": dict(ampl_x=5.0, ampl_y=3.0, freq_x=0.1, freq_y=0.2, phase_x=0.3, phase_y=0.4, fill_value=200.0),
    "negative amplitude": dict(ampl_x=-2.5, ampl_y=7.0, freq_x=0.5, freq_y=0.03, phase_x=-1.0),
    "fractional amplitude, fill beyond uint8": dict(ampl_x=0.7, ampl_y=-1.3, freq_x=1.1, freq_y=0.9, fill_value=300.7),
    "large amplitude, negative fill": dict(ampl_x=40.0, ampl_y=25.0, fill_value=-2.5),
}


@pytest.mark.parametrize("interp", [NN, LINEAR], ids=["nn", "linear"])
@pytest.mark.parametrize("case", sorted(WATER))
def test_water_equals_the_cpu(case, interp, make_images):
    images = make_images(6, 9, 90)
    _check("water", lambda x: fn.water(x, interp_type=interp, **WATER[case]), images, interp == LINEAR)


@pytest.mark.parametrize("interp", [NN, LINEAR], ids=["nn", "linear"])
@pytest.mark.parametrize("fill", [0.0, 77.0, 300.7, 2.5])
def test_sphere_equals_the_cpu(fill, interp, make_images):
    images = make_images(6, 5, 90) + [np.full((1, 1, 3), 9, np.uint8), np.arange(6, dtype=np.uint8).reshape(1, 2, 3)]
    _check("sphere", lambda x: fn.sphere(x, interp_type=interp, fill_value=fill), images, interp == LINEAR)


@pytest.mark.parametrize("interp", [NN, LINEAR], ids=["nn", "linear"])
@pytest.mark.parametrize("degree", [0, 2, 3, 5, 40])
def test_jitter_equals_the_cpu_for_the_same_seed(degree, interp, make_images):
    """The shifts come from each sample's random stream on both devices: three iterations, each
    with new shifts, all equal to the CPU's."""
    images = make_images(5, 10, 70)
    _check("jitter", lambda x: fn.jitter(x, nDegree=degree, interp_type=interp, fill_value=33.0), images,
           interp == LINEAR, iterations=3)


def test_jitter_large_degrees(make_images):
    """Large nDegree (most points fall outside: fill_value), up to int32's limit, where the span
    is near 2^31 and shifts beyond 2^24 reach float32 rounded on both devices."""
    images = make_images(4, 10, 60)
    _check("jitter", lambda x: fn.jitter(x, nDegree=301, fill_value=5.0), images)
    _check("jitter", lambda x: fn.jitter(x, nDegree=600, interp_type=LINEAR), images, True)
    _check("jitter", lambda x: fn.jitter(x, nDegree=2**31 - 1, fill_value=7.0), images, iterations=2)


@pytest.mark.parametrize("interp", [NN, LINEAR], ids=["nn", "linear"])
def test_one_size_batch(interp, make_images):
    """Samples of one shape (a dense batch) go through the same kernel."""
    images = [np.ascontiguousarray(im[:32, :40]) for im in make_images(3, 40, 50)]
    _check("water", lambda x: fn.water(x, interp_type=interp, ampl_x=3.0), images, interp == LINEAR)
    _check("sphere", lambda x: fn.sphere(x, interp_type=interp), images, interp == LINEAR)
    _check("jitter", lambda x: fn.jitter(x, interp_type=interp, nDegree=4), images, interp == LINEAR)


@pytest.mark.parametrize("interp", [NN, LINEAR], ids=["nn", "linear"])
def test_mask_per_sample(interp, make_images):
    """``mask`` as an argument input: samples with 0 come out unchanged (and jitter draws nothing
    for them, on either device)."""
    images = make_images(6, 10, 60)
    masks = [1, 0, 1, 1, 0, 0]
    _check("water", lambda x: fn.water(x, interp_type=interp, mask=_mask(masks)), images, interp == LINEAR)
    _check("sphere", lambda x: fn.sphere(x, interp_type=interp, mask=_mask(masks), fill_value=3.0), images,
           interp == LINEAR)
    _check("jitter", lambda x: fn.jitter(x, interp_type=interp, mask=_mask(masks), nDegree=6), images,
           interp == LINEAR, iterations=2)
    _check("sphere", lambda x: fn.sphere(x, interp_type=interp, mask=0), images, interp == LINEAR)


@pytest.mark.parametrize("fill", [300.7, -7.9])
@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.float32, np.float64, np.uint16])
def test_nearest_any_type(dtype, fill, make_images):
    """Nearest neighbour moves elements by size: any 1-, 2-, 4- or 8-byte type, the fill value
    C-cast to it (300.7 -> 44 in int8's wrap)."""
    images = make_images(4, 10, 50)
    if np.dtype(dtype).kind == "f":
        images = [(im * 1.7 - 100).astype(dtype) for im in images]
    else:  # integer to integer wraps: values all over the type's range
        images = [(im.astype(np.int64) * 301 - 9000).astype(dtype) for im in images]
    _check("water", lambda x: fn.water(x, ampl_x=8.0, ampl_y=6.0, fill_value=fill), images)
    _check("sphere", lambda x: fn.sphere(x, fill_value=fill), images)
    _check("jitter", lambda x: fn.jitter(x, nDegree=8, fill_value=fill), images)


@pytest.mark.parametrize("fill", [70000.2, -1.5, 12.5])
@pytest.mark.parametrize("dtype", [np.uint16, np.float32])
def test_linear_uint16_and_float32(dtype, fill, make_images):
    images = [(im.astype(np.float64) * 200 + 3).astype(dtype) for im in make_images(4, 10, 50)]
    if dtype == np.float32:
        images = [im / np.float32(7) - 300 for im in images]
    _check("water", lambda x: fn.water(x, interp_type=LINEAR, ampl_x=8.5, fill_value=fill), images, True)
    _check("sphere", lambda x: fn.sphere(x, interp_type=LINEAR, fill_value=fill), images, True)


@pytest.mark.parametrize("channels", [1, 4, 5, 7, 8])
@pytest.mark.parametrize("interp", [NN, LINEAR], ids=["nn", "linear"])
def test_channel_counts(channels, interp, make_images):
    """Any channel count for nearest; for linear, the counts whose groups of four OpenCV remaps in
    float (1, 3 or 4 channels to a group)."""
    images = make_images(4, 10, 50, channels)
    _check("water", lambda x: fn.water(x, interp_type=interp, ampl_y=4.0), images, interp == LINEAR)
    _check("sphere", lambda x: fn.sphere(x, interp_type=interp, fill_value=100.0), images, interp == LINEAR)
    _check("jitter", lambda x: fn.jitter(x, interp_type=interp, nDegree=3), images, interp == LINEAR)


@pytest.mark.parametrize("interp", [NN, LINEAR], ids=["nn", "linear"])
def test_empty_samples(interp, make_images):
    images = make_images(3, 10, 40)
    batch = [images[0], np.zeros((0, 7, 3), np.uint8), images[1], np.zeros((6, 0, 3), np.uint8), images[2]]
    _check("water", lambda x: fn.water(x, interp_type=interp), batch, interp == LINEAR)
    _check("sphere", lambda x: fn.sphere(x, interp_type=interp), batch, interp == LINEAR)
    _check("jitter", lambda x: fn.jitter(x, interp_type=interp), batch, interp == LINEAR, iterations=2)


def test_host_fallback(make_images):
    """What the kernel does not take runs on the host, with the CPU's results: linear with two
    channels (OpenCV's 1/32-pixel remap), linear on int16 (likewise) and on int32 (the CPU's
    float32 detour)."""
    two = make_images(3, 10, 40, 2)
    _check("water", lambda x: fn.water(x, interp_type=LINEAR), two, kernel=False)
    _check("jitter", lambda x: fn.jitter(x, interp_type=LINEAR, nDegree=4), two, kernel=False, iterations=2)
    for dtype in (np.int16, np.int32):
        images = [im.astype(dtype) * 3 - 200 for im in make_images(3, 10, 40)]
        _check("sphere", lambda x: fn.sphere(x, interp_type=LINEAR, fill_value=-5.0), images, kernel=False)


def test_bad_arguments_fail_as_on_the_cpu(make_images):
    images = make_images(3, 10, 40)
    cases = [(lambda x: fn.water(x, interp_type=types.INTERP_CUBIC), "interp_type", images),
             (lambda x: fn.sphere(x, interp_type=types.DALIInterpType.INTERP_LANCZOS3), "interp_type", images),
             (lambda x: fn.jitter(x, nDegree=-1), "nDegree", images),
             (lambda x: fn.sphere(x), "HWC", [im[..., 0].copy() for im in images])]  # not 3-D: the CPU's error
    for build, match, samples in cases:
        for gpu in (True, False):
            with pytest.raises(StokerError, match=match):
                run_pipeline(build, [samples], gpu, layout="HWC" if samples[0].ndim == 3 else "HW")
