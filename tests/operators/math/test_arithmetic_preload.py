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


def _build(gpu, monkeypatch, arithmetic=True):
    calls = []
    monkeypatch.setattr(cuda, "preload_cupyx", lambda: calls.append(1))
    images = [np.full((4, 4, 3), 130, np.uint8)] * 2

    @stoker.pipeline_def(batch_size=2, num_threads=1, device_id=0 if gpu else None)
    def pipe():
        x = fn.external_source(source=lambda: images, batch=True, layout="HWC")
        x = x.gpu() if gpu else x
        return x // 64 if arithmetic else fn.flip(x)

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


def test_the_setting_preloads_for_every_gpu_pipeline_or_for_none(monkeypatch):
    """STOKER_PRELOAD_CUPYX=1: a GPU pipeline without arithmetic starts it too (once, at build);
    =0: not even one with arithmetic."""
    from stoker import settings

    with null_device.installed():
        with settings.override(preload_cupyx=True):
            calls, _ = _build(True, monkeypatch, arithmetic=False)
        assert calls == [1]
        with settings.override(preload_cupyx=None):
            calls, _ = _build(True, monkeypatch, arithmetic=False)
        assert calls == []
        with settings.override(preload_cupyx=False):
            calls, _ = _build(True, monkeypatch)
        assert calls == []
