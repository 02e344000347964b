"""GPU memory: ReleaseUnusedMemory hands the pools' cached blocks back once the batches are gone,
and the pool's size classes let batches of varying size reuse blocks."""

import gc

import numpy as np
import pytest

import stoker.fn as fn
from stoker import pipeline_def
from stoker.backend import ReleaseUnusedMemory

pytestmark = pytest.mark.gpu


def test_release_unused_memory_empties_the_cache_but_keeps_live_arrays(cp, rng):
    sizes = [int(s) for s in rng.integers(200_000, 2_000_000, 12)]  # varied 2-D batches, as decodes are
    batches = [[rng.integers(0, 255, (s // 1000, 1000), dtype=np.uint8) for _ in range(4)] for s in sizes]

    @pipeline_def(batch_size=4, num_threads=2, device_id=0)
    def pipe():
        return fn.external_source(source=batches, cycle=False).gpu()

    p = pipe()
    p.build()
    kept = None
    for _ in range(len(batches)):
        kept, = p.run()
    del p
    gc.collect()
    cp.cuda.runtime.deviceSynchronize()
    pool = cp.get_default_memory_pool()
    cached = pool.total_bytes() - pool.used_bytes()
    assert cached > 0  # the earlier batches' blocks stay cached for reuse
    free_before, _ = cp.cuda.runtime.memGetInfo()
    ReleaseUnusedMemory()
    free_after, _ = cp.cuda.runtime.memGetInfo()
    # (a block split off a chunk that still holds a live array cannot go back)
    assert pool.total_bytes() - pool.used_bytes() < cached / 2 and pool.used_bytes() > 0
    assert free_after > free_before
    for got, src in zip(kept.as_cpu().samples(), batches[-1]):  # the live output is intact
        np.testing.assert_array_equal(got, src)
