"""reductions.* against DALI's CPU operators and NumPy."""

import numpy as np
import pytest
from oracle import check, run_graph

from stoker.errors import StokerError

RNG = np.random.default_rng(2)
U8 = [RNG.integers(0, 256, (5, 7, 3), np.uint8), RNG.integers(0, 256, (4, 9, 3), np.uint8)]
I16 = [RNG.integers(-3000, 3000, (6, 4, 2)).astype(np.int16), RNG.integers(-5, 5, (1, 3, 2)).astype(np.int16)]
F32 = [RNG.normal(3, 2, (6, 5, 3)).astype(np.float32), RNG.normal(-1, 5, (2, 8, 3)).astype(np.float32)]

AXES = [dict(), dict(axes=[0, 1]), dict(axes=1, keep_dims=True), dict(axis_names="C"),
        dict(axis_names="HC", keep_dims=True), dict(axes=[])]
NAMES = ["sum", "mean", "min", "max", "mean_square", "rms"]


@pytest.mark.oracle
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("data", [U8, I16, F32], ids=["u8", "i16", "f32"])
def test_reduction_matches_dali(name, data):
    exact = name in ("min", "max", "sum") and data is not F32
    for kw in AXES:
        check(lambda fn, t, x, kw=kw: getattr(fn.reductions, name)(x, **kw), data, layouts=["HWC"],
              tol=0 if exact else 2e-5, what=f"{name} {kw}")


@pytest.mark.oracle
@pytest.mark.parametrize("name", ["variance", "std_dev"])
@pytest.mark.parametrize("kw", [dict(), dict(axes=[0, 1], ddof=1), dict(axis_names="W", keep_dims=True)], ids=str)
def test_spread_matches_dali(name, kw):
    def build(fn, t, x):
        mean = fn.reductions.mean(x, **{k: v for k, v in kw.items() if k != "ddof"})
        return getattr(fn.reductions, name)(x, mean, **kw)

    for data in (U8, F32):
        check(build, data, layouts=["HWC"], tol=2e-5, what=f"{name} {kw}")


@pytest.mark.oracle
def test_sum_and_mean_with_dtype():
    check(lambda fn, t, x: fn.reductions.sum(x, dtype=t.FLOAT, axes=0), U8, layouts=["HWC"])
    check(lambda fn, t, x: fn.reductions.mean(x, dtype=t.FLOAT, axis_names="HW"), I16, layouts=["HWC"], tol=1e-5)


def test_float64_is_accepted_and_exact():
    x = [RNG.normal(0, 1, (3, 4)), RNG.normal(0, 1, (2, 4))]
    (out, _), = run_graph("stoker", lambda fn, t, x: fn.reductions.std_dev(x, fn.reductions.mean(x, axes=1),
                                                                           axes=1, ddof=1), x)
    for o, a in zip(out, x):
        assert o.dtype == np.float64
        np.testing.assert_allclose(o, a.std(axis=1, ddof=1), rtol=1e-12)


def test_unknown_axis_name_names_the_argument():
    with pytest.raises(StokerError, match="reductions.sum.*'axis_names'"):
        run_graph("stoker", lambda fn, t, x: fn.reductions.sum(x, axis_names="D"), U8, layouts=["HWC"])
