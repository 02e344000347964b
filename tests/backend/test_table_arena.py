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


def test_one_event_guards_many_tables_and_the_ring_never_overtakes_an_unguarded_copy():
    """Events are recorded at seal(), per stream, every SEAL_EVERY uploads, and before the ring
    comes round; a table's bytes are written again only after waiting for an event recorded after
    its copy."""
    with null_device.installed() as cp:
        from stoker.backend.cuda import TableArena

        made = []

        class Counted(_Event):
            def __init__(self):
                self.recorded_after = None
                made.append(self)

            def record(self, stream=None):
                self.recorded_after = copies[0]

        copies = [0]
        real_copy = cp.cuda.runtime.memcpyAsync

        def copy(*args):
            copies[0] += 1
            return real_copy(*args)

        cp.cuda.runtime.memcpyAsync = copy
        cp.cuda.Event = lambda **kw: Counted()
        arena = TableArena(size=1 << 20)
        s1, s2 = cp.cuda.Stream(), cp.cuda.Stream()
        for _ in range(10):
            arena.upload(np.ones(8, np.int32), s1)
        assert made == []  # no event per table
        arena.upload(np.ones(8, np.int32), s2)
        arena.seal()
        assert len(made) == 2 and all(e.recorded_after == 11 for e in made)  # one per stream, after the copies
        arena.seal()
        assert len(made) == 2  # nothing new to guard
        for _ in range(TableArena.SEAL_EVERY):
            arena.upload(np.ones(8, np.int32), s1)
        assert len(made) == 3  # sealed on its own after SEAL_EVERY uploads

        small = TableArena(size=4096)  # 16 slots of 256 bytes: comes round after 16 tables
        made.clear()
        waited_for = []
        Counted.synchronize = lambda self: waited_for.append(self.recorded_after)
        before = copies[0]
        for _ in range(20):
            small.upload(np.ones(8, np.int32), s1)
        assert made and waited_for, "the ring came round without waiting"
        assert min(waited_for) >= before + 1  # each wait is on an event recorded after a copy of the ring
