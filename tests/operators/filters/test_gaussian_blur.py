"""gaussian_blur against DALI's CPU operator, and kernel rules."""

import numpy as np
import pytest
from dali_oracle import compare_op, run_op

from stoker import types
from stoker.errors import OperatorError, PipelineBuildError
from stoker.operators.filters.gaussian_blur import gaussian_kernel, kernel_params

CASES = [dict(sigma=1.5), dict(sigma=0.7), dict(window_size=5), dict(sigma=2.0, window_size=7),
         dict(sigma=3.0), dict(sigma=(1.0, 2.5)), dict(window_size=(3, 9)), dict(sigma=1.2, dtype=types.FLOAT)]


@pytest.mark.oracle
@pytest.mark.parametrize("kwargs", CASES, ids=str)
def test_uint8_matches_dali(kwargs, images):
    # same kernel and border, float32 sums in another order: a rounding tie may land one apart
    tol = (1e-3, 1e-3) if "dtype" in kwargs else (0.01, 1)
    compare_op("gaussian_blur", [images["rgb"], images["gray"], images["noise"]], *tol, **kwargs)


@pytest.mark.oracle
@pytest.mark.parametrize("kwargs", [dict(sigma=1.2), dict(window_size=7)], ids=str)
def test_float_matches_dali(kwargs, images):
    compare_op("gaussian_blur", [images["rgb_f"], images["gray_f"]], 1e-6, 1e-5, **kwargs)


@pytest.mark.oracle
def test_layouts_match_dali(images):
    chw = np.ascontiguousarray(images["rgb"].transpose(2, 0, 1))
    compare_op("gaussian_blur", [chw], 0.01, 1, layout="CHW", sigma=1.3)
    frames = np.stack([images["noise"], images["noise"][::-1]])
    compare_op("gaussian_blur", [frames], 0.01, 1, layout="FHWC", sigma=(0.8, 1.6))
    vol = np.random.default_rng(3).integers(0, 256, (9, 11, 13, 2), np.uint8)
    compare_op("gaussian_blur", [vol], 0.01, 1, layout="DHWC", sigma=1.0)
    compare_op("gaussian_blur", [images["gray"][:, :, 0]], 0.01, 1, layout="HW", window_size=5)


@pytest.mark.oracle
def test_per_sample_arguments_match_dali(images):
    batch = [images["rgb"], images["noise"], images["gray"]]
    compare_op("gaussian_blur", batch, 0.01, 1, per_sample={"sigma": [np.float32(v) for v in (0.5, 1.5, 2.5)]})


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
