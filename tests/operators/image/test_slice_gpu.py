"""GPU slice (stoker/operators/image/gpu_slice.py, kernels/window_copy.cu) against the CPU
operator: the same pipeline on both devices for every way of giving the box, every
out_of_bounds_policy, anchors on the host and on the GPU; uint8 and float32 batches of different
sizes. Slicing is a copy, so the results must be equal; errors must name the same sample."""

import numpy as np
import pytest
from gpu_pipelines import compare_exact, run_pipeline

import stoker.fn as fn
import stoker.types as types
from stoker.errors import OperatorError

pytestmark = pytest.mark.gpu



def _compare(build, batch, layout="HWC", kernel=True):
    return compare_exact(build, batch, "slice", layout, kernel)


def _images(make_images, dtype, n=5):
    images = make_images(n, 12, 48)
    return images if dtype == np.uint8 else [im.astype(np.float32) / 3 - 20 for im in images]


CASES = [
    {"rel_start": [0.1, 0.2], "rel_shape": [0.5, 0.3]},
    {"rel_start": [0.25, 0.5], "rel_end": [0.75, 1.0]},
    {"rel_shape": [0.5, 0.5]},
    {"start": [2, 1], "end": [9, 7]},
    {"start": [2, 1], "shape": [5, 6]},
    {"start": [1], "end": [4], "axes": [0]},
    {"start": [1, 0], "end": [8, 2], "axis_names": "HC"},
    {"start": [3, 2], "end": [10, 8], "dtype": types.FLOAT},
    {"start": [-3, 2], "end": [9, 60], "out_of_bounds_policy": "pad"},
    {"start": [-3, 2], "end": [9, 60], "out_of_bounds_policy": "pad", "fill_values": [7, 8, 9]},
    {"start": [-3, 2], "end": [9, 60], "out_of_bounds_policy": "pad", "fill_values": [300.7]},
    {"start": [60, 0], "end": [65, 3], "out_of_bounds_policy": "pad", "fill_values": [5]},  # wholly outside
    {"rel_start": [-0.2, 0.5], "rel_shape": [1.5, 0.9], "out_of_bounds_policy": "pad", "fill_values": [-1]},
    {"start": [-3, 2], "end": [9, 60], "out_of_bounds_policy": "trim_to_shape"},
    {"start": [60, 0], "end": [65, 3], "out_of_bounds_policy": "trim_to_shape"},  # an empty output
    {"start": [-5, -5], "end": [70, 70], "out_of_bounds_policy": "pad", "axis_names": "HW",
     "fill_values": [1, 2, 3], "dtype": types.UINT8},
]


@pytest.mark.parametrize("dtype", [np.uint8, np.float32])
@pytest.mark.parametrize("case", CASES, ids=str)
def test_gpu_slice_arguments_match_cpu(case, dtype, make_images):
    _compare(lambda x: fn.slice(x, **case), _images(make_images, dtype))


@pytest.mark.parametrize("anchors_on_gpu", [False, True])
@pytest.mark.parametrize("normalized", [True, False])
def test_anchor_and_shape_inputs(normalized, anchors_on_gpu, rng, make_images):
    """Box from positional anchor/shape inputs; GPU-resident ones are downloaded (a few numbers),
    the images still go through the kernel."""
    images = _images(make_images, np.uint8, 4)
    if normalized:
        anchor = [rng.uniform(0, 0.5, 2).astype(np.float32) for _ in images]
        shape = [rng.uniform(0.1, 0.5, 2).astype(np.float32) for _ in images]
    else:
        anchor = [rng.integers(0, 6, 2).astype(np.float32) + 0.5 for _ in images]  # halves round away from 0
        shape = [rng.integers(1, 7, 2).astype(np.float32) for _ in images]

    def build(x):
        a = fn.external_source(source=[anchor], cycle=True)
        s = fn.external_source(source=[shape], cycle=True)
        if anchors_on_gpu and x.device == "gpu":
            a, s = a.gpu(), s.gpu()
        return fn.slice(x, a, s, normalized_anchor=normalized, normalized_shape=normalized)

    _compare(build, images)


