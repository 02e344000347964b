"""grid_mask: exactly DALI's output (uint8 and float, HWC and HW, per-sample arguments), plus the square
pattern checked directly."""


import numpy as np
import pytest
from oracle import check, run_graph

from stoker.errors import StokerError  # noqa: E402

RNG = np.random.default_rng(4)
IMGS = [RNG.integers(1, 256, (57, 71, 3), np.uint8), RNG.integers(1, 256, (120, 90, 3), np.uint8),
        RNG.integers(1, 256, (1, 5, 4), np.uint8)]
CASES = [dict(), dict(tile=10, ratio=0.3), dict(tile=13, ratio=0.6, angle=0.4, shift_x=3.3, shift_y=-2.1),
         dict(tile=7, ratio=0.5, angle=-1.2, shift_x=-5.0, shift_y=4.5), dict(tile=20, ratio=0.0),
         dict(tile=16, ratio=1.0, angle=3.0), dict(tile=25, ratio=0.2, angle=0.7854, shift_x=100.0),
         dict(tile=3, ratio=0.34, angle=1.5708, shift_x=-0.5, shift_y=12.25)]


@pytest.mark.oracle
@pytest.mark.parametrize("kw", CASES, ids=str)
def test_matches_dali(kw):
    check(lambda fn, t, x: fn.grid_mask(x, **kw), IMGS, layouts=["HWC"], what=str(kw))


@pytest.mark.oracle
def test_float_gray_and_per_sample_args_match_dali():
    flt = [i.astype(np.float32) / 7 for i in IMGS]
    check(lambda fn, t, x: fn.grid_mask(x, tile=9, ratio=0.4, angle=0.3), flt, layouts=["HWC"])
    tiles = [np.int32(v) for v in (8, 31, 3)]
    angles = [np.float32(v) for v in (0.1, -2.0, 1.0)]
    ratios = [np.float32(v) for v in (0.25, 0.7, 0.5)]
    check(lambda fn, t, x, k, a, r: fn.grid_mask(x, tile=k, angle=a, ratio=r, shift_y=1.5), IMGS, tiles, angles,
          ratios, layouts=["HWC", None, None, None])


def test_unrotated_pattern():
    img = np.full((40, 50, 2), 9, np.uint8)
    (out,), = [o for o, _ in run_graph("stoker", lambda fn, t, x: fn.grid_mask(x, tile=8, ratio=0.5), [img])]
    y, x = np.mgrid[0:40, 0:50]
    black = (x % 8 < 4) & (y % 8 < 4)  # 1/8 is exact in float32: no pixel on a rounding edge
    assert np.all(out[black] == 0) and np.all(out[~black] == 9)


def test_bad_arguments():
    with pytest.raises(StokerError, match="tile"):
        run_graph("stoker", lambda fn, t, x: fn.grid_mask(x, tile=0), IMGS)
    with pytest.raises(StokerError, match="ratio"):
        run_graph("stoker", lambda fn, t, x: fn.grid_mask(x, ratio=1.5), IMGS)
