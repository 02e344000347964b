"""pad against DALI's CPU operator."""


import numpy as np
import pytest
from oracle import check, run_graph

from stoker.errors import StokerError  # noqa: E402

RNG = np.random.default_rng(4)
IMGS = [RNG.integers(0, 256, (5, 9, 3), np.uint8), RNG.integers(0, 256, (11, 4, 3), np.uint8),
        RNG.integers(0, 256, (7, 7, 3), np.uint8)]

CASES = [dict(), dict(fill_value=300.5, axis_names="W"), dict(shape=[13, -1], axes=[0, 1]),
         dict(shape=[1, 2], axes=[0, 1]), dict(align=[4], axes=[0]), dict(align=[4, 3], shape=[6, 5], axes=[0, 1]),
         dict(align=8, axis_names="HW", fill_value=-3), dict(axes=[1], shape=[-1])]


@pytest.mark.oracle
@pytest.mark.parametrize("case", CASES, ids=str)
def test_pad_matches_dali(case):
    check(lambda fn, t, x: fn.pad(x, **case), IMGS, layouts=["HWC"], what=str(case))
    check(lambda fn, t, x: fn.pad(x, **case), [i.astype(np.float32) - 100 for i in IMGS], layouts=["HWC"])


@pytest.mark.oracle
def test_pad_per_sample_shape_and_fill_match_dali():
    shapes = [np.array([12, 10], np.int32), np.array([3, 5], np.int32), np.array([-1, 8], np.int32)]
    fills = [np.float32(v) for v in (1, 2, 3)]
    check(lambda fn, t, x, s, f: fn.pad(x, shape=s, fill_value=f, axis_names="HW"), IMGS, shapes, fills,
          layouts=["HWC", None, None])


def test_bad_shape_names_the_argument():
    with pytest.raises(StokerError, match="pad: argument 'shape'"):
        run_graph("stoker", lambda fn, t, x: fn.pad(x, shape=[3], axis_names="HW"), IMGS, layouts=["HWC"])
