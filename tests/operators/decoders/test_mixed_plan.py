"""The hardware path's plan (stoker.operators.decoders.mixed.plan): which sample decodes where and
where its pixels land in the batch's flat buffer. Pure NumPy, so it runs without a GPU."""

import dataclasses

import numpy as np
import pytest

from stoker.operators.decoders.mixed.plan import (
    MAX_AUTO_SHARE,
    DecodePlan,
    helper_candidates,
    plan_batch,
    steer_share,
)


def _batch(sizes, wins=None):
    sizes = np.asarray(sizes, np.int64).reshape(-1, 2)
    if wins is None:  # whole images
        wins = [(0, 0, h, w) if h else None for h, w in sizes.tolist()]
    win_arr = np.array([w or (0, 0, 0, 0) for w in wins], np.int64).reshape(-1, 4)
    return sizes, win_arr, wins


def _check_layout(plan: DecodePlan):
    """Slots lie back to back: the engines' samples first, then the host's, in list order."""
    nbytes = plan.shapes.prod(axis=1)
    order = plan.engines + plan.host
    assert sorted(order) == list(range(plan.n))
    np.testing.assert_array_equal(plan.offsets[order], np.concatenate([[0], np.cumsum(nbytes[order])[:-1]]))
    assert plan.cpu_start == int(nbytes[plan.engines].sum())
    assert plan.cpu_total == int(nbytes[plan.host].sum())
    assert plan.total == int(nbytes.sum()) == plan.cpu_start + plan.cpu_total


def test_engines_first_then_the_host_in_batch_order():
    sizes, win_arr, wins = _batch([[4, 6], [2, 2], [8, 3], [5, 5]])
    plan = plan_batch(sizes, win_arr, wins, eligible=[0, 2], cpu_share=0.0)
    assert (plan.engines, plan.moved, plan.host) == ([0, 2], [], [1, 3])
    assert (plan.helpers, plan.pool) == ([], [1, 3])  # until with_helpers: all on the pool
    np.testing.assert_array_equal(plan.shapes, [[4, 6, 3], [2, 2, 3], [8, 3, 3], [5, 5, 3]])
    _check_layout(plan)
    assert plan.offsets.tolist() == [0, 72 + 72, 72, 72 + 72 + 12]


def test_windows_set_the_shapes_and_unknown_sizes_get_no_slot():
    sizes, win_arr, wins = _batch([[40, 60], [0, 0], [30, 30]], [(1, 2, 10, 20), None, (0, 0, 30, 30)])
    plan = plan_batch(sizes, win_arr, wins, eligible=[0, 2], cpu_share=0.0)
    np.testing.assert_array_equal(plan.shapes, [[10, 20, 3], [0, 0, 0], [30, 30, 3]])
    assert plan.host == [1] and plan.cpu_total == 0  # decoded on the host, outside the flat layout
    _check_layout(plan)


def test_the_share_moves_the_cheapest_windows_to_the_end_of_the_host_region():
    sizes, win_arr, wins = _batch([[400, 600]] * 4 + [[0, 0]],
                                  [(200, 0, 200, 600), (0, 0, 40, 60), (0, 0, 400, 600), (10, 10, 100, 100), None])
    plan = plan_batch(sizes, win_arr, wins, eligible=[0, 1, 2, 3], cpu_share=0.5)
    assert plan.moved == [1, 3]  # small windows near the top: cheapest on the host
    assert (plan.engines, plan.host) == ([0, 2], [4, 1, 3])
    _check_layout(plan)


@pytest.mark.parametrize("share, moved", [(0.0, 0), (0.1, 0), (0.3, 1), (1.0, 3)])
def test_the_share_rounds_to_whole_images(share, moved):
    sizes, win_arr, wins = _batch([[8, 8]] * 3)
    plan = plan_batch(sizes, win_arr, wins, eligible=[0, 1, 2], cpu_share=share)
    assert len(plan.moved) == moved and len(plan.engines) == 3 - moved
    _check_layout(plan)


def test_an_empty_batch_plans_nothing():
    sizes, win_arr, wins = _batch(np.zeros((0, 2)))
    plan = plan_batch(sizes, win_arr, wins, eligible=[], cpu_share=0.3)
    assert (plan.n, plan.engines, plan.host, plan.total) == (0, [], [], 0)


def test_helpers_take_the_moved_share_and_suitable_windows_the_pool_the_rest():
    sizes, win_arr, wins = _batch([[8, 8], [8, 8], [0, 0], [8, 8], [8, 8]],
                                  [(0, 0, 8, 8), (0, 0, 2, 2), None, (0, 0, 8, 8), (0, 0, 4, 4)])
    plan = plan_batch(sizes, win_arr, wins, eligible=[0, 1], cpu_share=0.5)
    assert plan.moved == [1] and plan.host == [2, 3, 4, 1]
    suitable = {3}  # (say, sample 3 is a progressive JPEG, 4 an EXIF-rotated one)
    helpers = helper_candidates(plan, wins, suitable.__contains__)
    assert helpers == [3, 1]  # sample 2 has no window (size unknown): the pool
    split = plan.with_helpers(helpers)
    assert (split.helpers, split.pool) == ([3, 1], [2, 4])
    assert plan.pool == [2, 3, 4, 1]  # the plan it came from is unchanged
    assert split.with_helpers([1]).pool == [2, 3, 4]  # a helper's failure goes back to the pool
    with pytest.raises(dataclasses.FrozenInstanceError):
        split.helpers = []


def test_the_automatic_share_steers_by_the_waits():
    assert steer_share(0.1, engines_wait=5e-3, helpers_wait=2e-3) == pytest.approx(0.08)  # helpers win
    assert steer_share(0.01, 0.0, 2e-3) == 0.0
    assert steer_share(0.1, 5e-3, 0.0) == pytest.approx(0.11)
    assert steer_share(MAX_AUTO_SHARE, 5e-3, 0.0) == MAX_AUTO_SHARE
    assert steer_share(0.2, 0.5e-3, 0.4e-3) == 0.2  # nobody waited long: it stays
