"""The GPU pool's size classes (stoker.backend.cuda.size_class): large requests are rounded up
to one of eight sizes per power of two, so that batches of slightly different sizes reuse the
same pooled blocks. Pure arithmetic: runs without a GPU."""

import numpy as np

from stoker.backend.cuda import size_class


def test_small_requests_are_left_alone():
    for n in (0, 1, 511, 4096, 1 << 20):
        assert size_class(n) == n


def test_large_requests_round_up_by_at_most_an_eighth():
    rng = np.random.default_rng(0)
    for n in rng.integers((1 << 20) + 1, 1 << 34, 2000).tolist():
        c = size_class(n)
        assert n <= c <= n * 1.125
        assert size_class(c) == c  # a class is its own class


def test_varying_batch_sizes_fall_into_few_classes():
    rng = np.random.default_rng(1)
    sizes = rng.normal(175e6, 8e6, 500).astype(np.int64)  # a full-size decode batch's buffer, batch after batch
    assert len(set(sizes.tolist())) == 500
    assert len({size_class(n) for n in sizes.tolist()}) <= 4
