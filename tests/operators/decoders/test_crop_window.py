"""sample_crop_window: the shared random crop-window sampler (properties and fallbacks)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stoker.operators.random.crop_window import sample_crop_window


def _rng(seed=0):
    return np.random.default_rng(seed)


@settings(max_examples=200, deadline=None)
@given(h=st.integers(1, 400), w=st.integers(1, 400), a_lo=st.floats(0.01, 1.0), a_span=st.floats(0, 1.0),
       r_lo=st.floats(0.2, 3.0), r_span=st.floats(0, 3.0), attempts=st.integers(1, 20), seed=st.integers(0, 2**32))
def test_window_always_inside_image(h, w, a_lo, a_span, r_lo, r_span, attempts, seed):
    area = (a_lo, min(1.0, a_lo + a_span))
    ratio = (r_lo, r_lo + r_span)
    y, x, ch, cw = sample_crop_window(_rng(seed), h, w, area, ratio, attempts)
    assert 1 <= ch <= h and 1 <= cw <= w
    assert 0 <= y <= h - ch and 0 <= x <= w - cw


@settings(max_examples=100, deadline=None)
@given(h=st.integers(50, 1000), w=st.integers(50, 1000), seed=st.integers(0, 2**32))
def test_accepted_windows_respect_ranges(h, w, seed):
    """With the default ranges on images that are not extreme, attempts succeed: check the ranges."""
    if not 0.75 <= w / h <= 4 / 3:
        return
    rng = _rng(seed)
    for _ in range(20):
        y, x, ch, cw = sample_crop_window(rng, h, w, num_attempts=100)
        assert 3 / 4 - 1e-9 <= cw / ch <= 4 / 3 + 1e-9
        # rounding each side moves the area by at most about one row and one column
        assert ch * cw <= h * w and (ch + 1) * (cw + 1) >= 0.08 * h * w


def test_same_generator_state_same_window():
    a = [sample_crop_window(_rng(5), 300, 400) for _ in range(3)]
    assert a[0] == a[1] == a[2]
    rng = _rng(5)
    seq = [sample_crop_window(rng, 300, 400) for _ in range(20)]
    assert len(set(seq)) > 15


def test_too_wide_image_takes_full_height_with_max_aspect():
    y, x, h, w = sample_crop_window(_rng(), 10, 1000)
    assert (h, w) == (10, 13) and y == 0  # w = int(10 * 4/3)


def test_too_tall_image_takes_full_width_with_min_aspect():
    y, x, h, w = sample_crop_window(_rng(), 1000, 10)
    assert (h, w) == (13, 10) and x == 0  # h = int(10 / (3/4))


def test_failed_attempts_fall_back_to_largest_allowed_window():
    # A square of at least 99% of a 10x20 image cannot fit: every attempt fails.
    y, x, h, w = sample_crop_window(_rng(), 10, 20, area=(0.99, 1.0), aspect_ratio=(1.0, 1.0))
    assert (h, w) == (10, 10)
    # The fallback is shrunk to the largest allowed area, keeping its aspect ratio.
    y, x, h, w = sample_crop_window(_rng(), 100, 100, area=(0.25, 0.25), aspect_ratio=(1.0, 1.0), num_attempts=0)
    assert (h, w) == (50, 50)


def test_aspect_ratio_is_log_uniform():
    rng = _rng(1)
    logs = []
    for _ in range(3000):
        _, _, h, w = sample_crop_window(rng, 1000, 1000, area=(0.1, 0.1), aspect_ratio=(0.25, 4.0))
        logs.append(math.log(w / h))
    logs = np.array(logs)
    assert abs(logs.mean()) < 0.06  # symmetric around 1 on a log scale
    hist, _ = np.histogram(logs, bins=4, range=(math.log(0.25), math.log(4.0)))
    assert hist.min() > 0.8 * hist.max()  # flat in log space


def test_empty_image_and_bad_ranges():
    assert sample_crop_window(_rng(), 0, 5) == (0, 0, 0, 5)
    with pytest.raises(ValueError):
        sample_crop_window(_rng(), 5, 5, area=(0.5, 0.1))
    with pytest.raises(ValueError):
        sample_crop_window(_rng(), 5, 5, aspect_ratio=(0.0, 1.0))
