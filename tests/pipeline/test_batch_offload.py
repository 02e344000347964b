"""Batch-wide CPU operators in a helper process (stoker.pipeline.batch_offload): the same outputs to
the bit as in the pipeline's process, and every failure falls back to that path."""

import time

import numpy as np
import pytest

import stoker.fn as fn
from stoker import pipeline_def
from stoker.errors import OperatorError

N = 8


def _boxes(i):
    rng = np.random.default_rng(i)
    k = int(rng.integers(1, 6))
    lt = rng.uniform(0.0, 0.6, (k, 2))
    return np.concatenate([lt, lt + rng.uniform(0.1, 0.35, (k, 2))], 1).astype(np.float32)


def _labels(i):
    return np.random.default_rng(100 + i).integers(1, 9, (len(_boxes(i)), 1)).astype(np.int32)


ANCHORS = [v for i in range(5) for j in range(5) for v in (i / 5, j / 5, (i + 1) / 5, (j + 1) / 5)]


def _pipe(bad_sample=None, on_error="raise"):
    def boxes_of(info):
        b = _boxes(info.idx_in_epoch)
        return b * 3 if info.idx_in_epoch == bad_sample else b  # outside [0, 1]: refused

    @pipeline_def(batch_size=N, num_threads=4, device_id=None, seed=7, on_error=on_error)
    def p():
        boxes = fn.external_source(source=boxes_of, batch=False)
        labels = fn.external_source(source=lambda info: _labels(info.idx_in_epoch), batch=False)
        anchor, shape, boxes, labels = fn.random_bbox_crop(
            boxes, labels, aspect_ratio=[0.5, 2.0], thresholds=[0.1, 0.3, 0.5], scaling=[0.3, 1.0],
            bbox_layout="xyXY", allow_no_crop=True, num_attempts=10)
        boxes, labels = fn.box_encoder(boxes, labels, criteria=0.5, anchors=ANCHORS)
        return anchor, shape, boxes, labels

    pipe = p()
    pipe.build()
    return pipe


def _helper(pipe):
    return pipe._executor._batch_offload


def _wait_ready(pipe):
    helper = _helper(pipe)
    deadline = time.monotonic() + 60
    while not helper.is_ready():
        assert time.monotonic() < deadline, "the batch-operator helper did not start"
        time.sleep(0.05)


def _outputs(pipe, iterations=3):
    return [[np.array(s) for out in pipe.run() for s in out.samples()] for _ in range(iterations)]


def test_offloaded_batches_equal_in_process_ones(stoker_settings):
    stoker_settings(batch_offload=False)
    here = _pipe()
    assert _helper(here) is None
    want = _outputs(here)
    here.close()
    stoker_settings(batch_offload=True)
    off = _pipe()
    _wait_ready(off)
    got = _outputs(off)
    assert _helper(off).offloaded == 3 * 2  # both operators, every iteration
    off.close()
    for a, b in zip(got, want):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            assert x.dtype == y.dtype
            np.testing.assert_array_equal(x, y)


def test_a_failing_sample_is_reported_by_the_pipelines_own_path(stoker_settings):
    stoker_settings(batch_offload=True)
    pipe = _pipe(bad_sample=3)
    _wait_ready(pipe)
    with pytest.raises(OperatorError, match="random_bbox_crop"):
        pipe.run()
    pipe.close()


def test_a_dead_helper_falls_back_with_the_same_outputs(stoker_settings, caplog):
    stoker_settings(batch_offload=False)
    here = _pipe()
    want = _outputs(here, 2)
    here.close()
    stoker_settings(batch_offload=True)
    pipe = _pipe()
    _wait_ready(pipe)
    _helper(pipe).proc.kill()
    _helper(pipe).proc.wait()
    got = _outputs(pipe, 2)
    assert _helper(pipe).broken
    assert "batch-operator helper process failed" in caplog.text
    pipe.close()
    for a, b in zip(got, want):
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x, y)


def test_off_with_few_threads_by_default():
    @pipeline_def(batch_size=2, num_threads=2, device_id=None, seed=1)
    def p():
        boxes = fn.external_source(source=lambda info: _boxes(info.idx_in_epoch), batch=False)
        return fn.random_bbox_crop(boxes, bbox_layout="xyXY")[0]

    pipe = p()
    pipe.build()
    assert _helper(pipe) is None
    pipe.close()


def test_auto_is_on_where_the_cpu_stage_can_run_two_lanes(stoker_settings):
    """Auto: on in a GPU pipeline whose CPU stage can run two lanes (stoker.pipeline.cpu_lanes),
    off where it cannot (skip mode: one lane would only wait for the helper); the setting rules."""
    import os
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
    import null_device

    def helper_of(**kw):
        @pipeline_def(batch_size=2, num_threads=4, device_id=0, seed=1, **kw)
        def p():
            boxes = fn.external_source(source=lambda info: _boxes(info.idx_in_epoch), batch=False)
            anchor, shape, _, _ = fn.random_bbox_crop(boxes, fn.external_source(
                source=lambda info: _labels(info.idx_in_epoch), batch=False), bbox_layout="xyXY")
            return anchor.gpu(), shape

        pipe = p()
        pipe.build()
        try:
            return _helper(pipe) is not None, pipe._executor._cpu_lanes
        finally:
            pipe.close()

    with null_device.installed():
        assert helper_of() == (True, 2)
        assert helper_of(on_error="skip") == (False, 1)
        stoker_settings(batch_offload=False)
        assert helper_of() == (False, 1)
        stoker_settings(batch_offload=True)
        assert helper_of(on_error="skip") == (True, 1)
