"""crop / flip copy whole pixels in the widest words that fit (gpu_crop_flip.launch_crop_flip): 4 or
2 bytes where the pixel size and every pointer and row stride allow it, else bytes. Which kernel
runs is checked on the null device; the values, for every pixel size, against the CPU on a GPU."""

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
import null_device  # noqa: E402
from gpu_pipelines import run_pipeline  # noqa: E402

import stoker.fn as fn  # noqa: E402

CASES = {  # (dtype, channels, width parity) -> the kernel that copies its pixels
    "uint8 RGB, odd width": (np.uint8, 3, 1, "crop_flip"),
    "uint8 RGBA": (np.uint8, 4, 1, "crop_flip_w4"),
    "uint16 RGB": (np.uint16, 3, 1, "crop_flip_w2"),
    "int16 gray, odd width": (np.int16, 1, 1, "crop_flip_w2"),
    "float32 RGB": (np.float32, 3, 1, "crop_flip_w4"),
    "uint8 gray pairs": (np.uint8, 2, 0, "crop_flip_w2"),
}


def _batch(dtype, channels, parity, n=5):
    rng = np.random.default_rng(channels)
    sizes = rng.integers(12, 30, (n, 2))
    sizes[:, 1] = sizes[:, 1] // 2 * 2 + parity
    return [rng.integers(0, 200, (int(h), int(w), channels)).astype(dtype) for h, w in sizes]


def _build(x):
    x = fn.crop(x, crop=(9, 11), crop_pos_x=0.3, crop_pos_y=fn.random.uniform(range=(0.0, 1.0)),
                out_of_bounds_policy="pad")
    return fn.flip(x, horizontal=fn.random.coin_flip(), vertical=1)


@pytest.mark.parametrize("case", CASES)
def test_the_widest_word_that_fits_is_chosen(case):
    dtype, channels, parity, kernel = CASES[case]
    with null_device.installed():
        null_device.LAUNCHES.clear()
        run_pipeline(_build, [_batch(dtype, channels, parity)], True)
        names = {name for name, _, _ in null_device.LAUNCHES if name.startswith("crop_flip")}
    assert names == {kernel}


@pytest.mark.gpu
@pytest.mark.parametrize("case", CASES)
def test_crop_and_flip_of_every_pixel_size_equal_the_cpu(case):
    dtype, channels, parity, _ = CASES[case]
    batch = _batch(dtype, channels, parity)
    (got, _), = run_pipeline(_build, [batch], True)
    (want, _), = run_pipeline(_build, [batch], False)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g, w)
