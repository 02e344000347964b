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
