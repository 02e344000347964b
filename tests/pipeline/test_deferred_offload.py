"""A batch operator's helper answer taken at the hand-over (stoker.pipeline.deferred_offload): which
operator qualifies, the same outputs as without any helper, a helper that dies, an error that
names the operator. On the null device (the lanes need a GPU stage), with the real helpers."""

import os
import sys
import time

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from test_cpu_lanes import N, _sources  # noqa: E402 - (the same boxes, labels and images)

from stoker import settings  # noqa: E402
from stoker.errors import OperatorError  # noqa: E402
from stoker.pipeline import deferred_offload  # noqa: E402

ANCHORS = [0.0, 0.0, 0.5, 0.5, 0.5, 0.5, 1.0, 1.0, 0.25, 0.25, 0.75, 0.75]
pytestmark = pytest.mark.skipif(not hasattr(os, "memfd_create"), reason="the batch-operator helper needs Linux")


def _pipe(bad_at=None, encoded_read_later=False):
    import stoker.fn as fn
    from stoker import pipeline_def

    boxes, labels, images = _sources()
    # box_encoder's own labels: one sample's do not match its boxes
    bad = [lab if i != bad_at else np.append(lab, 1).astype(np.int32) for i, lab in enumerate(labels)]

    @pipeline_def(batch_size=N, num_threads=2, device_id=0, seed=3)
    def pipe():
        b = fn.external_source(source=lambda info: boxes[info.idx_in_epoch % len(boxes)], batch=False)
        lab = fn.external_source(source=lambda info: labels[info.idx_in_epoch % len(labels)], batch=False)
        img = fn.external_source(source=lambda info: images[info.idx_in_epoch % len(images)], batch=False,
                                 layout="HWC")
        anchor, shape, b, lab = fn.random_bbox_crop(b, lab, thresholds=[0.1, 0.5], scaling=[0.3, 1.0],
                                                    bbox_layout="xyXY", allow_no_crop=True, num_attempts=20)
        b = fn.bb_flip(b, ltrb=True, horizontal=fn.random.coin_flip())
        if bad_at is not None:  # the source's boxes, and labels of which one sample's do not match
            b = fn.external_source(source=lambda info: boxes[info.idx_in_epoch % len(boxes)], batch=False)
            lab = fn.external_source(source=lambda info: bad[info.idx_in_epoch % len(bad)], batch=False)
        enc_b, enc_l = fn.box_encoder(b, lab, criteria=0.5, anchors=ANCHORS)
        if encoded_read_later:
            enc_b = enc_b * 2.0
        return anchor, shape, enc_b, enc_l, img.gpu()

    return pipe()


def _run(p, iterations: int, kill_helpers_after: int | None = None):
    p.build()
    ex = p._executor
    offload = ex.batch_offload
    deadline = time.monotonic() + 30
    while offload is not None and not offload.is_ready() and time.monotonic() < deadline:
        time.sleep(0.05)  # (so that the batches do go through the helpers)
    got = []
    for k in range(iterations):
        if k == kill_helpers_after:
            for conn in offload.conns:
                conn.proc.kill()
                conn.proc.wait()
        outs = p.run()
        got.append([[np.asarray(o.as_cpu().at(i) if hasattr(o, "as_cpu") else o.at(i)).copy() for i in range(len(o))]
                    for o in outs])
    return got


def _same(a, b):
    for x, y in zip(a, b):
        for u, v in zip(x, y):
            assert len(u) == len(v)
            for s, t in zip(u, v):
                np.testing.assert_array_equal(s, t)


def _reference(iterations: int):
    with settings.override(batch_offload=False, cpu_lanes=1):
        p = _pipe()
        try:
            return _run(p, iterations)
        finally:
            p.close()


def test_box_encoder_answer_is_taken_at_the_hand_over_with_the_same_outputs(null_cupy, monkeypatch):
    want = _reference(5)
    sent = []
    real = deferred_offload.submit
    monkeypatch.setattr(deferred_offload, "submit", lambda *a: sent.append(a[2].op_name) or real(*a))
    with settings.override(batch_offload=True, cpu_lanes=2):
        p = _pipe()
        try:
            got = _run(p, 5)
            ex = p._executor
            assert ex.graph.instances[ex._deferrable].schema.name == "box_encoder"
        finally:
            p.close()
    assert sent and set(sent) == {"box_encoder"}
    _same(got, want)


def test_an_operator_whose_outputs_are_read_is_not_deferred(null_cupy):
    with settings.override(batch_offload=True, cpu_lanes=2):
        p = _pipe(encoded_read_later=True)
        try:
            p.build()
            assert p._executor.batch_offload is not None and p._executor._deferrable is None
        finally:
            p.close()


def test_helpers_that_die_leave_the_batches_to_the_pipeline(null_cupy):
    want = _reference(5)
    with settings.override(batch_offload=True, cpu_lanes=2):
        p = _pipe()
        try:
            got = _run(p, 5, kill_helpers_after=2)
            assert p._executor.batch_offload.broken
        finally:
            p.close()
    _same(got, want)


def test_a_failing_sample_raises_naming_the_operator(null_cupy, monkeypatch):
    sent = []
    real = deferred_offload.submit
    monkeypatch.setattr(deferred_offload, "submit", lambda *a: sent.append(a[2].op_name) or real(*a))
    with settings.override(batch_offload=True, cpu_lanes=2):
        p = _pipe(bad_at=N + 2)  # in the second batch
        try:
            with pytest.raises(OperatorError) as err:
                _run(p, 3)
            assert p._executor.batch_offload.offloaded > 0
        finally:
            p.close()
    assert "box_encoder" in str(err.value) and "sample" in str(err.value)
    assert "box_encoder" in sent  # it went to a helper, whose answer was taken at the hand-over


def test_closing_with_deferred_answers_in_flight_does_not_hang(null_cupy):
    with settings.override(batch_offload=True, cpu_lanes=2):
        p = _pipe()
        p.build()
        p.run()
        for _ in range(3):
            p.schedule_run()  # (iterations in both lanes, some with a helper answer pending)
        ex = p._executor
        p.close()  # must return: both lanes, the GPU stage and the helpers end
    assert not any(t.is_alive() for t in ex._threads)
