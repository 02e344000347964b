"""permute_batch and batch_permutation: DALI's results and the permutation properties."""

import numpy as np
import pytest
from oracle import check, run_graph

from stoker.errors import StokerError
from stoker.operators.tensor.batch import draw_permutation

SAMPLES = [np.full((i + 1, 2), i, np.int32) for i in range(6)]


@pytest.mark.oracle
@pytest.mark.parametrize("indices", [[5, 4, 3, 2, 1, 0], [0, 0, 1, 1, 5, 5], [2, 2, 2, 2, 2, 2]])
def test_permute_batch_static_indices_match_dali(indices):
    check(lambda fn, t, x: fn.permute_batch(x, indices=indices), SAMPLES, layouts=["HW"])


@pytest.mark.oracle
def test_permute_batch_tensor_indices_match_dali():
    idx = [np.int32(v) for v in (3, 1, 4, 1, 5, 0)]
    check(lambda fn, t, x, i: fn.permute_batch(x, indices=i), SAMPLES, idx, layouts=["HW", None])


def test_permute_batch_out_of_range_names_the_argument():
    with pytest.raises(StokerError, match="'indices'.*out of range"):
        run_graph("stoker", lambda fn, t, x: fn.permute_batch(x, indices=[0, 1, 2, 3, 4, 9]), SAMPLES)


@pytest.mark.parametrize("repeat,no_fixed", [(False, False), (False, True), (True, False), (True, True)])
def test_batch_permutation_properties(repeat, no_fixed):
    def build(fn, t, x):
        perm = fn.batch_permutation(allow_repetitions=repeat, no_fixed_points=no_fixed)
        return perm, fn.permute_batch(x, indices=perm)

    (perm, _), (permuted, _) = run_graph("stoker", build, SAMPLES)
    p = np.array([int(v) for v in perm])
    assert all(v.dtype == np.int32 and v.shape == () for v in perm)
    assert p.min() >= 0 and p.max() < len(SAMPLES)
    if not repeat:
        assert sorted(p) == list(range(len(SAMPLES)))
    if no_fixed:
        assert not np.any(p == np.arange(len(SAMPLES)))
    for out, src in zip(permuted, p):
        np.testing.assert_array_equal(out, SAMPLES[src])


def test_derangements_are_spread_out():
    rng = np.random.default_rng(0)
    seen = {tuple(draw_permutation(rng, 4, False, True)) for _ in range(400)}
    assert len(seen) == 9  # all derangements of 4 elements appear
    assert tuple(draw_permutation(rng, 1, False, True)) == (0,)
