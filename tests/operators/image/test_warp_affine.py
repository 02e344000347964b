"""warp_affine against DALI's CPU operator: nearest neighbour exact (up to source points that fall on
a pixel edge within float rounding, where DALI's and our float evaluation can pick either side), linear
within 1 level (OpenCV's 1/32-pixel fixed-point weights)."""


import cv2
import numpy as np
import pytest
from oracle import check, run_graph

from stoker.errors import StokerError  # noqa: E402

RNG = np.random.default_rng(8)
IMGS = [cv2.resize(RNG.integers(0, 256, (12, 16, 3)).astype(np.uint8), (61, 47), interpolation=cv2.INTER_CUBIC),
        RNG.integers(0, 256, (30, 40, 3), np.uint8)]
M = [0.9, 0.2, 3.5, -0.1, 1.1, -2.25]
CASES = [dict(matrix=M), dict(matrix=M, fill_value=17), dict(matrix=M, inverse_map=False, size=[50, 70], fill_value=5),
         dict(matrix=[1, 0, 0.5, 0, 1, 0], fill_value=0), dict(matrix=[0.5, 0, 0, 0, 0.5, 0], size=[90, 120]),
         dict(matrix=[0.7, -0.7, 20, 0.7, 0.7, -10], fill_value=200, dtype="FLOAT")]


def _build(case, interp):
    def build(fn, t, x):
        kw = dict(case)
        if "dtype" in kw:
            kw["dtype"] = getattr(t, kw["dtype"])
        return fn.warp_affine(x, interp_type=getattr(t, interp), **kw)
    return build


# Matrices whose source points land exactly on pixel edges (rotation by 45 degrees, an inverted
# matrix): the pixel picked there depends on the last bit of the float evaluation.
EDGE_PRONE = {2: 0.01, 5: 0.05}


@pytest.mark.oracle
@pytest.mark.parametrize("k", range(len(CASES)))
def test_nearest_matches_dali(k):
    case = CASES[k]
    if k not in EDGE_PRONE:
        check(_build(case, "INTERP_NN"), IMGS, layouts=["HWC"], what=str(case))
    else:
        (ours, _), = run_graph("stoker", _build(case, "INTERP_NN"), IMGS, layouts=["HWC"])
        (theirs, _), = run_graph("dali", _build(case, "INTERP_NN"), IMGS, layouts=["HWC"])
        for a, b in zip(ours, theirs):
            assert a.shape == b.shape and a.dtype == b.dtype
            assert np.mean(np.any(a != b, axis=-1)) <= EDGE_PRONE[k]
    # integer scales and half-pixel shifts put every source point on an edge: DALI takes the pixel after it
    check(_build(dict(matrix=[2, 0, 0, 0, 2, 0], fill_value=0), "INTERP_NN"), IMGS, layouts=["HWC"])
    check(_build(dict(matrix=[1, 0, 0.5, 0, 1, -0.5], fill_value=0), "INTERP_NN"), IMGS, layouts=["HWC"])


@pytest.mark.oracle
@pytest.mark.parametrize("case", CASES, ids=str)
def test_linear_matches_dali_within_one_level(case):
    check(_build(case, "INTERP_LINEAR"), IMGS, layouts=["HWC"], tol=1.0 if "dtype" not in case else 0.02,
          what=str(case))


@pytest.mark.oracle
def test_per_sample_matrices_and_matrix_input_match_dali():
    # random (not short decimal) entries, so that no source point sits on a pixel edge
    mats = [np.array([[1, 0, 0], [0, 1, 0]], np.float32) + RNG.uniform(-0.2, 0.2, (2, 3)).astype(np.float32)
            for _ in IMGS]
    check(lambda fn, t, x, m: fn.warp_affine(x, matrix=m, fill_value=9, interp_type=t.INTERP_NN), IMGS, mats,
          layouts=["HWC", None])
    check(lambda fn, t, x, m: fn.warp_affine(x, m, fill_value=9, interp_type=t.INTERP_NN), IMGS, mats,
          layouts=["HWC", None])


def test_singular_matrix_names_the_argument():
    with pytest.raises(StokerError, match="warp_affine: argument 'matrix'"):
        run_graph("stoker", lambda fn, t, x: fn.warp_affine(x, matrix=[1, 1, 0, 1, 1, 0], inverse_map=False),
                  IMGS, layouts=["HWC"])
