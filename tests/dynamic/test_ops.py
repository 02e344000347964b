"""Eager operators: same results as the same operators in a pipeline, argument handling, errors."""

import cv2
import numpy as np
import pytest

import stoker.dynamic as ndd
import stoker.fn as fn
from stoker import pipeline_def, types
from stoker.dynamic import _invoke
from stoker.errors import PipelineBuildError


@pytest.fixture(scope="module")
def images():
    rng = np.random.default_rng(5)
    return [(rng.random((h, w, 3)) * 255).astype(np.uint8) for h, w in [(31, 47), (40, 40), (25, 60)]]


def _constant_source(value):
    return lambda: value


def _pipeline_run(images, body, **arg_batches):
    """Run ``body(images_node, **arg_nodes)`` in a pipeline fed with ``images`` (one batch)."""
    n = len(images)

    @pipeline_def(batch_size=n, num_threads=1, device_id=None, seed=11)
    def pipe():
        x = fn.external_source(source=lambda: images, batch=True, layout="HWC")
        args = {k: fn.external_source(source=_constant_source(v), batch=True) for k, v in arg_batches.items()}
        return body(x, **args)

    p = pipe()
    (out,) = p.run()
    return [np.asarray(out.at(i)) for i in range(n)]


def test_resize_same_as_pipeline(images):
    ours = ndd.resize(ndd.as_batch(images, layout="HWC"), resize_x=32, resize_y=24)
    ref = _pipeline_run(images, lambda x: fn.resize(x, resize_x=32, resize_y=24))
    assert ours.layout == "HWC"
    for a, b in zip(ours.tensors, ref):
        np.testing.assert_array_equal(np.asarray(a), b)


def test_flip_on_one_tensor_matches_numpy(images):
    img = images[0]
    out = ndd.flip(ndd.as_tensor(img, layout="HWC"), horizontal=1, vertical=1)
    assert isinstance(out, ndd.Tensor)
    np.testing.assert_array_equal(np.asarray(out), img[::-1, ::-1])


def test_numpy_and_torch_inputs_are_accepted(images):
    torch = pytest.importorskip("torch")
    img = images[1]
    a = ndd.flip(img, horizontal=1)
    b = ndd.flip(torch.from_numpy(img), horizontal=1)
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    np.testing.assert_array_equal(np.asarray(a), img[:, ::-1])


@pytest.mark.parametrize("as_list", [False, True])
def test_per_sample_arguments_as_batch_or_list(images, as_list):
    flags = [np.int32(1), np.int32(0), np.int32(1)]
    arg = [np.asarray(f) for f in flags] if as_list else ndd.as_batch([np.asarray(f) for f in flags])
    out = ndd.flip(ndd.as_batch(images, layout="HWC"), horizontal=arg)
    ref = _pipeline_run(images, lambda x, h: fn.flip(x, horizontal=h), h=[np.asarray(f) for f in flags])
    for o, r, img, f in zip(out.tensors, ref, images, flags):
        np.testing.assert_array_equal(np.asarray(o), r)
        np.testing.assert_array_equal(np.asarray(o), img[:, ::-1] if f else img)


def test_crop_mirror_normalize_same_as_pipeline(images):
    kw = dict(crop=(20, 20), mean=[10.0, 20.0, 30.0], std=[2.0, 3.0, 4.0], dtype=types.FLOAT, output_layout="CHW")
    ours = ndd.crop_mirror_normalize(ndd.as_batch(images, layout="HWC"), **kw)
    ref = _pipeline_run(images, lambda x: fn.crop_mirror_normalize(x, **kw))
    assert ours.layout == "CHW"
    for a, b in zip(ours.tensors, ref):
        np.testing.assert_array_equal(np.asarray(a), b)


def test_tensor_broadcasts_against_a_batch(images):
    b = ndd.as_batch([np.full((2, 2), k, np.int32) for k in range(3)])
    bias = ndd.as_tensor(np.array([[1, 2], [3, 4]], np.int32))
    out = b + bias
    assert isinstance(out, ndd.Batch) and len(out) == 3
    np.testing.assert_array_equal(np.asarray(out.tensors[2]), 2 + np.array([[1, 2], [3, 4]]))


def test_decoder_matches_opencv(images):
    ok, png = cv2.imencode(".png", images[2])
    assert ok
    out = ndd.decoders.image(png)
    assert out.layout == "HWC"
    np.testing.assert_array_equal(np.asarray(out), images[2][..., ::-1])  # OpenCV wrote BGR


def test_instances_are_cached_per_static_arguments(images):
    _invoke._cache.clear()
    t = ndd.as_tensor(images[0], layout="HWC")
    ndd.flip(t, horizontal=1)
    ndd.flip(t, horizontal=1)
    assert len(_invoke._cache) == 1
    ndd.flip(t, horizontal=0)
    assert len(_invoke._cache) == 2


def test_operator_names_resolve_from_registry():
    assert ndd.resize.__name__ == "resize" and "resize" in (ndd.resize.__doc__ or "")
    assert callable(ndd.random.uniform) and callable(ndd.decoders.image_random_crop)
    with pytest.raises(AttributeError, match="no operator 'not_an_op'"):
        ndd.not_an_op  # noqa: B018
    with pytest.raises(AttributeError):
        ndd._arithmetic  # noqa: B018 - internal operators stay hidden


def test_unknown_argument_names_operator_and_argument(images):
    with pytest.raises(PipelineBuildError, match=r"flip: unknown argument 'horizontl'"):
        ndd.flip(images[0], horizontl=1)


def test_per_sample_value_for_a_constant_argument_is_rejected(images):
    with pytest.raises(PipelineBuildError, match="resize: argument 'antialias'"):
        ndd.resize(ndd.as_batch(images), antialias=ndd.as_batch([np.bool_(True)] * 3), resize_x=8)


def test_batch_sizes_must_agree(images):
    with pytest.raises(ValueError, match="batch size"):
        ndd.flip(ndd.as_batch(images), horizontal=ndd.as_batch([np.int32(1)] * 2))


def test_gpu_device_without_gpu_is_a_clear_error(images):
    from stoker.backend.cuda import cuda_available

    if cuda_available():
        pytest.skip("a GPU is present")
    with pytest.raises(RuntimeError, match=r"flip\(device='gpu'\): no GPU"):
        ndd.flip(images[0], horizontal=1, device="gpu")


def test_source_operators_point_to_reader_objects():
    with pytest.raises(TypeError, match="readers"):
        ndd.external_source(source=lambda: [np.zeros(1)])


def test_thread_count_does_not_change_results(images):
    b = ndd.as_batch(images, layout="HWC")
    ndd.set_num_threads(1)
    try:
        one = ndd.resize(b, size=[17, 13])
    finally:
        ndd.set_num_threads(2)
    two = ndd.resize(b, size=[17, 13])
    for a, c in zip(one.tensors, two.tensors):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(c))
    with pytest.raises(ValueError):
        ndd.set_num_threads(0)
