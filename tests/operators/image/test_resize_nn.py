"""resize with INTERP_NN picks exactly DALI's source pixels (issue 19).

A nearest-neighbour output pixel copies the source pixel under ``floor`` of a float32 position,
so a position that lands on a pixel boundary goes to one side or the other by the last bit of
the region's ends. stoker computes the output size and region as DALI does (float32 sizes,
scales and ends: ``geometry.resize_plan``) and the positions as DALI's CPU kernel does
(``resample.nn_tables``); these tests compare every pixel with DALI's CPU operator.
"""

import numpy as np
import pytest
from oracle import run_op

from stoker import types
from stoker.operators.image.geometry import resize_plan
from stoker.operators.image.geometry_batch import resize_plans
from stoker.operators.image.gpu_resize import plan as gpu_plan

NN = types.INTERP_NN

# Photo-like sizes (many odd ones: boundary ties depend on the sizes, not on the content)
SHAPES = [(375, 500), (500, 333), (239, 243), (427, 640), (317, 252), (304, 289), (387, 311), (541, 537),
          (383, 563), (800, 600), (481, 359), (256, 256)]

CASES = [
    dict(resize_x=224), dict(resize_y=171), dict(resize_shorter=256), dict(resize_shorter=97),
    dict(resize_shorter=800), dict(resize_longer=333), dict(size=(224, 224)), dict(size=(300, 0)),
    dict(size=(1000, 0)), dict(size=(123.4, 0)), dict(resize_x=400, resize_y=300, mode="not_larger"),
    dict(resize_x=777, resize_y=555, mode="not_larger"), dict(resize_x=100, resize_y=300, mode="not_smaller"),
    dict(resize_x=-150, resize_y=90), dict(resize_shorter=131, max_size=200),
    dict(resize_x=224, roi_start=(10.5, 20.25), roi_end=(200.7, 230.1)),
    dict(size=(150, 150), roi_start=(0.1, 0.2), roi_end=(0.8, 0.9), roi_relative=True),
    dict(resize_shorter=600, roi_start=(0.13, 0.21), roi_end=(0.77, 0.91), roi_relative=True),
    dict(size=(64, 64), roi_start=(230, 200), roi_end=(5.5, 10.5)),
]


@pytest.fixture(scope="module")
def photos():
    rng = np.random.default_rng(19)
    return [rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8) for h, w in SHAPES]


@pytest.mark.oracle
@pytest.mark.parametrize("case", CASES, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()))
def test_nn_pixels_equal_dali(case, photos):
    ours = run_op("stoker", "resize", photos, interp_type=NN, **case)
    theirs = run_op("dali", "resize", photos, interp_type=NN, **case)
    for i, (a, b) in enumerate(zip(ours, theirs)):
        assert a.shape == b.shape, f"sample {i} {SHAPES[i]}"
        np.testing.assert_array_equal(a, b, err_msg=f"sample {i} {SHAPES[i]}")


VOLUME_SHAPES = [(9, 10, 11), (20, 17, 31), (5, 40, 33), (16, 16, 16), (7, 3, 50)]
VOLUME_CASES = [
    dict(resize_z=4), dict(resize_x=7), dict(resize_y=13, resize_x=9), dict(size=(5, 7, 9)),
    dict(size=(30, 0, 0)), dict(resize_shorter=11), dict(resize_longer=23.5),
    dict(size=(6, 22, 0), mode="not_larger"), dict(size=(3.3, 8.8, 4.4), mode="stretch"),
    dict(size=(6, 6, 6), roi_start=(1.5, 2.25, 0.7), roi_end=(4.1, 8.3, 2.9)),
]


@pytest.mark.oracle
@pytest.mark.parametrize("case", VOLUME_CASES, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()))
def test_nn_volumes_equal_dali(case):
    """DHWC volumes; two given extents of three take the geometric mean of their scales."""
    rng = np.random.default_rng(5)
    vols = [rng.integers(0, 256, size=(*s, 2), dtype=np.uint8) for s in VOLUME_SHAPES]
    ours = run_op("stoker", "resize", vols, layout="DHWC", interp_type=NN, **case)
    theirs = run_op("dali", "resize", vols, layout="DHWC", interp_type=NN, **case)
    for i, (a, b) in enumerate(zip(ours, theirs)):
        assert a.shape == b.shape, f"volume {i}"
        np.testing.assert_array_equal(a, b, err_msg=f"volume {i}")


def test_reproducer_first_column_of_a_fractional_depth():
    """The issue's reproducer: 9x10x11 with resize_z=4 (a fractional height and width); DALI's
    first output column reads source column 0."""
    p = resize_plan((9, 10, 11), (4, 0, 0))
    assert p.out_size == (4, 4, 5)
    from stoker.operators.image.resample import nn_tables

    assert nn_tables([9, 10, 11], p.out_size, p.lo, p.hi)[2][0] == 0


def test_plan_keeps_float32_region_ends():
    """Region ends are float32 values (DALI keeps them in C floats)."""
    p = resize_plan((375, 500), (0, 0), resize_shorter=97)
    for v in (*p.lo, *p.hi):
        assert float(np.float32(v)) == v


def test_negative_extent_flips():
    p = resize_plan((10, 20), (5, -10))
    assert p.out_size == (5, 10) and p.lo[1] == 20.0 and p.hi[1] == 0.0


@pytest.mark.parametrize("case", [dict(resize_x=-150, resize_y=90), dict(resize_x=-97.5),
                                  dict(resize_shorter=131.3, max_size=[200]), dict(resize_longer=77.7)])
def test_batch_plans_equal_per_sample_plans(case):
    """The GPU's whole-batch planner gives the per-sample plan's numbers (flips included)."""
    rng = np.random.default_rng(2)
    in_hw = rng.integers(1, 900, size=(200, 2))
    got = resize_plans(in_hw, case.get("resize_y"), case.get("resize_x"), max_size=case.get("max_size"),
                       resize_shorter=case.get("resize_shorter"), resize_longer=case.get("resize_longer"))
    want = np.array([gpu_plan(case, int(h), int(w)) for h, w in in_hw])
    np.testing.assert_array_equal(got, want)