def test_per_sample_arguments_and_chw(rng, make_images):
    images = [np.ascontiguousarray(im.transpose(2, 0, 1)) for im in _images(make_images, np.float32, 4)]
    start = [rng.uniform(0, 0.5, 2).astype(np.float32) for _ in images]
    end = [(s + rng.uniform(0.1, 0.5, 2)).astype(np.float32) for s in start]

    def build(x):
        return fn.slice(x, rel_start=fn.external_source(source=[start], cycle=True),
                        rel_end=fn.external_source(source=[end], cycle=True))

    _compare(build, images, "CHW")


def test_sequences_and_int16(make_images):
    clips = [np.stack(make_images(int(f), h, h + 1)).astype(np.int16) - 128 for f, h in ((2, 12), (5, 20), (3, 9))]
    _compare(lambda x: fn.slice(x, start=[1, -2, 3], end=[4, 8, 9], axis_names="FHW",
                                out_of_bounds_policy="pad", fill_values=[-5]), clips, "FHWC")


def _error(build, images, gpu):
    with pytest.raises(OperatorError) as info:
        run_pipeline(build, [images], gpu)
    return info.value


def test_error_policy_names_the_sample(make_images):
    """out_of_bounds_policy='error' (the default): the box leaves sample 2 only; both devices fail
    on that sample with the same reason."""
    images = make_images(4, 30, 40)
    images[2] = images[2][:10, :10]

    def build(x):
        return fn.slice(x, start=[0, 0], end=[20, 20], axis_names="HW")

    got, want = _error(build, images, True), _error(build, images, False)
    assert got.sample_index == want.sample_index == 2
    assert got.reason == want.reason and "out_of_bounds_policy" in got.reason


def test_fill_values_for_a_sliced_channel_axis_fail_like_the_cpu(make_images):
    images = make_images(3, 20, 30)

    def build(x):
        return fn.slice(x, start=[-2, 0], end=[5, 2], axis_names="HC", out_of_bounds_policy="pad",
                        fill_values=[1, 2, 3])

    got, want = _error(build, images, True), _error(build, images, False)
    assert got.sample_index == want.sample_index == 0
    assert got.reason == want.reason and "fill_values" in got.reason


def test_strided_samples_and_many_dims(batch_ctx, cp):
    """copy_windows on samples that are strided device views (steps, reversed axes), a 6D window
    and a window that needs seven dimensions (None: the caller falls back)."""
    from stoker.operators.image.gpu_slice import copy_windows
    from stoker.operators.image.slice import box_window, cut_box
    from stoker.tensors_gpu import TensorListGPU

    rng = np.random.default_rng(7)
    hosts = [rng.integers(0, 255, (20, 30, 3), np.uint8), rng.integers(0, 255, (15, 44, 3), np.uint8)]
    views = [cp.asarray(hosts[0])[::2, ::-1], cp.asarray(hosts[1])[1::3, 5:40]]
    host_views = [hosts[0][::2, ::-1], hosts[1][1::3, 5:40]]
    boxes = [([0, 1], [-2, 3], [7, 40]), ([0, 1], [1, -4], [4, 30])]
    windows, want = [], []
    for v, (axes, b, e) in zip(host_views, boxes):
        shape, start, padded = box_window(v.shape, axes, b, e, "pad", "slice")
        windows.append((shape, start, np.asarray([9, 8, 7], np.uint8).reshape(1, 1, 3) if padded else None))
        want.append(cut_box(v, axes, b, e, "pad", [9, 8, 7], "HWC", "slice"))
    out = copy_windows(TensorListGPU(views, "HWC"), windows, batch_ctx)
    batch_ctx.stream.synchronize()
    for g, w in zip(out.samples(), want):
        np.testing.assert_array_equal(g.get(), w)

    for nd, expect_kernel in ((6, True), (7, False)):
        x = rng.integers(0, 255, (2,) * nd, np.uint8)
        shape, start = [3] * nd, [-1] * nd  # every axis padded on both sides: nothing merges
        window = (shape, start, np.asarray(4, np.uint8))
        out = copy_windows(TensorListGPU([cp.asarray(x)]), [window], batch_ctx)
        assert (out is not None) == expect_kernel
        if out is not None:
            batch_ctx.stream.synchronize()
            want = cut_box(x, list(range(nd)), start, [s + n for s, n in zip(start, shape)], "pad", [4], "",
                           "slice")
            np.testing.assert_array_equal(out.samples()[0].get(), want)
