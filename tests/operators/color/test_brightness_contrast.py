"""brightness, contrast, brightness_contrast against DALI's CPU operators and the formula."""

import numpy as np
import pytest
from oracle import compare_op, run_op

from stoker import types
from stoker.errors import PipelineBuildError

CASES = [
    ("brightness_contrast", dict(contrast=2.0)),
    ("brightness_contrast", dict(brightness=1.3, brightness_shift=0.1, contrast=0.7)),
    ("brightness_contrast", dict(contrast=0.5, contrast_center=10.0)),
    ("brightness_contrast", dict(brightness=0.8, contrast=1.5, dtype=types.FLOAT)),
    ("brightness_contrast", dict(brightness_shift=-0.2, dtype=types.INT16)),
    ("brightness", dict(brightness=0.5)),
    ("brightness", dict(brightness=1.7, brightness_shift=0.05)),
    ("contrast", dict(contrast=1.5)),
    ("contrast", dict(contrast=0.0)),
]


@pytest.mark.oracle
@pytest.mark.parametrize("name,kwargs", CASES, ids=lambda c: str(c))
def test_uint8_matches_dali(name, kwargs, images):
    # float32 in DALI's order of operations: the same values, ties included
    tol = (1e-5, 1e-4) if kwargs.get("dtype") == types.FLOAT else (0.0, 0)
    compare_op(name, [images["rgb"], images["gray"], images["noise"]], *tol, **kwargs)


@pytest.mark.oracle
@pytest.mark.parametrize("kwargs", [dict(contrast=2.0), dict(brightness=1.3, brightness_shift=0.1, contrast=0.7),
                                    dict(brightness=1.3, brightness_shift=0.1, dtype=types.UINT8)])
def test_float_matches_dali(kwargs, images):
    tol = 1 if kwargs.get("dtype") == types.UINT8 else 1e-5
    compare_op("brightness_contrast", [images["rgb_f"], images["gray_f"]], tol / 10, tol, **kwargs)


@pytest.mark.oracle
def test_int16_center_matches_dali():
    x = (np.arange(256, dtype=np.int32) * 100 - 5000).astype(np.int16).reshape(16, 16, 1)
    compare_op("contrast", [x], 0.0, 0, contrast=0.5)


@pytest.mark.oracle
def test_per_sample_arguments_match_dali(images):
    batch = [images["rgb"], images["noise"], images["gray"]]
    per_sample = {"brightness": [np.float32(v) for v in (0.5, 1.0, 1.6)],
                  "contrast": [np.float32(v) for v in (1.2, 0.3, 2.0)],
                  "brightness_shift": [np.float32(v) for v in (0.0, 0.1, -0.1)]}
    compare_op("brightness_contrast", batch, 0.0, 0, per_sample=per_sample)


def test_formula_on_floats(images):
    x = images["rgb_f"]
    out = run_op("stoker", "brightness_contrast", [x], brightness=1.2, brightness_shift=0.05,
                       contrast=0.6, contrast_center=0.4)[0]
    np.testing.assert_allclose(out, 0.05 + 1.2 * (0.4 + 0.6 * (x - 0.4)), rtol=1e-5, atol=1e-6)


def test_uint8_saturates_and_rounds_half_up():
    x = np.arange(256, dtype=np.uint8).reshape(16, 16, 1)
    out = run_op("stoker", "brightness", [x], brightness=0.5)[0].reshape(-1)
    np.testing.assert_array_equal(out, np.floor(np.arange(256) * 0.5 + 0.5))
    out = run_op("stoker", "contrast", [x], contrast=3.0)[0].reshape(-1)
    assert out[0] == 0 and out[-1] == 255


def test_bad_argument_names_operator_and_argument(images):
    with pytest.raises(PipelineBuildError, match="brightness.*'brightness'"):
        run_op("stoker", "brightness", [images["rgb"]], brightness="bright")
