"""normalize against DALI's CPU operator and a NumPy reference."""


import numpy as np
import pytest
from oracle import check, run_graph

from stoker.errors import StokerError  # noqa: E402

RNG = np.random.default_rng(5)
U8 = [RNG.integers(0, 256, (6, 9, 3), np.uint8), RNG.integers(0, 256, (11, 4, 3), np.uint8)]
F32 = [RNG.normal(10, 3, (5, 7, 3)).astype(np.float32), RNG.normal(-2, 1, (8, 7, 3)).astype(np.float32)]

CASES = [dict(), dict(axes=[0, 1]), dict(axis_names="HW", ddof=1, epsilon=2.0), dict(axis_names="C"),
         dict(mean=100.0, stddev=50.0, scale=2.0, shift=1.0), dict(mean=100.0, axes=[0, 1], ddof=1),
         dict(stddev=30.0, axis_names="W"), dict(mean=1.0, stddev=2.0, epsilon=5.0),
         dict(batch=True, axis_names="HW"), dict(batch=True, axis_names="HWC", scale=3.0),
         dict(batch=True, mean=128.0, axis_names="HW")]


@pytest.mark.oracle
@pytest.mark.parametrize("case", CASES, ids=str)
@pytest.mark.parametrize("data", [U8, F32], ids=["u8", "f32"])
def test_normalize_matches_dali(case, data):
    check(lambda fn, t, x: fn.normalize(x, **case), data, layouts=["HWC"], tol=2e-5, what=str(case))


@pytest.mark.oracle
@pytest.mark.parametrize("dtype", ["UINT8", "INT16", "INT8"])
def test_integer_output_rounds_and_saturates_like_dali(dtype):
    check(lambda fn, t, x: fn.normalize(x, axes=[0, 1], dtype=getattr(t, dtype), scale=64, shift=128),
          U8, layouts=["HWC"])
    ramp = [np.arange(-6, 7, dtype=np.float32).reshape(1, 13)]
    check(lambda fn, t, x: fn.normalize(x, mean=0.0, stddev=2.0, dtype=getattr(t, dtype), shift=0.0), ramp)


@pytest.mark.oracle
def test_tensor_mean_and_stddev_match_dali():
    means = [np.array([[[50, 60, 70]]], np.float32), np.array([[[10, 20, 30]]], np.float32)]
    stds = [np.array([[[5, 6, 7]]], np.float32), np.array([[[1, 2, 3]]], np.float32)]
    check(lambda fn, t, x, m, s: fn.normalize(x, mean=m, stddev=s), U8, means, stds,
          layouts=["HWC", None, None], tol=2e-5)
    check(lambda fn, t, x, m: fn.normalize(x, mean=m, axis_names="HW"), U8, means, layouts=["HWC", None], tol=2e-5)


def test_constant_input_gives_shift_and_matches_numpy():
    flat = [np.full((3, 4), 7, np.float32), RNG.normal(0, 1, (3, 4)).astype(np.float32)]
    (out, _), = run_graph("stoker", lambda fn, t, x: fn.normalize(x, axes=[1], shift=0.25), flat)
    assert np.all(out[0] == 0.25)
    x = flat[1].astype(np.float64)
    want = (x - x.mean(1, keepdims=True)) / x.std(1, keepdims=True) + 0.25
    np.testing.assert_allclose(out[1], want, rtol=1e-5, atol=1e-5)


def test_batch_stats_need_equal_kept_extents():
    with pytest.raises(StokerError, match="batch=True"):
        run_graph("stoker", lambda fn, t, x: fn.normalize(x, batch=True, axis_names="H"), U8, layouts=["HWC"])


def test_bad_mean_shape_names_the_argument():
    means = [np.array([1, 2], np.float32)] * 2
    with pytest.raises(StokerError, match="normalize: argument 'mean'"):
        run_graph("stoker", lambda fn, t, x, m: fn.normalize(x, mean=m, axis_names="HW"), U8, means,
                  layouts=["HWC", None])
