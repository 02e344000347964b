"""GPU warp_perspective and experimental.warp_perspective
(stoker/operators/image/gpu_warp_perspective.py) against the CPU operator: per-sample matrices and
sizes, every border mode, nearest and linear, uint8 and float32, HW / HWC / CHW / FHWC / FCHW.

Tolerances. With OpenCV >= 4.11 (its vectorised warpPerspective computes source points and
bilinear weights in float32 in the kernel's order) linear uint8 within one level and float within
1e-4; nearest-neighbour reads the same pixels. Where OpenCV takes its scalar path (a row's last
few columns) it rounds the source point differently, so at most 0.1% of the batch's values may
differ (a nearest pixel whose source point lies within float rounding of a pixel boundary, a
uint8 value on a rounding tie). With an older OpenCV (source points quantized to 1/32 pixel):
linear uint8 within 3 levels (mean difference < 0.3) and float within 0.03, as the affine warp's
test; nearest-neighbour as above."""

import cv2
import numpy as np
import pytest
from gpu_pipelines import load_gpu_module, run_pipeline

import stoker.fn as fn
import stoker.types as types
from stoker.errors import OperatorError
from stoker.operators import gpu_registry

pytestmark = pytest.mark.gpu

MODULE = "stoker.operators.image.gpu_warp_perspective"
NEW_OPENCV = tuple(int(v) for v in cv2.__version__.split(".")[:2]) >= (4, 11)
BORDERS = ["constant", "replicate", "reflect", "reflect_101", "wrap"]


@pytest.fixture(autouse=True, scope="module")
def _gpu_warp_perspective():
    load_gpu_module(MODULE)


def _matrices(rng, n):
    """Mild homographies (output to input, DALI's pixel-corner convention), one per sample."""
    base = np.array([[0.9, 0.1, 3.5], [-0.1, 1.1, -2.25], [0.001, -0.002, 1.0]])
    return [(base + rng.normal(0, 1, (3, 3)) * [[0.05, 0.05, 2], [0.05, 0.05, 2], [5e-4, 5e-4, 0.02]])
            .astype(np.float32) for _ in range(n)]


def _per_sample(values):
    return fn.external_source(source=[list(values)], cycle=True)


def _both(build, samples, layout="HWC", name="warp_perspective", kernel=True):
    """(GPU samples, CPU samples); asserts that the kernel ran (or, with kernel=False, the host
    fallback)."""
    before = gpu_registry.FALLBACKS[name]
    (got, got_layout), = run_pipeline(build, [samples], True, layout)
    if kernel:
        assert gpu_registry.FALLBACKS[name] == before, "the host fallback ran instead of the kernel"
    else:
        assert gpu_registry.FALLBACKS[name] > before, "expected the host fallback"
    (want, want_layout), = run_pipeline(build, [samples], False, layout)
    assert got_layout == want_layout == layout
    return got, want


def _check(got, want, nearest):
    assert len(got) == len(want)
    differ = values = 0
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        d = np.abs(g.astype(np.float64) - w.astype(np.float64))
        differ += int((d > 0).sum())
        values += d.size
        if nearest:
            continue  # the share of differing values is checked below
        if g.dtype == np.uint8:
            assert d.max() <= (1 if NEW_OPENCV else 3)
            assert NEW_OPENCV or d.mean() < 0.3
        else:
            np.testing.assert_allclose(g, w, rtol=0, atol=1e-4 if NEW_OPENCV else 0.03)
    if nearest or (NEW_OPENCV and got[0].dtype == np.uint8):
        assert differ <= 1e-3 * values, f"{differ} of {values} values differ"


def _floats(images):
    return [im.astype(np.float32) / 255.0 for im in images]


@pytest.mark.parametrize("border", BORDERS)
@pytest.mark.parametrize("interp", [types.INTERP_NN, types.INTERP_LINEAR], ids=["nn", "linear"])
@pytest.mark.parametrize("in_type", ["u8", "f32"])
def test_gpu_warp_perspective_matches_cpu(border, interp, in_type, make_images, rng):
    """Per-sample matrices (argument input), a fixed output size, every border mode."""
    images = make_images(5, 20, 70)
    if in_type == "f32":
        images = _floats(images)
    mats = _matrices(rng, len(images))
    fill = [0.25, 0.5, 0.75] if in_type == "f32" else [7, 128, 300]  # 300 saturates to 255

    def build(x):
        return fn.warp_perspective(x, matrix=_per_sample(mats), size=[45, 60], border_mode=border,
                                   interp_type=interp, fill_value=fill)

    _check(*_both(build, images), interp == types.INTERP_NN)


