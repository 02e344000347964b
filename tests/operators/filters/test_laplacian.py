"""laplacian against DALI's CPU operator and OpenCV."""

import cv2
import numpy as np
import pytest
from dali_oracle import compare_op, run_op

from stoker import types
from stoker.errors import PipelineBuildError

CASES = [dict(), dict(window_size=5), dict(window_size=5, smoothing_size=1), dict(window_size=3, smoothing_size=7),
         dict(window_size=7), dict(window_size=5, normalized_kernel=True), dict(scale=(0.5, 2.0)),
         dict(window_size=(3, 5), smoothing_size=(5, 3))]


@pytest.mark.oracle
@pytest.mark.parametrize("kwargs", CASES, ids=str)
def test_float_output_matches_dali(kwargs, images):
    # integer kernels, float32 sums: equal up to float32 rounding of large sums
    compare_op("laplacian", [images["rgb"], images["gray"], images["noise"]], 1e-4, 1e-2, dtype=types.FLOAT, **kwargs)


@pytest.mark.oracle
@pytest.mark.parametrize("kwargs", [dict(), dict(window_size=5, normalized_kernel=True)], ids=str)
def test_uint8_and_float_inputs_match_dali(kwargs, images):
    compare_op("laplacian", [images["rgb"], images["noise"]], 0.0, 0, **kwargs)  # saturating uint8
    compare_op("laplacian", [images["rgb_f"], images["gray_f"]], 1e-6, 1e-5, **kwargs)


@pytest.mark.oracle
def test_volume_and_per_sample_match_dali(images):
    vol = np.random.default_rng(4).integers(0, 256, (7, 9, 11, 1), np.uint8)
    compare_op("laplacian", [vol], 1e-4, 1e-2, layout="DHWC", dtype=types.FLOAT, window_size=(3, 5, 3))
    batch = [images["rgb"], images["noise"]]
    compare_op("laplacian", batch, 1e-4, 1e-2, dtype=types.FLOAT,
            per_sample={"window_size": [np.int32(3), np.int32(5)]})


def test_matches_opencv_laplacian(images):
    x = images["rgb"].astype(np.float32)
    for k in (3, 5):
        ours = run_op("stoker", "laplacian", [x], window_size=k)[0]
        np.testing.assert_allclose(ours, cv2.Laplacian(x, cv2.CV_32F, ksize=k), atol=1e-2)


def test_errors(images):
    with pytest.raises(PipelineBuildError, match="laplacian.*'window_size'.*odd"):
        run_op("stoker", "laplacian", [images["rgb"]], window_size=4)
    with pytest.raises(PipelineBuildError, match="laplacian.*'scale'.*normalized_kernel"):
        run_op("stoker", "laplacian", [images["rgb"]], scale=2.0, normalized_kernel=True)
    with pytest.raises(PipelineBuildError, match="laplacian.*'smoothing_size'"):
        run_op("stoker", "laplacian", [images["rgb"]], smoothing_size=25)


def test_empty_samples_give_empty_outputs(images):
    """An image of no rows (or no columns) has nothing to filter: its output is empty, of the output
    type, and the other samples are filtered as usual (OpenCV alone refuses an empty image)."""
    batch = [np.zeros((0, 7, 3), np.uint8), images["rgb"], np.zeros((5, 0), np.uint8)[..., None].repeat(3, 2)]
    out = run_op("stoker", "laplacian", batch, dtype=types.FLOAT)
    assert out[0].shape == (0, 7, 3) and out[2].shape == (5, 0, 3)
    assert out[0].dtype == out[2].dtype == np.float32
    np.testing.assert_array_equal(out[1], run_op("stoker", "laplacian", [images["rgb"]], dtype=types.FLOAT)[0])
