"""gaussian_blur against DALI's CPU operator, and kernel rules."""

import numpy as np
import pytest
from generated_images import small_images
from oracle import Case, case_params, check_operator, run_op

from stoker import types
from stoker.errors import OperatorError, PipelineBuildError
from stoker.operators.filters.gaussian_blur import gaussian_kernel, kernel_params

IM = small_images()
RGB_GRAY_NOISE = [IM["rgb"], IM["gray"], IM["noise"]]
# same kernel and border, float32 sums in another order: a rounding tie may land one apart
UINT8_TOL = (0.01, 1)
KWARGS = [dict(sigma=1.5), dict(sigma=0.7), dict(window_size=5), dict(sigma=2.0, window_size=7),
          dict(sigma=3.0), dict(sigma=(1.0, 2.5)), dict(window_size=(3, 9)), dict(sigma=1.2, dtype=types.FLOAT)]
FRAMES = np.stack([IM["noise"], IM["noise"][::-1]])
VOLUME = np.random.default_rng(3).integers(0, 256, (9, 11, 13, 2), np.uint8)
CASES = [
    *[Case(RGB_GRAY_NOISE, kw, tol=(1e-3, 1e-3) if "dtype" in kw else UINT8_TOL) for kw in KWARGS],
    *[Case([IM["rgb_f"], IM["gray_f"]], kw, tol=(1e-6, 1e-5), id=f"float-{kw}")
      for kw in (dict(sigma=1.2), dict(window_size=7))],
    Case([np.ascontiguousarray(IM["rgb"].transpose(2, 0, 1))], dict(sigma=1.3), layout="CHW", tol=UINT8_TOL, id="CHW"),
    Case([FRAMES], dict(sigma=(0.8, 1.6)), layout="FHWC", tol=UINT8_TOL, id="FHWC"),
    Case([VOLUME], dict(sigma=1.0), layout="DHWC", tol=UINT8_TOL, id="DHWC"),
    Case([IM["gray"][:, :, 0]], dict(window_size=5), layout="HW", tol=UINT8_TOL, id="HW"),
    Case([IM["rgb"], IM["noise"], IM["gray"]], per_sample={"sigma": [np.float32(v) for v in (0.5, 1.5, 2.5)]},
         tol=UINT8_TOL),
]


@pytest.mark.oracle
@pytest.mark.parametrize("case, check", case_params(CASES))
def test_gaussian_blur_check_operator(case, check):
    """DALI (uint8 and float inputs, layouts, per-sample sigma), 1 thread vs 4, pipeline vs eager."""
    check_operator("gaussian_blur", case, [check])


def test_kernel_rules():
    assert kernel_params(1.5, 0) == (1.5, 11)
    sigma, window = kernel_params(0.0, 7)
    assert window == 7 and sigma == pytest.approx(1.4)
    k = gaussian_kernel(2.0, 13)
    assert k.sum() == pytest.approx(1.0) and np.allclose(k, k[::-1]) and k.argmax() == 6


def test_constant_image_stays_constant():
    x = np.full((20, 30, 3), 77, np.uint8)
    np.testing.assert_array_equal(run_op("stoker", "gaussian_blur", [x], sigma=2.0)[0], x)


def test_errors(images):
    with pytest.raises(PipelineBuildError, match="gaussian_blur.*'sigma'"):
        run_op("stoker", "gaussian_blur", [images["rgb"]])
    with pytest.raises(PipelineBuildError, match="gaussian_blur.*'window_size'.*odd"):
        run_op("stoker", "gaussian_blur", [images["rgb"]], window_size=4)
    with pytest.raises(PipelineBuildError, match="gaussian_blur.*'dtype'"):
        run_op("stoker", "gaussian_blur", [images["rgb"]], sigma=1.0, dtype=types.INT16)
    with pytest.raises(OperatorError, match="(?s)gaussian_blur.*'sigma'.*1 or 2 values"):
        run_op("stoker", "gaussian_blur", [images["rgb"]], sigma=(1.0, 2.0, 3.0))
