"""The whole-batch geometry helpers give exactly what the per-sample functions give."""

import numpy as np
import pytest

from stoker.operators.image.geometry import crop_anchor
from stoker.operators.image.geometry_batch import crop_anchors, resize_plans, round_half_away
from stoker.operators.image.gpu_resize import plan

CASES = [
    dict(resize_x=224, resize_y=224),
    dict(resize_shorter=256),
    dict(resize_longer=300),
    dict(resize_x=200),
    dict(resize_y=131),
    dict(resize_x=224, resize_y=224, mode="not_larger"),
    dict(resize_x=224, resize_y=100, mode="not_smaller"),
    dict(resize_x=150, mode="stretch"),
    dict(resize_x=500, resize_y=40, max_size=[300, 280]),
    dict(resize_shorter=256, max_size=[320]),
    dict(resize_x=97, resize_y=61, subpixel_scale=False),
    dict(),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()) or "none")
def test_resize_plans_match_per_sample_plan(case):
    rng = np.random.default_rng(7)
    in_hw = np.concatenate([rng.integers(1, 900, size=(300, 2)), [[1, 1], [224, 224], [256, 700], [3, 2000]]])
    args = dict(case)
    kw = {k: v for k, v in args.items() if k in ("mode", "max_size", "subpixel_scale")}
    got = resize_plans(in_hw, args.get("resize_y"), args.get("resize_x"),
                       resize_shorter=args.get("resize_shorter"), resize_longer=args.get("resize_longer"), **kw)
    want = np.array([plan(args, int(h), int(w)) for h, w in in_hw], dtype=np.float64)
    np.testing.assert_array_equal(got, want)


def test_resize_plans_per_sample_arguments():
    rng = np.random.default_rng(3)
    in_hw = rng.integers(5, 700, size=(64, 2))
    rx = rng.integers(0, 300, size=64).astype(np.float64)
    ry = rng.integers(1, 300, size=64).astype(np.float64)
    shorter = np.where(rng.random(64) < 0.3, 128.0, 0.0)
    got = resize_plans(in_hw, ry, rx, resize_shorter=shorter)
    want = np.array([plan({"resize_x": x, "resize_y": y, "resize_shorter": s}, int(h), int(w))
                     for (h, w), x, y, s in zip(in_hw, rx, ry, shorter)])
    np.testing.assert_array_equal(got, want)


def test_resize_plans_rejects_unknown_mode():
    with pytest.raises(ValueError, match="mode"):
        resize_plans(np.array([[10, 10]]), 5, 5, mode="fit")


@pytest.mark.parametrize("rounding", ["round", "truncate"])
def test_crop_anchors_match_crop_anchor(rounding):
    rng = np.random.default_rng(11)
    ins = rng.integers(1, 1000, size=500)
    crops = rng.integers(1, 1200, size=500)  # windows larger than the input: negative anchors too
    pos = rng.random(500).astype(np.float32)
    pos[:5] = [0.0, 1.0, 0.5, 0.25, 0.75]
    ins[:4], crops[:4], pos[5:9] = [9, 9, 7, 7], [4, 12, 10, 2], [0.5, 0.5, 0.5, 0.5]  # exact halves, +/-
    got = crop_anchors(ins, crops, pos, rounding)
    want = [crop_anchor(int(a), int(c), float(p), rounding) for a, c, p in zip(ins, crops, pos)]
    assert got.tolist() == want


def test_crop_anchor_rounding_modes_differ_on_halves_and_negatives():
    assert (crop_anchor(9, 4, 0.5, "round"), crop_anchor(9, 4, 0.5, "truncate")) == (3, 2)
    assert (crop_anchor(7, 10, 0.5, "round"), crop_anchor(7, 10, 0.5, "truncate")) == (-2, -1)


def test_round_half_away_halves():
    assert round_half_away(np.array([0.5, 1.5, -0.5, -1.5, 2.49, -2.51])).tolist() == [1, 2, -1, -2, 2, -3]


def test_gpu_resize_batch_plans_match_per_sample_plans_with_argument_inputs():
    """gpu_resize._plans (the table the GPU kernel reads) on a stand-in batch: per-sample
    argument inputs and static arguments give the per-sample planner's rows."""
    from types import SimpleNamespace

    from stoker.operators.image.gpu_resize import _plans

    shapes = np.array([[40, 60, 3], [33, 17, 3], [224, 300, 3]])
    batch = type("B", (), {"ndim": 3, "geometry": lambda self: (None, None, shapes), "__len__": lambda self: 3})()
    op = SimpleNamespace(args={"resize_y": 50.0, "mode": "default", "max_size": None, "subpixel_scale": True},
                         sample_args=None)
    arg_inputs = {"resize_x": [np.float32(v) for v in (30, 0, 99)]}
    got = _plans(op, batch, arg_inputs)
    want = [plan({**op.args, "resize_x": float(arg_inputs["resize_x"][i])}, int(h), int(w))
            for i, (h, w, _) in enumerate(shapes)]
    np.testing.assert_array_equal(got, np.asarray(want))
