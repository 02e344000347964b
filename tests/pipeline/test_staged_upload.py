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


def _run(kind, staged, monkeypatch, threads=1):
    from stoker.operators import staged_upload

    rng = np.random.default_rng(3)
    batches = _batches(kind, rng)
    made = []
    real_stage = staged_upload.stage

    def recording(host, pool=None):
        out = real_stage(host, pool)
        made.append((threading.current_thread().name, out is not None))
        return out

    monkeypatch.setattr(staged_upload, "stage", recording)
    it = iter(batches)
    outs = []
    with settings.override(stage_uploads=staged):
        @stoker.pipeline_def(batch_size=len(batches[0]), num_threads=threads, device_id=0, prefetch_queue_depth=1)
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


@pytest.mark.parametrize("threads", [1, 3])
@pytest.mark.parametrize("kind", ["dense", "same_shape", "ragged"])
def test_large_batches_are_staged_in_the_cpu_stage_with_the_same_result(kind, threads, monkeypatch):
    from stoker.operators import staged_upload

    monkeypatch.setattr(staged_upload, "PARALLEL_BYTES", 1 << 20)  # (3 threads: the pool packs them)
    with null_device.installed():
        batches, got, made = _run(kind, True, monkeypatch, threads)
        _, want, _ = _run(kind, False, monkeypatch, threads)
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


@pytest.mark.parametrize("sizes", [[3_000_000], [5, 1_500_000, 0, 2_700_001, 64, 900_000], [10] * 40])
def test_packing_with_the_pool_gives_the_bytes_one_thread_gives(sizes):
    from concurrent.futures import ThreadPoolExecutor

    from stoker.operators import staged_upload

    rng = np.random.default_rng(5)
    samples = [rng.integers(0, 256, n, np.uint8) for n in sizes]
    offsets = np.concatenate([[0], np.cumsum([-(-n // 256) * 256 for n in sizes])]).tolist()
    total = offsets.pop()
    alone, shared = np.zeros(total, np.uint8), np.zeros(total, np.uint8)
    staged_upload.pack(alone, samples, offsets)
    threads = set()
    with ThreadPoolExecutor(4) as pool:
        real_copy = staged_upload._copy

        def copy(pieces):
            threads.add(threading.current_thread().name)
            real_copy(pieces)

        staged_upload._copy = copy
        try:
            staged_upload.pack(shared, samples, offsets, pool)
        finally:
            staged_upload._copy = real_copy
    np.testing.assert_array_equal(alone, shared)
    for s, off in zip(samples, offsets):
        np.testing.assert_array_equal(shared[off:off + s.size], s)
    if sum(sizes) > staged_upload.PIECE_BYTES:  # more than one piece: the pool's threads help
        assert len(threads) > 1


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["dense", "same_shape", "ragged"])
def test_staged_uploads_on_the_gpu_give_the_gpu_stage_copy(kind, monkeypatch):
    from stoker.operators import staged_upload

    monkeypatch.setattr(staged_upload, "PARALLEL_BYTES", 1 << 20)  # (the pool packs these batches too)
    batches, got, made = _run(kind, True, monkeypatch, threads=3)
    _, want, _ = _run(kind, False, monkeypatch, threads=3)
    assert made and all(staged for _, staged in made)
    for batch, (g, g_flat, g_dense), (w, w_flat, w_dense) in zip(batches, got, want):
        assert (g_flat, g_dense) == (w_flat, w_dense)
        for a, b, src in zip(g, w, batch):
            np.testing.assert_array_equal(a, b)
            np.testing.assert_array_equal(a, np.asarray(src))


def test_pinned_buffers_are_reused_across_batches_of_other_sizes(monkeypatch):
    from stoker.operators import staged_upload
    from stoker.operators.base import BatchContext
    from stoker.tensors import TensorListCPU

    monkeypatch.setattr(staged_upload, "_buffers", staged_upload.PinnedBuffers())
    with null_device.installed() as cp:
        made = []
        real_alloc = cp.cuda.alloc_pinned_memory
        monkeypatch.setattr(cp.cuda, "alloc_pinned_memory", lambda n: made.append(n) or real_alloc(n))
        rng = np.random.default_rng(1)
        batch = BatchContext(batch_size=4, stream=cp.cuda.Stream(), device_id=0)
        for k in range(6):  # ragged batches of 1.6-2.0 MB: one 2 MiB buffer serves them all
            samples = [rng.standard_normal(100_000 + 5_000 * k + i).astype(np.float32) for i in range(4)]
            prep = staged_upload.stage(TensorListCPU(samples))
            if k == 2:
                prep.cancel()  # (called off: the buffer is free at once)
                continue
            out = staged_upload.finish(prep, batch)
            for a, b in zip(out.as_cpu().samples(), samples):
                np.testing.assert_array_equal(np.array(a), b)
        assert made == [2 << 20]
