"""erase against DALI's CPU operator."""


import numpy as np
import pytest
from oracle import check, run_graph

from stoker.errors import StokerError  # noqa: E402

RNG = np.random.default_rng(6)
IMGS = [RNG.integers(1, 256, (15, 20, 3), np.uint8), RNG.integers(1, 256, (9, 31, 3), np.uint8)]

CASES = [dict(anchor=[1, 1], shape=[2, 2], fill_value=[200]),
         dict(anchor=[1, 0], shape=[2, 1], axis_names="WH"),
         dict(anchor=[0, 0, 3, 2], shape=[1, 1, 4, 5.5], fill_value=[7, 8, 9]),
         dict(anchor=[0.25, 0.3], shape=[0.5, 0.5], normalized=True),
         dict(anchor=[0.33, 0.125, 0.7, 0.9], shape=[0.1, 0.25, 0.5, 0.5], normalized_anchor=True,
              normalized_shape=True),
         dict(anchor=[0.5, 0.5], shape=[3, 4], normalized_anchor=True),
         dict(anchor=[5, 5], shape=[3, 2.5], centered_anchor=True),
         dict(anchor=[5.5, 5.2], shape=[3, 3], centered_anchor=True, fill_value=[1, 2, 3]),
         dict(anchor=[-1.5, 3], shape=[3, 40], fill_value=[300.7]),
         dict(anchor=[1], shape=[1], axes=[2]),
         dict(anchor=[2.4, 2.6], shape=[3.6, 3.2], axes=[0, 1])]


@pytest.mark.oracle
@pytest.mark.parametrize("case", CASES, ids=str)
def test_erase_matches_dali(case):
    check(lambda fn, t, x: fn.erase(x, **case), IMGS, layouts=["HWC"], what=str(case))
    check(lambda fn, t, x: fn.erase(x, **case), [i.astype(np.float32) / 7 for i in IMGS], layouts=["HWC"])


@pytest.mark.oracle
def test_erase_per_sample_boxes_and_chw_match_dali():
    chw = [np.ascontiguousarray(i.transpose(2, 0, 1)) for i in IMGS]
    anchors = [np.array([2, 3, 0, 0], np.float32), np.array([1, 1, 5, 20], np.float32)]
    shapes = [np.array([4, 4, 1, 2], np.float32), np.array([2, 3, 3, 8], np.float32)]
    fills = [np.array([9, 8, 7], np.float32), np.array([5, 6, 7], np.float32)]
    check(lambda fn, t, x, a, s, f: fn.erase(x, anchor=a, shape=s, fill_value=f), chw, anchors, shapes, fills,
          layouts=["CHW", None, None, None])


def test_mismatched_boxes_name_the_arguments():
    with pytest.raises(StokerError, match="erase: arguments 'anchor'"):
        run_graph("stoker", lambda fn, t, x: fn.erase(x, anchor=[1, 2, 3], shape=[1, 2]), IMGS, layouts=["HWC"])
