"""STOKER_GPU_POOL=hybrid (stoker.backend.cuda.HybridPool): requests of 4 MiB or more go to the
driver's stream-ordered pool, smaller ones to CuPy's caching pool with size classes. The routing
runs without a GPU; the pipeline check runs on one (marked gpu)."""

import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

from stoker import settings
from stoker.backend import cuda


class _RecordingPool:
    def __init__(self):
        self.asked, self.freed = [], 0

    def malloc(self, nbytes):
        self.asked.append(nbytes)
        return ("block", nbytes)

    def free_all_blocks(self):
        self.freed += 1

    def used_bytes(self):
        return sum(self.asked)

    def total_bytes(self):
        return 2 * sum(self.asked)


def test_large_requests_go_to_the_driver_pool_and_small_ones_keep_size_classes():
    small, large = _RecordingPool(), _RecordingPool()
    fake_cp = SimpleNamespace(get_default_memory_pool=lambda: small,
                              cuda=SimpleNamespace(MemoryAsyncPool=lambda: large))
    pool = cuda.HybridPool(fake_cp)
    odd = (2 << 20) + 12345  # over 1 MiB: rounded up to its size class on the caching pool
    for n in (256, 4096, odd, cuda.HYBRID_LARGE - 1, cuda.HYBRID_LARGE, 300_000_123):
        pool.malloc(n)
    assert small.asked == [256, 4096, cuda.size_class(odd), cuda.size_class(cuda.HYBRID_LARGE - 1)]
    assert cuda.size_class(odd) > odd
    assert large.asked == [cuda.HYBRID_LARGE, 300_000_123]  # as asked: the driver maps pages itself
    pool.free_all_blocks()
    assert small.freed == large.freed == 1
    assert pool.used_bytes() == sum(small.asked) + sum(large.asked)
    assert pool.total_bytes() == 2 * pool.used_bytes()


def test_the_setting_takes_hybrid_and_it_is_the_default():
    assert settings.from_environ({"STOKER_GPU_POOL": "hybrid"}).gpu_pool == "hybrid"
    assert settings.from_environ({}).gpu_pool == "hybrid"
    assert settings.from_environ({"STOKER_GPU_POOL": "caching"}).gpu_pool == "caching"


def _choose(monkeypatch, fake_cp, kind):
    """cuda.use_memory_pool(kind) with ``fake_cp`` as CuPy, from a fresh choice; (kind chosen,
    the allocator handed to CuPy)."""
    given = []
    fake_cp.cuda.set_allocator = given.append
    monkeypatch.setattr(cuda, "cupy", lambda: fake_cp)
    monkeypatch.setattr(cuda, "_pool_chosen", None)
    monkeypatch.setattr(cuda, "_pool_object", None)
    return cuda.use_memory_pool(kind), given


@pytest.mark.parametrize("kind", [None, "default", "hybrid"])
def test_default_and_hybrid_choose_the_hybrid_pool(monkeypatch, kind):
    small, large = _RecordingPool(), _RecordingPool()
    fake_cp = SimpleNamespace(get_default_memory_pool=lambda: small,
                              cuda=SimpleNamespace(MemoryAsyncPool=lambda: large))
    with settings.override(gpu_pool="hybrid"):
        chosen, given = _choose(monkeypatch, fake_cp, kind)
    assert chosen == "hybrid" and isinstance(cuda._pool_object, cuda.HybridPool)
    given[0](cuda.HYBRID_LARGE)
    assert large.asked == [cuda.HYBRID_LARGE]


def test_a_device_without_stream_ordered_pools_gets_the_caching_pool(monkeypatch):
    small = _RecordingPool()

    def no_async_pool():
        raise RuntimeError("cudaErrorNotSupported: operation not supported")

    fake_cp = SimpleNamespace(get_default_memory_pool=lambda: small,
                              cuda=SimpleNamespace(MemoryAsyncPool=no_async_pool))
    chosen, given = _choose(monkeypatch, fake_cp, "hybrid")
    assert chosen == "caching" and cuda._pool_object is small
    odd = (2 << 20) + 12345
    given[0](odd)
    assert small.asked == [cuda.size_class(odd)]


def test_an_unknown_pool_name_is_refused_with_the_choices(monkeypatch):
    fake_cp = SimpleNamespace(get_default_memory_pool=_RecordingPool, cuda=SimpleNamespace())
    with pytest.raises(ValueError, match="'hybrid', 'caching'"):
        _choose(monkeypatch, fake_cp, "huge")


_PIPELINE = r"""
import numpy as np
import stoker.fn as fn
import stoker.types as types
from stoker import pipeline_def
from stoker.backend import cuda

rng = np.random.default_rng(0)
batches = [[rng.integers(0, 255, (int(h), 1024, 3), dtype=np.uint8) for h in rng.integers(600, 900, 4)]
           for _ in range(6)]

@pipeline_def(batch_size=4, num_threads=2, device_id=0)
def pipe():
    x = fn.external_source(source=batches, cycle=False, layout="HWC").gpu()
    return fn.cast(x, dtype=types.FLOAT) * 0.5, fn.flip(x, horizontal=1)

p = pipe()
p.build()
for k in range(6):
    half, flipped = p.run()
    for i, src in enumerate(batches[k]):
        assert np.array_equal(half.as_cpu().at(i), src.astype(np.float32) * 0.5), (k, i)
        assert np.array_equal(flipped.as_cpu().at(i), src[:, ::-1]), (k, i)
    assert cuda._pool_chosen == "hybrid"
    assert cuda._pool_object.large.used_bytes() >= 4 * 600 * 1024 * 3 * 4  # the float batch
p.close()
print("ok")
"""


@pytest.mark.gpu
def test_pipeline_outputs_under_the_hybrid_pool(tmp_path):
    """In a fresh process (the pool is chosen once per process): a pipeline whose batches are tens
    of MB and whose tables are bytes gives the same outputs, its large buffers from the driver's pool."""
    if not cuda.cuda_available():
        pytest.skip("no GPU")
    script = tmp_path / "hybrid_pool.py"
    script.write_text(_PIPELINE)
    env = dict(os.environ, STOKER_GPU_POOL="hybrid")
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0 and "ok" in done.stdout, done.stderr[-3000:]
