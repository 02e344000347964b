"""Debug mode (``@pipeline_def(debug=True)``): the function runs at every run(), each operator at
once on real batches, and the outputs equal graph mode's for the same seed."""

import numpy as np
import pytest

import stoker.fn as fn
import stoker.types as types
from stoker import Pipeline, pipeline_def
from stoker.errors import PipelineBuildError, StokerError


def _assert_same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert len(x) == len(y)
        for s, t in zip(x.samples(), y.samples()):
            np.testing.assert_array_equal(np.asarray(s), np.asarray(t))


@pipeline_def(batch_size=4, num_threads=2, device_id=None, seed=11, enable_conditionals=True)
def _augment(root, seen=None):
    jpegs, labels = fn.readers.file(file_root=root, random_shuffle=True, name="reader")
    images = fn.decoders.image(jpegs)
    images = fn.random_resized_crop(images, size=(24, 24))
    flip = fn.random.coin_flip()
    images = fn.flip(images, horizontal=flip)
    scale = fn.random.uniform(range=(0.5, 1.5))
    out = fn.cast(images, dtype=types.FLOAT) * scale + 1
    if flip:
        out = out / 2
    else:
        out = out - fn.random.normal(shape=[1])
    if seen is not None:  # debug mode: every node is a batch, here and now
        seen.append((np.asarray(flip).copy(), labels.as_array().copy(), repr(scale), len(images)))
    return out, labels, flip


def test_debug_mode_gives_graph_mode_outputs(sample_jpeg_dir):
    graph = _augment(sample_jpeg_dir)
    seen = []
    debug = _augment(sample_jpeg_dir, seen, debug=True)
    for _ in range(3):
        g, d = graph.run(), debug.run()
        _assert_same(g, d)
    assert len(seen) == 3
    for flip, labels, scale_text, n in seen:
        assert n == 4 and flip.shape == (4,) and labels.shape == (4, 1)
        assert "DebugDataNode" in scale_text and "FLOAT" in scale_text
    graph.close()
    debug.close()


def test_debug_mode_through_pipeline_class_and_define_graph():
    class Legacy(Pipeline):
        def define_graph(self):
            x = fn.random.uniform(range=(0, 1), shape=[3])
            if hasattr(x, "get"):  # debug mode's nodes hold their batch
                assert x.as_array().shape == (2, 3)
            return x * 2

    g = Legacy(batch_size=2, num_threads=1, device_id=None, seed=5)
    d = Legacy(batch_size=2, num_threads=1, device_id=None, seed=5, debug=True)
    assert isinstance(d, Legacy)
    for _ in range(3):
        (a,), (b,) = g.run(), d.run()
        np.testing.assert_array_equal(a.as_array(), b.as_array())


def test_debug_mode_rejects_a_different_operator_sequence():
    calls = []

    @pipeline_def(batch_size=2, num_threads=1, device_id=None, debug=True)
    def p():
        calls.append(1)
        if len(calls) == 1:
            return fn.random.uniform(range=(0, 1))
        return fn.random.normal()

    pipe = p()
    pipe.run()
    with pytest.raises(PipelineBuildError, match="same operators in the same order"):
        pipe.run()


def test_debug_mode_feeds_named_external_sources_and_schedules():
    @pipeline_def(batch_size=2, num_threads=1, device_id=None, debug=True)
    def p():
        return fn.external_source(name="x") + 1

    pipe = p()
    (out,) = pipe.run(x=np.arange(4, dtype=np.int32).reshape(2, 2))
    np.testing.assert_array_equal(out.as_array(), [[1, 2], [3, 4]])
    pipe.feed_input("x", [np.zeros(3, np.int32), np.ones(3, np.int32)])
    pipe.schedule_run()
    (out,) = pipe.outputs()
    np.testing.assert_array_equal(out.as_array(), [[1, 1, 1], [2, 2, 2]])


def test_debug_mode_needs_a_function_and_refuses_what_it_cannot_do():
    pipe = Pipeline(batch_size=1, num_threads=1, device_id=None, debug=True)
    with pipe:
        pipe.set_outputs(fn.random.uniform())
    with pytest.raises(PipelineBuildError, match="needs a pipeline function"):
        pipe.run()

    @pipeline_def(batch_size=1, num_threads=1, device_id=None, debug=True)
    def p():
        return fn.random.uniform()

    with pytest.raises(PipelineBuildError, match="on_error"):
        p(on_error="skip").run()
    with pytest.raises(StokerError, match="debug"):
        p().serialize()


def test_debug_mode_gpu_operator_without_device_id_says_so():
    @pipeline_def(batch_size=1, num_threads=1, device_id=None, debug=True)
    def p():
        return fn.random.uniform(shape=[2]).gpu()

    with pytest.raises(PipelineBuildError, match="device_id=None"):
        p().run()
