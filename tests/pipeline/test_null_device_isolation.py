"""The null device (tests/null_device.py) swaps CuPy for the whole process. A pipeline with a GPU
stage left open across the swap would go on prefetching under the other CuPy: on a GPU machine
one copied to a real device address with the stand-in's memmove and crashed the test run. Such
pipelines are stopped when the stand-in comes in and when it goes."""

import os
import sys

import numpy as np

import stoker
import stoker.fn as fn

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import null_device  # noqa: E402


def _gpu_pipeline():
    @stoker.pipeline_def(batch_size=2, num_threads=1, device_id=0, prefetch_queue_depth=2)
    def pipe():
        return fn.external_source(source=lambda: [np.zeros((4, 4), np.uint8)] * 2, batch=True).gpu()

    p = pipe()
    p.build()
    p.run()
    return p


def test_gpu_pipelines_left_open_are_stopped_when_cupy_changes():
    with null_device.installed():
        inside = _gpu_pipeline()  # left open, prefetching
        cpu_only = stoker.pipeline_def(batch_size=2, num_threads=1, device_id=None)(
            lambda: fn.external_source(source=lambda: [np.zeros(3, np.uint8)] * 2, batch=True))()
        cpu_only.build()
        cpu_only.run()
    assert inside._executor._closed  # stopped on the way out
    assert not cpu_only._executor._closed  # (no GPU stage: left alone)
    (out,) = cpu_only.run()
    assert len(out) == 2
    cpu_only.close()
