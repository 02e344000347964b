"""audio_resample against DALI's CPU resampler (same windowed-sinc filter; float32 outputs agree
within 3e-6, a float32 summation-order difference)."""

import numpy as np
import pytest
from conftest import sweep
from oracle import run_op

from stoker import types

pytestmark = pytest.mark.oracle


@pytest.fixture(scope="module")
def mono():
    return [sweep(16000, s, 1, i)[:, 0].astype(np.float32) for i, s in enumerate((1.3, 0.2, 0.05))]


@pytest.fixture(scope="module")
def stereo():
    return [sweep(22050, s, 2, i).astype(np.float32) for i, s in enumerate((0.7, 0.11))]


CASES = [dict(scale=0.75), dict(scale=1.7), dict(in_rate=16000.0, out_rate=22050.0),
         dict(in_rate=44100.0, out_rate=16000.0, quality=100.0), dict(scale=3.0, quality=0.0),
         dict(out_length=1000), dict(scale=0.5, quality=75.0)]


@pytest.mark.parametrize("kw", CASES)
@pytest.mark.parametrize("which", ["mono", "stereo"])
def test_float_matches_dali(kw, which, request):
    batch = request.getfixturevalue(which)
    a = run_op("stoker", "audio_resample", batch, "", **kw)
    b = run_op("dali", "audio_resample", batch, "", **kw)
    for x, y in zip(a, b):
        assert x.shape == y.shape and x.dtype == y.dtype == np.float32
        np.testing.assert_allclose(x, y, rtol=0, atol=3e-6)


# unsigned outputs are not held to DALI: its uint8 values from int16 input follow another mapping
@pytest.mark.parametrize("dtype, tol", [(types.INT16, 1), (types.FLOAT, 3e-6)])
def test_integer_input_and_output_types(mono, dtype, tol):
    ints = [(x * 32767).astype(np.int16) for x in mono]
    a = run_op("stoker", "audio_resample", ints, "", scale=1.5, dtype=dtype)
    b = run_op("dali", "audio_resample", ints, "", scale=1.5, dtype=dtype)
    for x, y in zip(a, b):
        assert x.shape == y.shape and x.dtype == y.dtype
        assert np.abs(x.astype(np.float64) - y).max() <= tol


def test_per_sample_rates(mono):
    rates = {"in_rate": [np.float32(16000)] * 3, "out_rate": [np.float32(r) for r in (8000, 11025, 24000)]}
    a = run_op("stoker", "audio_resample", mono, "", per_sample=rates)
    b = run_op("dali", "audio_resample", mono, "", per_sample=rates)
    for x, y in zip(a, b):
        assert x.shape == y.shape
        np.testing.assert_allclose(x, y, rtol=0, atol=3e-6)


def test_ratio_arguments_are_checked(mono):
    from stoker.errors import StokerError

    with pytest.raises(StokerError, match="in_rate"):
        run_op("stoker", "audio_resample", mono, "", in_rate=1.0)
    with pytest.raises(StokerError, match="exactly one"):
        run_op("stoker", "audio_resample", mono, "", scale=2.0, out_length=5)
