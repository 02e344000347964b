"""GPU erase (stoker/operators/image/gpu_erase.py) against the CPU operator: batches of
differently sized images, several boxes per sample, normalized and centred anchors, per-channel
fills, per-sample argument inputs, other layouts and types. Erasing only copies values, so the
GPU output must equal the CPU's exactly."""

import numpy as np
import pytest
from gpu_pipelines import run_pipeline

import stoker.fn as fn
from stoker.errors import OperatorError
from stoker.operators import gpu_registry

pytestmark = pytest.mark.gpu



def _const(values, dtype=np.float32):
    """A per-sample argument input: one array per sample."""
    return fn.external_source(source=[[np.asarray(v, dtype) for v in values]], cycle=True)


def _both(build, images, layout="HWC", kernel=True):
    """(GPU samples, CPU samples) of ``build`` on ``images``; asserts the kernel ran (or, with
    ``kernel=False``, that the host fallback did)."""
    before = gpu_registry.FALLBACKS["erase"]
    got = run_pipeline(build, [images], True, layout)[0][0]
    if kernel:
        assert gpu_registry.FALLBACKS["erase"] == before, "the GPU kernel did not run"
    else:
        assert gpu_registry.FALLBACKS["erase"] > before, "expected the host fallback"
    want = run_pipeline(build, [images], False, layout)[0][0]
    return got, want


def _assert_equal(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)


CASES = {
    "one box, one value": dict(anchor=[3, 4], shape=[10, 12], fill_value=[200]),
    "three boxes, per-channel fill": dict(anchor=[0, 0, 5, 7, 12, 3], shape=[4, 6, 9, 2.5, 30, 30],
                                          fill_value=[7, 8, 9]),
    "normalized": dict(anchor=[0.25, 0.3, 0.6, 0.05], shape=[0.5, 0.5, 0.3, 0.2], normalized=True,
                       fill_value=[1, 2, 3]),
    "normalized anchor only": dict(anchor=[0.5, 0.5], shape=[3, 4], normalized_anchor=True),
    "normalized shape only": dict(anchor=[2, 3], shape=[0.4, 0.7], normalized_shape=True, fill_value=[66]),
    "centered": dict(anchor=[5.5, 5.2, 15, 20], shape=[3, 3, 8, 6], centered_anchor=True, fill_value=[1, 2, 3]),
    "axis names WH": dict(anchor=[1, 0], shape=[5, 8], axis_names="WH", fill_value=[3]),
    "channel axis": dict(anchor=[1], shape=[1], axes=[2], fill_value=[250]),
    "outside and wrapped fill": dict(anchor=[-1.5, 3, 200, 200], shape=[3, 400, 5, 5], fill_value=[300.7]),
    "overlapping": dict(anchor=[2, 2, 4, 4], shape=[10, 10, 10, 10], fill_value=[11, 22, 33]),
    "no boxes": dict(),
}


@pytest.mark.parametrize("dtype", [np.uint8, np.float32], ids=["u8", "f32"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_gpu_erase_matches_cpu(case, dtype, make_images):
    images = make_images(6, 15, 70)
    if dtype == np.float32:
        images = [im.astype(np.float32) / 7 for im in images]
    _assert_equal(*_both(lambda x: fn.erase(x, **CASES[case]), images))


def test_per_sample_boxes_and_fills(make_images):
    """anchor, shape and fill_value as argument inputs: a different number of boxes and a
    different fill in every sample."""
    images = make_images(4, 20, 60)
    anchors = [[1, 1], [2, 3, 10, 10], [0.0, 0.0, 5, 5, 12, 1], []]
    shapes = [[5, 9], [4, 4, 3.5, 8], [2, 2, 6, 6, 4, 40], []]
    fills = [[9, 8, 7], [5], [1, 2, 3], [4]]

    def build(x):
        return fn.erase(x, anchor=_const(anchors), shape=_const(shapes), fill_value=_const(fills))

    _assert_equal(*_both(build, images))


def test_per_sample_normalized_boxes(make_images):
    images = make_images(5, 10, 80)
    rng = np.random.default_rng(3)
    anchors = [rng.uniform(0, 1, 4) for _ in images]
    shapes = [rng.uniform(0, 0.6, 4) for _ in images]

    def build(x):
        return fn.erase(x, anchor=_const(anchors), shape=_const(shapes), normalized=True, centered_anchor=True,
                        fill_value=[0, 128, 255])

    _assert_equal(*_both(build, images))


def test_chw_with_per_channel_fill(make_images):
    images = [np.ascontiguousarray(im.transpose(2, 0, 1)) for im in make_images(4, 15, 50)]
    _assert_equal(*_both(lambda x: fn.erase(x, anchor=[2, 3, 0, 0], shape=[6, 5, 1, 40], fill_value=[9, 8, 7]),
                         images, layout="CHW"))


def test_sequences_and_other_types(make_images):
    """FHWC clips (4-D samples: every frame erased) and int16 / float64 samples: the kernel
    moves elements by size, so it takes any type."""
    clips = [np.stack(make_images(3, 25, 26)) for _ in range(3)]
    build = lambda x: fn.erase(x, anchor=[0.1, 0.2, 0.5, 0.5], shape=[0.3, 0.3, 0.2, 0.4], normalized=True,  # noqa: E731
                               fill_value=[1, 2, 3])
    _assert_equal(*_both(build, clips, layout="FHWC"))
    images = make_images(4, 15, 40)
    for dtype in (np.int16, np.float64):
        _assert_equal(*_both(lambda x: fn.erase(x, anchor=[2, 2, 9, 1], shape=[5, 5, 3, 30], fill_value=[-3]),
                             [im.astype(dtype) - 100 for im in images]))


def test_many_dimensions_take_the_host_fallback(rng):
    """Samples of more dimensions than the kernel's MAX_DIMS run through the host fallback."""
    samples = [rng.integers(0, 255, (2, 3, 2, 2, 3, 4, 5), np.uint8) for _ in range(2)]
    _assert_equal(*_both(lambda x: fn.erase(x, anchor=[1, 1], shape=[2, 2], axes=[5, 6], fill_value=[7]),
                         samples, layout="", kernel=False))


def test_bad_fill_fails_as_on_the_cpu(make_images):
    """Two fill values for three channels: the same error on both devices, naming the argument."""
    images = make_images(3)
    build = lambda x: fn.erase(x, anchor=[1, 1], shape=[2, 2], fill_value=[1, 2])  # noqa: E731
    for gpu in (True, False):
        with pytest.raises(OperatorError, match="fill_values"):
            run_pipeline(build, [images], gpu)
