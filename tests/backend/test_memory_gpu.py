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
    p.close()
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


_TORCH_POOL_SCRIPT = """
import gc, sys
import numpy as np, torch
import stoker.fn as fn
from stoker import pipeline_def
from stoker.backend import ReleaseUnusedMemory

data = [[np.full((256, 1024, 3), k + j, np.uint8) for j in range(4)] for k in range(6)]

@pipeline_def(batch_size=4, num_threads=2, device_id=0)
def pipe():
    return fn.crop_mirror_normalize(fn.external_source(source=data, cycle=False, layout="HWC").gpu(),
                                    output_layout="CHW", std=[2.0])

p = pipe()
p.build()
before = torch.cuda.memory_allocated()
for k in range(6):
    (out,) = p.run()
    got = torch.from_dlpack(out.as_tensor())
    want = torch.arange(k, k + 4, device="cuda", dtype=torch.float32)[:, None, None, None] / 2
    assert torch.equal(got, want.expand(4, 3, 256, 1024)), k
    assert torch.cuda.memory_allocated() - before >= got.numel() * 4  # served by torch's allocator
p.close()
del p, out, got
gc.collect()
torch.cuda.synchronize()
reserved = torch.cuda.memory_reserved()
ReleaseUnusedMemory()
assert torch.cuda.memory_reserved() < reserved, (reserved, torch.cuda.memory_reserved())
print("ok")
"""


def test_torch_pool_serves_the_pipeline_and_releases(tmp_path):
    """STOKER_GPU_POOL=torch: stoker's device arrays come from PyTorch's caching allocator (one
    pool for both frameworks); outputs are right, and ReleaseUnusedMemory empties torch's cache.
    In a fresh process: the pool is chosen once per process."""
    import os
    import subprocess
    import sys

    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch without CUDA")
    script = tmp_path / "torch_pool.py"
    script.write_text(_TORCH_POOL_SCRIPT)
    env = dict(os.environ, STOKER_GPU_POOL="torch")
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "ok" in done.stdout, done.stderr[-3000:]
