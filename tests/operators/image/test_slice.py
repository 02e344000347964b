"""slice against DALI's CPU operator: every way of giving the box, rounding, padding, per-sample args."""


import numpy as np
import pytest
from oracle import check, run_graph

from stoker.errors import StokerError  # noqa: E402

RNG = np.random.default_rng(3)
IMGS = [RNG.integers(0, 256, (17, 23, 3), np.uint8), RNG.integers(0, 256, (10, 7, 3), np.uint8),
        RNG.integers(0, 256, (31, 12, 3), np.uint8)]


def _f32(rows):
    return [np.array(r, np.float32) for r in rows]


@pytest.mark.oracle
def test_rounding_of_every_box_form_matches_dali():
    """A grid of fractional boxes on a 1 x 10 and a 1 x 7 row: edges at .5 are where forms differ."""
    pairs = [(a, s) for a in np.arange(0, 1, 0.05).round(2) for s in (0.05, 0.1, 0.15, 0.35) if a + s <= 1]
    for ext in (10, 7):
        rows = [np.arange(ext, dtype=np.int32).reshape(1, ext)] * len(pairs)
        a = _f32([[p[0]] for p in pairs])
        s = _f32([[p[1]] for p in pairs])
        e = _f32([[p[0] + p[1]] for p in pairs])
        check(lambda fn, t, x, a, s: fn.slice(x, a, s, axes=[1]), rows, a, s, layouts=["HW", None, None])
        check(lambda fn, t, x, a, s: fn.slice(x, rel_start=a, rel_shape=s, axes=[1]), rows, a, s,
              layouts=["HW", None, None])
        check(lambda fn, t, x, a, e: fn.slice(x, rel_start=a, rel_end=e, axes=[1]), rows, a, e,
              layouts=["HW", None, None])


CASES = [
    dict(rel_start=[0.1, 0.2], rel_shape=[0.5, 0.3]),
    dict(rel_start=[0.25, 0.5], rel_end=[0.75, 1.0]),
    dict(start=[2, 1], end=[6, 5]),
    dict(start=[2, 1], shape=[3, 4]),
    dict(rel_shape=[0.5, 0.5]),
    dict(start=[1], end=[4], axes=[0]),
    dict(start=[1, 0], end=[4, 2], axis_names="HC"),
    dict(start=[-3, 2], end=[9, 30], out_of_bounds_policy="pad", fill_values=[7, 8, 9]),
    dict(start=[-3, 2], end=[9, 30], out_of_bounds_policy="pad", fill_values=[300.7]),
    dict(start=[-3, 2], end=[9, 30], out_of_bounds_policy="trim_to_shape"),
    dict(start=[40, 0], end=[45, 3], out_of_bounds_policy="pad", fill_values=[5]),
    dict(start=[1, 1], end=[5, 5], dtype="FLOAT"),
]


@pytest.mark.oracle
@pytest.mark.parametrize("case", CASES, ids=str)
def test_slice_arguments_match_dali(case):
    kw = dict(case)

    def build(fn, t, x):
        if "dtype" in kw:
            kw["dtype"] = getattr(t, case["dtype"])
        return fn.slice(x, **kw)

    check(build, IMGS, layouts=["HWC"], what=str(case))


@pytest.mark.oracle
@pytest.mark.parametrize("norm", [True, False])
def test_anchor_shape_inputs_match_dali(norm):
    if norm:
        anchor, shape = _f32([[0.1, 0.3], [0.0, 0.5], [0.33, 0.2]]), _f32([[0.5, 0.4], [1.0, 0.5], [0.2, 0.7]])
    else:
        anchor, shape = _f32([[1, 3], [0, 5], [3.5, 2]]), _f32([[5, 4], [7, 5], [2.5, 7]])
    check(lambda fn, t, x, a, s: fn.slice(x, a, s, normalized_anchor=norm, normalized_shape=norm),
          IMGS, anchor, shape, layouts=["HWC", None, None])


@pytest.mark.oracle
def test_per_sample_arguments_and_chw_layout_match_dali():
    chw = [np.ascontiguousarray(i.transpose(2, 0, 1)) for i in IMGS]
    start = _f32([[0.2, 0.1], [0.5, 0.0], [0.0, 0.9]])
    end = _f32([[0.9, 0.4], [1.0, 0.5], [0.5, 1.0]])
    check(lambda fn, t, x, a, e: fn.slice(x, rel_start=a, rel_end=e), chw, start, end, layouts=["CHW", None, None])


def test_out_of_bounds_box_names_the_argument():
    with pytest.raises(StokerError, match="slice.*out_of_bounds_policy"):
        run_graph("stoker", lambda fn, t, x: fn.slice(x, start=[-1, 0], end=[3, 3]), IMGS, layouts=["HWC"])


def test_wrong_value_count_names_the_argument():
    with pytest.raises(StokerError, match="slice: argument 'rel_start' has 3 values"):
        run_graph("stoker", lambda fn, t, x: fn.slice(x, rel_start=[0.1, 0.1, 0.1]), IMGS, layouts=["HWC"])
    with pytest.raises(StokerError, match="slice: argument 'end'"):
        run_graph("stoker", lambda fn, t, x: fn.slice(x, rel_end=[1, 1], end=[3, 3]), IMGS, layouts=["HWC"])
