"""The whole-batch crop window sampler draws exactly the windows of the per-sample one."""

import numpy as np
import pytest

from stoker.operators.random.crop_window import draws_needed, sample_crop_window, sample_crop_windows
from stoker.random_state import SampleRNG, batch_uniforms


@pytest.mark.parametrize("area,aspect,attempts", [
    ((0.08, 1.0), (3 / 4, 4 / 3), 10),
    ((0.5, 1.0), (0.4, 2.5), 10),    # many windows found at the 2nd-10th attempt (the later stages)
    ((0.5, 1.0), (0.4, 2.5), 2),
    ((0.5, 0.9), (0.2, 5.0), 3),
    ((0.99, 1.0), (1.0, 1.0), 1),   # few hits: exercises the fallback window
    ((0.3, 0.4), (2.0, 3.0), 0),     # no attempts at all
])
def test_batch_windows_equal_per_sample_windows(area, aspect, attempts):
    rng = np.random.default_rng(5)
    n = 400
    H = np.concatenate([rng.integers(1, 900, n - 6), [1, 1, 2000, 3, 500, 333]])
    W = np.concatenate([rng.integers(1, 900, n - 6), [1, 2000, 1, 500, 3, 333]])
    seed, it = 987, 42
    u = batch_uniforms(seed, it, np.arange(n), draws_needed(attempts))
    got = sample_crop_windows(u, H, W, area, aspect, attempts)
    want = [sample_crop_window(SampleRNG(seed, it, i), int(h), int(w), area, aspect, attempts)
            for i, (h, w) in enumerate(zip(H, W))]
    assert [tuple(r) for r in got.tolist()] == want


def test_batch_windows_reject_bad_ranges():
    u = np.zeros((1, draws_needed(2)))
    with pytest.raises(ValueError, match="empty range"):
        sample_crop_windows(u, [10], [10], (0.9, 0.1), (1, 1), 2)
    with pytest.raises(ValueError, match="uniforms"):
        sample_crop_windows(np.zeros((1, 3)), [10], [10], num_attempts=5)
