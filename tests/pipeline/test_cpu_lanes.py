"""Two CPU-stage lanes (stoker.pipeline.cpu_lanes): the same batches as one lane, bit for bit.

Runs on the null device (tests/null_device.py), so the pipeline has a GPU stage on a machine
without a GPU; the batch operators go to the real helper process (stoker.pipeline.batch_offload).
"""

import os
import sys
import time

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from stoker import settings  # noqa: E402

N = 8
pytestmark = pytest.mark.skipif(not hasattr(os, "memfd_create"), reason="the batch-operator helper needs Linux")


def _sources():
    rng = np.random.default_rng(5)
    boxes, labels, images = [], [], []
    for _ in range(3 * N + 5):
        k = int(rng.integers(1, 6))
        lt = rng.uniform(0.0, 0.6, (k, 2))
        boxes.append(np.concatenate([lt, np.minimum(lt + rng.uniform(0.1, 0.4, (k, 2)), 1.0)], 1).astype(np.float32))
        labels.append(rng.integers(1, 20, k).astype(np.int32))
        images.append(rng.integers(0, 256, (6, 5, 3), dtype=np.uint8))
    return boxes, labels, images


def _run(lanes: int, iterations: int = 6, **pipe_kw):
    import stoker.fn as fn
    from stoker import pipeline_def

    boxes, labels, images = _sources()

    @pipeline_def(batch_size=N, num_threads=2, device_id=0, seed=7, **pipe_kw)
    def pipe():
        b = fn.external_source(source=lambda info: boxes[info.idx_in_epoch % len(boxes)], batch=False)
        lab = fn.external_source(source=lambda info: labels[info.idx_in_epoch % len(labels)], batch=False)
        img = fn.external_source(source=lambda info: images[info.idx_in_epoch % len(images)], batch=False,
                                 layout="HWC")
        anchor, shape, b, lab = fn.random_bbox_crop(b, lab, thresholds=[0.1, 0.3, 0.5], scaling=[0.3, 1.0],
                                                    bbox_layout="xyXY", allow_no_crop=True, num_attempts=20)
        flip = fn.random.coin_flip()
        b = fn.bb_flip(b, ltrb=True, horizontal=flip)
        enc_b, enc_l = fn.box_encoder(b, lab, criteria=0.5, anchors=[0.0, 0.0, 0.5, 0.5, 0.5, 0.5, 1.0, 1.0])
        return anchor, shape, enc_b, enc_l, img.gpu()

    with settings.override(batch_offload=True, cpu_lanes=lanes):
        p = pipe()
        p.build()
        try:
            ex = p._executor
            deadline = time.monotonic() + 30
            while ex._batch_offload is not None and not ex._batch_offload.is_ready() and time.monotonic() < deadline:
                time.sleep(0.05)  # (so that the batches below do go through the helper)
            used = ex._cpu_lanes
            got = []
            for _ in range(iterations):
                outs = p.run()
                got.append([[np.asarray(o.as_cpu().at(i) if hasattr(o, "as_cpu") else o.at(i)).copy()
                             for i in range(len(o))] for o in outs])
            assert ex._batch_offload is not None and ex._batch_offload.offloaded > 0
            assert len(ex._batch_offload.conns) == used  # one helper per lane
        finally:
            p.close()
    return used, got


@pytest.mark.parametrize("lanes", [2, 3])
def test_more_lanes_give_the_batches_of_one(null_cupy, lanes):
    one_used, one = _run(1)
    two_used, two = _run(lanes)
    assert (one_used, two_used) == (1, lanes)
    for a, b in zip(one, two):
        for x, y in zip(a, b):
            assert len(x) == len(y)
            for u, v in zip(x, y):
                np.testing.assert_array_equal(u, v)


def test_auto_uses_two_lanes_only_with_the_batch_helper(null_cupy):
    from stoker.pipeline import cpu_lanes

    with settings.override(cpu_lanes=None):
        used, _ = _run(None, iterations=2)
    assert used == 2  # (the helper is on in _run)
    assert cpu_lanes.lane_count.__doc__


def test_skip_mode_keeps_one_lane(null_cupy):
    used, _ = _run(2, iterations=2, on_error="skip")
    assert used == 1  # refills advance the sources from the middle of the stage


def test_closing_with_iterations_in_flight_does_not_hang(null_cupy):
    import stoker.fn as fn
    from stoker import pipeline_def

    boxes, labels, _ = _sources()

    @pipeline_def(batch_size=N, num_threads=2, device_id=0, seed=7, prefetch_queue_depth=3)
    def pipe():
        b = fn.external_source(source=lambda info: boxes[info.idx_in_epoch % len(boxes)], batch=False)
        lab = fn.external_source(source=lambda info: labels[info.idx_in_epoch % len(labels)], batch=False)
        anchor, shape, b, lab = fn.random_bbox_crop(b, lab, bbox_layout="xyXY", allow_no_crop=True)
        return anchor.gpu(), b

    with settings.override(batch_offload=True, cpu_lanes=2):
        p = pipe()
        p.build()
        p.run()
        p.schedule_run()
        ex = p._executor
        p.close()  # must return: both lanes and the GPU stage end
    assert not any(t.is_alive() for t in ex._threads)
