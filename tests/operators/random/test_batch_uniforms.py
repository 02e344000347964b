"""The whole-batch draws equal each sample's own stream, value for value, and wrap around silently."""

import warnings

import numpy as np
import pytest

from stoker.random_state import SampleRNG, batch_keys, batch_uniforms, key_uniforms


@pytest.mark.parametrize("seed,iteration", [(0, 0), (2**63 - 1, 2**64 - 1), (123, 7)])
def test_batch_uniforms_equal_the_sample_streams(seed, iteration):
    samples = np.array([0, 1, 2**40, 2**63 + 5], np.uint64)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # (uint64 wrap-around is the hash, not an overflow to report)
        u = batch_uniforms(seed, iteration, samples, 3)
        keyed = key_uniforms(batch_keys(seed, iteration, samples), 0, 3)
    for row, i in enumerate(samples.tolist()):
        rng = SampleRNG(seed, iteration, i)
        assert u[row].tolist() == [rng.random() for _ in range(3)]
    np.testing.assert_array_equal(keyed, u)