@pytest.mark.parametrize("interp", [types.INTERP_NN, types.INTERP_LINEAR], ids=["nn", "linear"])
def test_per_sample_sizes_inverse_map_and_centre_origin(interp, make_images, rng):
    """Per-sample output sizes, a matrix that maps input to output (inverted on the host, as on
    the CPU), OpenCV's pixel-centre origin, the DALI name of the operator and one fill value."""
    images = make_images(4, 15, 80)
    sizes = [np.array(s, np.float32) for s in ([30, 40], [1, 17], [64, 9], [25.9, 33.2])]
    mats = _matrices(rng, len(images))

    def build(x):
        return fn.experimental.warp_perspective(x, matrix=_per_sample(mats), size=_per_sample(sizes),
                                                inverse_map=False, pixel_origin="center", interp_type=interp,
                                                fill_value=[42.0])

    _check(*_both(build, images, name="experimental.warp_perspective"), interp == types.INTERP_NN)


@pytest.mark.parametrize("layout", ["HW", "CHW", "FHWC", "FCHW"])
@pytest.mark.parametrize("interp", [types.INTERP_NN, types.INTERP_LINEAR], ids=["nn", "linear"])
def test_other_layouts(layout, interp, make_images, rng):
    """Grey images, planar images and sequences (every frame warped by its sample's matrix)."""
    if layout == "HW":
        samples = [im[..., 0].copy() for im in make_images(4, 20, 60)]
    elif layout == "CHW":
        samples = [np.ascontiguousarray(im.transpose(2, 0, 1)) for im in make_images(4, 20, 60, c=4)]
    else:
        samples = [np.stack(make_images(3, h, h + 1)) for h in (20, 31, 26)]
        if layout == "FCHW":
            samples = [np.ascontiguousarray(s.transpose(0, 3, 1, 2)) for s in samples]
    mats = _matrices(rng, len(samples))

    def build(x):
        return fn.warp_perspective(x, matrix=_per_sample(mats), border_mode="reflect_101", interp_type=interp)

    _check(*_both(build, samples, layout=layout), interp == types.INTERP_NN)
    floats = _floats(samples)
    _check(*_both(build, floats, layout=layout), interp == types.INTERP_NN)


def test_a_static_matrix_on_a_batch_of_one_size(make_images):
    images = make_images(6, 32, 33)  # every image 32 x 32: a dense batch
    matrix = [1.1, 0.05, -2.0, -0.08, 0.95, 1.5, 0.002, 0.001, 1.0]

    def build(x):
        return fn.warp_perspective(x, matrix=matrix, border_mode="wrap")

    _check(*_both(build, images), nearest=False)


def test_cases_the_kernel_does_not_take_run_on_the_host(make_images, rng):
    """Cubic interpolation, a matrix as the second input and 2-channel linear images take the host
    fallback, with the CPU's results."""
    images = make_images(3, 20, 40)
    mats = _matrices(rng, len(images))

    def cubic(x):
        return fn.warp_perspective(x, matrix=_per_sample(mats), interp_type=types.INTERP_CUBIC)

    def second_input(x):
        return fn.warp_perspective(x, _per_sample(mats))

    for build in (cubic, second_input):
        got, want = _both(build, images, kernel=False)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)
    two = [np.ascontiguousarray(im[..., :2]) for im in images]
    got, want = _both(lambda x: fn.warp_perspective(x, matrix=_per_sample(mats)), two, kernel=False)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_bad_arguments_fail_as_on_the_cpu(make_images, rng):
    """A per-sample matrix that cannot be inverted (inverse_map=False) and one fill value too
    many: the same error on both devices, naming the argument."""
    images = make_images(3, 20, 40)
    mats = _matrices(rng, len(images))
    mats[1] = np.zeros((3, 3), np.float32)

    def singular(x):
        return fn.warp_perspective(x, matrix=_per_sample(mats), inverse_map=False)

    def bad_fill(x):
        return fn.warp_perspective(x, matrix=_per_sample(mats[:1] * 3), fill_value=[1, 2])

    for build, match in ((singular, "not invertible"), (bad_fill, "fill_value")):
        errors = []
        for gpu in (True, False):
            with pytest.raises(OperatorError, match=match) as e:
                run_pipeline(build, [images], gpu)
            errors.append(str(e.value))
        assert errors[0] == errors[1]


def test_empty_samples_behave_as_on_the_cpu(make_images):
    """An empty source image and an empty output size go to the host: whatever the CPU operator
    does with them (today it fails), the GPU does too."""
    images = make_images(2, 20, 30)
    cases = [([images[0], np.zeros((0, 7, 3), np.uint8)], [1.0, 0, 0, 0, 1, 0, 0, 0, 1], None),
             (images, [1.0, 0, 0, 0, 1, 0, 0, 0, 1], [0, 5])]
    for samples, matrix, size in cases:
        def build(x, matrix=matrix, size=size):
            return fn.warp_perspective(x, matrix=matrix, size=size)

        outcomes = []
        for gpu in (True, False):
            try:
                (out, _), = run_pipeline(build, [samples], gpu)
                outcomes.append([o.shape for o in out])
            except OperatorError as e:
                outcomes.append(str(e))
        assert outcomes[0] == outcomes[1]
