"""``.gpu()`` with STOKER_STAGE_UPLOADS=1 (stoker.operators.staged_upload), on the null device: large
host batches are packed into pinned memory by the CPU stage and land on the device as the GPU
stage's own copy makes them (same values, same dense or flat form); small ones are left to the GPU
stage; a cancelled staging gives its memory back and the GPU stage copies as before."""

import os
import sys
import threading

import numpy as np
import pytest

import stoker
import stoker.fn as fn
from stoker import settings

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import null_device  # noqa: E402


def _batches(kind, rng):
    if kind == "dense":  # one (N, ...) array from the source
        return [rng.standard_normal((8, 40_000)).astype(np.float32) for _ in range(3)]
    if kind == "same_shape":  # a list of samples of one shape
        return [[rng.integers(0, 256, (120, 160, 3), np.uint8) for _ in range(24)] for _ in range(3)]
    if kind == "ragged":  # audio-like signals of different lengths
        return [[rng.standard_normal(int(rng.integers(20_000, 90_000))).astype(np.float32) for _ in range(8)]
                for _ in range(3)]
    return [[rng.integers(0, 256, (8, 8, 3), np.uint8) for _ in range(4)] for _ in range(3)]  # small


def _run(kind, staged, monkeypatch):
    from stoker.operators import staged_upload

    rng = np.random.default_rng(3)
    batches = _batches(kind, rng)
    made = []
    real_stage = staged_upload.stage

    def recording(host):
        out = real_stage(host)
        made.append((threading.current_thread().name, out is not None))
        return out

    monkeypatch.setattr(staged_upload, "stage", recording)
    it = iter(batches)
    outs = []
    with settings.override(stage_uploads=staged):
        @stoker.pipeline_def(batch_size=len(batches[0]), num_threads=1, device_id=0, prefetch_queue_depth=1)
        def pipe():
            return fn.external_source(source=lambda: next(it), batch=True).gpu()

        p = pipe()
        p.build()
        for _ in range(len(batches)):
            (out,) = p.run()
            flat = out.flat_parts() is not None
            outs.append(([np.array(s) for s in out.as_cpu().samples()], flat, out.is_dense_tensor()))
        p.close()
    return batches, outs, made


@pytest.mark.parametrize("kind", ["dense", "same_shape", "ragged"])
def test_large_batches_are_staged_in_the_cpu_stage_with_the_same_result(kind, monkeypatch):
    with null_device.installed():
        batches, got, made = _run(kind, True, monkeypatch)
        _, want, _ = _run(kind, False, monkeypatch)
    assert made and all(staged for _, staged in made)
    assert all(name != "stoker-gpu-stage" for name, _ in made)  # (the CPU stage's thread)
    for batch, (g, g_flat, g_dense), (w, w_flat, w_dense) in zip(batches, got, want):
        assert (g_flat, g_dense) == (w_flat, w_dense)  # the same device form as the GPU stage's copy
        assert len(g) == len(w) == len(batch)
        for a, b, src in zip(g, w, batch):
            assert a.dtype == b.dtype and a.shape == b.shape
            np.testing.assert_array_equal(a, b)
            np.testing.assert_array_equal(a, np.asarray(src))


def test_small_batches_and_the_default_are_left_to_the_gpu_stage(monkeypatch):
    with null_device.installed():
        _, _, made = _run("small", True, monkeypatch)
        assert made and not any(staged for _, staged in made)
        _, _, made = _run("ragged", False, monkeypatch)
        assert made == []  # (off: the host half is not even asked)


def test_a_cancelled_staging_falls_back_to_the_gpu_stage_copy():
    from stoker.operators import staged_upload
    from stoker.operators.base import BatchContext
    from stoker.operators.schema import get_operator
    from stoker.tensors import TensorListCPU

    with null_device.installed() as cp:
        samples = [np.full((600, 600), k, np.float32) for k in range(2)]
        host = TensorListCPU(samples)
        prep = staged_upload.stage(host)
        assert prep is not None and prep.view.nbytes >= staged_upload.MIN_BYTES
        prep.cancel()
        assert prep.mem is None and prep.view is None
        op = get_operator("_to_gpu")({}, "gpu")
        batch = BatchContext(batch_size=2, stream=cp.cuda.Stream(), device_id=0)
        batch.prepared = prep
        (out,) = op.run_gpu(batch, [host], {})
        for a, b in zip(out.as_cpu().samples(), samples):
            np.testing.assert_array_equal(np.array(a), b)
