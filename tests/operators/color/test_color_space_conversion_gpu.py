"""GPU color_space_conversion (stoker/operators/color/gpu_color_space_conversion.py) against the
CPU operator, for every pair of RGB, BGR, YCbCr and GRAY.

Exact: copies, RGB <-> BGR, GRAY -> RGB/BGR (bytes moved) and RGB/BGR -> GRAY (OpenCV's
integer formula on both devices). The float32 maps (to or from YCbCr) may differ by one level
where the CPU's cv2.transform sums in another order (a few hundred of the 2^24 RGB values, found
with a NumPy model of the kernel), so there: at most 1 level, on a tiny share of the values."""

import cv2
import numpy as np
import pytest
from gpu_pipelines import run_pipeline

import stoker.fn as fn
import stoker.types as types
from stoker.errors import OperatorError
from stoker.operators import gpu_registry

pytestmark = pytest.mark.gpu

T = types
SPACES = [T.RGB, T.BGR, T.YCbCr, T.GRAY]
PAIRS = [(s, d) for s in SPACES for d in SPACES]
EXACT = {(s, d) for s, d in PAIRS if T.YCbCr not in (s, d) or s == d}



def _both(src, dst, images, layout="HWC", kernel=True):
    """(GPU samples, CPU samples) of the conversion; asserts the kernel ran (or, with
    ``kernel=False``, that the host fallback did)."""
    name = "color_space_conversion"

    def build(x):
        return fn.color_space_conversion(x, image_type=src, output_type=dst)

    before = gpu_registry.FALLBACKS[name]
    got = run_pipeline(build, [images], True, layout)[0][0]
    if kernel:
        assert gpu_registry.FALLBACKS[name] == before, "the GPU kernel did not run"
    else:
        assert gpu_registry.FALLBACKS[name] > before, "expected the host fallback"
    want = run_pipeline(build, [images], False, layout)[0][0]
    return got, want


def _compare(got, want, exact, max_share=1e-3):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype == np.uint8
        if exact:
            np.testing.assert_array_equal(g, w)
        else:
            diff = np.abs(g.astype(int) - w.astype(int))
            assert diff.max() <= 1 and (diff > 0).mean() <= max_share


def _inputs(src, make_images):
    return make_images(6, c=1 if src == T.GRAY else 3)


@pytest.mark.parametrize("src,dst", PAIRS, ids=lambda t: t.name)
def test_gpu_conversion_matches_cpu(src, dst, make_images):
    got, want = _both(src, dst, _inputs(src, make_images))
    _compare(got, want, (src, dst) in EXACT)


@pytest.mark.parametrize("src,dst", PAIRS, ids=lambda t: t.name)
def test_every_pixel_value(src, dst):
    """All 2^24 RGB triples (or the 256 grey levels) in one image, saturating YCbCr inputs
    included."""
    if src == T.GRAY:
        image = np.arange(256, dtype=np.uint8).reshape(16, 16, 1)
    else:
        v = np.arange(256, dtype=np.uint8)
        image = np.stack(np.meshgrid(v, v, v, indexing="ij"), -1).reshape(4096, 4096, 3)
    got, want = _both(src, dst, [image])
    _compare(got, want, (src, dst) in EXACT, max_share=1e-4)


def test_luma_weights_are_opencvs():
    """The kernel's RGB/BGR -> GRAY weights reproduce this cv2's cvtColor for every triple (what
    the CPU operator calls; the exact GPU comparisons rest on it)."""
    from stoker.operators.color.gpu_color_space_conversion import LUMA_Q15

    v = np.arange(256, dtype=np.int64)
    px = np.stack(np.meshgrid(v, v, v, indexing="ij"), -1).reshape(-1, 3)
    for space, code in ((T.RGB, cv2.COLOR_RGB2GRAY), (T.BGR, cv2.COLOR_BGR2GRAY)):
        want = cv2.cvtColor(px.astype(np.uint8).reshape(-1, 1, 3), code).reshape(-1)
        got = (px @ np.asarray(LUMA_Q15[space], np.int64) + (1 << 14)) >> 15
        np.testing.assert_array_equal(got, want, err_msg=f"cv2 {cv2.__version__}")


def test_sequences_and_no_layout(make_images):
    """FHWC clips and layout-less HWC samples run on the kernel (it works per pixel)."""
    clips = [np.stack(make_images(3, 20, 21)) for _ in range(3)]
    _compare(*_both(T.RGB, T.GRAY, clips, layout="FHWC"), exact=True)
    _compare(*_both(T.RGB, T.YCbCr, clips, layout="FHWC"), exact=False)
    _compare(*_both(T.GRAY, T.RGB, make_images(4, c=1), layout=""), exact=True)


def test_channel_first_takes_the_fallback_and_fails_as_on_the_cpu(make_images):
    """A CHW batch is not the kernels': the host fallback runs it and raises the CPU's error."""
    images = [np.ascontiguousarray(im.transpose(2, 0, 1)) for im in make_images(3)]
    build = lambda x: fn.color_space_conversion(x, image_type=T.RGB, output_type=T.GRAY)  # noqa: E731
    before = gpu_registry.FALLBACKS["color_space_conversion"]
    for gpu in (True, False):
        with pytest.raises(OperatorError, match="channel-last"):
            run_pipeline(build, [images], gpu, layout="CHW")
    assert gpu_registry.FALLBACKS["color_space_conversion"] > before


def test_float_input_fails_as_on_the_cpu(make_images):
    images = [im.astype(np.float32) for im in make_images(3)]
    build = lambda x: fn.color_space_conversion(x, image_type=T.RGB, output_type=T.YCbCr)  # noqa: E731
    for gpu in (True, False):
        with pytest.raises(OperatorError, match="uint8"):
            run_pipeline(build, [images], gpu)
