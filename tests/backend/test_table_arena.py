"""The pinned ring for small per-batch tables (``cuda.TableArena``), on the null device."""

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import null_device  # noqa: E402


class _Event:
    """An event that counts how often the host waited for it."""

    waits = 0

    def record(self, stream=None):
        pass

    def synchronize(self):
        _Event.waits += 1


def test_uploads_land_and_the_ring_waits_only_when_it_comes_round():
    with null_device.installed() as cp:
        from stoker.backend.cuda import TableArena

        cp.cuda.Event = lambda **kw: _Event()
        _Event.waits = 0
        arena = TableArena(size=4096)  # 16 slots of 256 bytes
        stream = cp.cuda.Stream()
        rng = np.random.default_rng(0)
        tables = [rng.integers(0, 1 << 30, (int(rng.integers(1, 60)),), np.int32) for _ in range(40)]
        outs = []
        for k, t in enumerate(tables):
            outs.append(arena.upload(t, stream))
            if k < 10:
                assert _Event.waits == 0, "the host waited before the ring came round"
        for t, o in zip(tables, outs):  # (the null device's copies happen at once)
            np.testing.assert_array_equal(o.get(), t)
        assert 0 < _Event.waits < 40
        assert arena.upload(np.zeros(0, np.int64), stream).size == 0


def test_a_table_larger_than_the_ring_allows_is_refused():
    with null_device.installed() as cp:
        from stoker.backend.cuda import TableArena

        arena = TableArena(size=4096)
        with pytest.raises(ValueError, match="too large"):
            arena.upload(np.zeros(4096, np.uint8), cp.cuda.Stream())


def test_tables_share_device_chunks_per_stream_without_overlapping():
    with null_device.installed() as cp:
        from stoker.backend.cuda import TableArena

        arena = TableArena()
        streams = [cp.cuda.Stream(), cp.cuda.Stream()]
        rng = np.random.default_rng(1)
        tables = [rng.integers(0, 1 << 30, (int(rng.integers(1, 3000)),), np.int64) for _ in range(200)]
        outs = [arena.upload(t, streams[k % 2]) for k, t in enumerate(tables)]
        for t, o in zip(tables, outs):  # no table was written over by a later one
            np.testing.assert_array_equal(o.get(), t)
            assert o.shape == t.shape and o.dtype == t.dtype
        chunks = [{id(o.data.mem) for o in outs[s::2]} for s in (0, 1)]
        # ~2.4 MB of tables per stream in 1 MiB chunks: a few allocations, not one per table
        assert all(2 <= len(c) <= 4 for c in chunks), [len(c) for c in chunks]
        assert not chunks[0] & chunks[1], "two streams' tables shared a chunk"
        big = arena.upload(np.zeros((TableArena.CHUNK // 4 + 8) // 8, np.int64), streams[0])
        assert big.data.mem.nbytes == big.nbytes  # (a large table has its own allocation)
