"""A GPU pipeline with arithmetic starts CuPy's cupyx import when it is built (stoker.backend.cuda.
preload_cupyx), not in its first batch's GPU stage; a CPU pipeline does not."""

import os
import sys

import numpy as np

import stoker
import stoker.fn as fn
from stoker.backend import cuda

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
import null_device  # noqa: E402


def _build(gpu, monkeypatch):
    calls = []
    monkeypatch.setattr(cuda, "preload_cupyx", lambda: calls.append(1))
    images = [np.full((4, 4, 3), 130, np.uint8)] * 2

    @stoker.pipeline_def(batch_size=2, num_threads=1, device_id=0 if gpu else None)
    def pipe():
        x = fn.external_source(source=lambda: images, batch=True, layout="HWC")
        return (x.gpu() if gpu else x) // 64

    p = pipe()
    p.build()
    (out,) = p.run()
    p.close()
    return calls, out


def test_gpu_arithmetic_preloads_at_build(monkeypatch):
    with null_device.installed():
        calls, out = _build(True, monkeypatch)
    assert calls == [1]
    assert len(out) == 2


def test_cpu_arithmetic_does_not(monkeypatch):
    calls, out = _build(False, monkeypatch)
    assert calls == []
    np.testing.assert_array_equal(np.asarray(out[0]), np.full((4, 4, 3), 2))


def test_preload_survives_a_missing_cupyx(monkeypatch):
    monkeypatch.setattr(cuda, "_cupyx_preload", None)
    cuda.preload_cupyx()  # (no CuPy here: the thread's import fails quietly)
    cuda._cupyx_preload.join(timeout=10)
    assert not cuda._cupyx_preload.is_alive()
    cuda.preload_cupyx()  # once per process
