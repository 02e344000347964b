"""laplacian against DALI's CPU operator and OpenCV."""

import cv2
import numpy as np
import pytest
from generated_images import small_images
from oracle import Case, case_params, check_operator, run_op

from stoker import types
from stoker.errors import PipelineBuildError

IM = small_images()
# integer kernels, float32 sums: equal up to float32 rounding of large sums
FLOAT_OUT_TOL = (1e-4, 1e-2)
KWARGS = [dict(), dict(window_size=5), dict(window_size=5, smoothing_size=1), dict(window_size=3, smoothing_size=7),
          dict(window_size=7), dict(window_size=5, normalized_kernel=True), dict(scale=(0.5, 2.0)),
          dict(window_size=(3, 5), smoothing_size=(5, 3))]
SAME_TYPE_KWARGS = [dict(), dict(window_size=5, normalized_kernel=True)]
CASES = [
    *[Case([IM["rgb"], IM["gray"], IM["noise"]], dict(dtype=types.FLOAT, **kw), tol=FLOAT_OUT_TOL) for kw in KWARGS],
    *[Case([IM["rgb"], IM["noise"]], kw, tol=0, id=f"uint8-{kw}") for kw in SAME_TYPE_KWARGS],  # saturating
    *[Case([IM["rgb_f"], IM["gray_f"]], kw, tol=(1e-6, 1e-5), id=f"float-{kw}") for kw in SAME_TYPE_KWARGS],
    Case([np.random.default_rng(4).integers(0, 256, (7, 9, 11, 1), np.uint8)],
         dict(dtype=types.FLOAT, window_size=(3, 5, 3)), layout="DHWC", tol=FLOAT_OUT_TOL, id="DHWC"),
    Case([IM["rgb"], IM["noise"]], dict(dtype=types.FLOAT), per_sample={"window_size": [np.int32(3), np.int32(5)]},
         tol=FLOAT_OUT_TOL),
]


@pytest.mark.oracle
@pytest.mark.parametrize("case, check", case_params(CASES))
def test_laplacian_check_operator(case, check):
    """DALI (float and same-type outputs, volumes, per-sample window), 1 thread vs 4, pipeline vs eager."""
    check_operator("laplacian", case, [check])


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
