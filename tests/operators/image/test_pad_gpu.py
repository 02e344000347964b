"""GPU pad (stoker/operators/image/gpu_pad.py, kernels/window_copy.cu) against the CPU operator:
the same pipeline on both devices, batches of differently sized samples, uint8, int16 and float32.
Padding is a copy plus a C-cast fill value, so the results must be equal."""

import numpy as np
import pytest
from gpu_pipelines import compare_exact, run_pipeline

import stoker.fn as fn
from stoker.operators import gpu_registry

pytestmark = pytest.mark.gpu



CASES = [
    {},
    {"fill_value": 7},
    {"fill_value": 300.7},  # C cast: wraps to 44 in uint8
    {"fill_value": -3.5, "axis_names": "W"},
    {"axes": [0]},
    {"axes": [0, 1], "shape": [64, -1]},
    {"axes": [0, 1], "shape": [5, 5]},  # smaller than every sample: pad never shrinks
    {"axis_names": "HW", "align": [8]},
    {"axes": [0, 1], "align": [4, 3], "shape": [50, 41], "fill_value": 1},
    {"axes": [2], "shape": [5], "fill_value": 9},  # channels padded too
]


def _compare(build, batch, layout="HWC", kernel=True):
    return compare_exact(build, batch, "pad", layout, kernel)


@pytest.mark.parametrize("dtype", [np.uint8, np.float32])
@pytest.mark.parametrize("case", CASES, ids=str)
def test_gpu_pad_matches_cpu(case, dtype, make_images):
    images = make_images(5, 10, 40)
    if dtype == np.float32:
        images = [im.astype(np.float32) / 7 - 10 for im in images]
    got = _compare(lambda x: fn.pad(x, **case), images)
    if not case:  # every sample grows to the batch's largest extent
        assert len({g.shape for g in got}) == 1


def test_per_sample_shape_and_fill_value(rng, make_images):
    images = make_images(4, 10, 30)
    shapes = [np.array(v, np.int32) for v in ([32, 31], [3, 40], [-1, 12], [40, -1])]
    fills = [np.float32(v) for v in rng.uniform(-50, 300, 4)]

    def build(x):
        s = fn.external_source(source=[shapes], cycle=True)
        f = fn.external_source(source=[fills], cycle=True)
        return fn.pad(x, shape=s, fill_value=f, axis_names="HW")

    _compare(build, images)


@pytest.mark.parametrize("layout", ["CHW", "HW"])
def test_other_layouts_and_int16(layout, make_images):
    images = make_images(4, 8, 33)
    if layout == "CHW":
        images = [np.ascontiguousarray(im.transpose(2, 0, 1)).astype(np.int16) * 100 - 9000 for im in images]
    else:
        images = [im[..., 0] for im in images]
    _compare(lambda x: fn.pad(x, fill_value=-7, axis_names="HW", align=[16]), images, layout)


def test_sequences(make_images):
    """FHWC clips of different lengths and sizes: frames and pixels padded in one launch."""
    clips = [np.stack(make_images(int(f), h, h + 1)) for f, h in ((2, 12), (5, 20), (3, 9))]
    _compare(lambda x: fn.pad(x, fill_value=5, axis_names="FHW"), clips, "FHWC")


def test_empty_samples(make_images):
    """A sample of zero rows pads to fill values only; one of zero columns stays empty (the kernel
    skips an output of no elements)."""
    images = make_images(3, 10, 20)
    images[1] = images[1][:0]
    images[2] = images[2][:, :0]
    _compare(lambda x: fn.pad(x, fill_value=2, axis_names="H"), images)


def test_bad_argument_fails_like_the_cpu(make_images):
    from stoker.errors import StokerError

    images = make_images(3, 10, 20)
    for gpu in (True, False):
        with pytest.raises(StokerError, match="pad: argument 'shape' has 1 values"):
            run_pipeline(lambda x: fn.pad(x, shape=[3], axis_names="HW"), [images], gpu)


def test_seven_dims_take_the_host_fallback():
    """More dimensions than the kernel's six, none of which merge: the host fallback runs
    (counted) and the result is the CPU's."""
    rng = np.random.default_rng(3)
    # Every sample is padded on every axis (to 3): no axis is whole, so none merges with the one
    # outside it. (Padded to the batch's largest extent, a sample that reaches it on an axis lets
    # that axis merge, and the kernel takes the batch: the first version of this test.)
    batch = [rng.integers(0, 255, s, np.uint8) for s in ((2, 1, 2, 1, 2, 1, 2), (1, 2, 1, 2, 1, 2, 1))]
    before = gpu_registry.FALLBACKS["pad"]
    _compare(lambda x: fn.pad(x, fill_value=1, shape=[3] * 7), batch, "ABCDEFG", kernel=False)
    assert gpu_registry.FALLBACKS["pad"] > before
