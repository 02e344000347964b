"""bb_flip, coord_flip, coord_transform and bbox_paste against DALI's CPU operators."""

import numpy as np
import pytest
from oracle import check_samples as check  # layouts not compared
from oracle import run_graph_samples as run_graph  # samples only, no layouts

from stoker.errors import StokerError

RNG = np.random.default_rng(5)


def _xywh(n):
    lt = RNG.uniform(0, 0.6, (n, 2))
    wh = RNG.uniform(0.01, 0.4, (n, 2))
    return np.concatenate([lt, wh], 1).astype(np.float32)


def _ltrb(n):
    b = _xywh(n)
    b[:, 2:] += b[:, :2]
    return b


BOXES = [_xywh(3), _xywh(1), _xywh(7)]
LTRB = [_ltrb(3), _ltrb(1), _ltrb(7)]
FLAGS_H = [np.array(1, np.int32), np.array(0, np.int32), np.array(1, np.int32)]
FLAGS_V = [np.array(0, np.int32), np.array(1, np.int32), np.array(1, np.int32)]


@pytest.mark.oracle
@pytest.mark.parametrize("kw", [dict(), dict(ltrb=True), dict(horizontal=0, vertical=1),
                                dict(ltrb=True, horizontal=1, vertical=1), dict(horizontal=0)], ids=str)
def test_bb_flip_matches_dali(kw):
    data = LTRB if kw.get("ltrb") else BOXES
    check(lambda fn, t, b: fn.bb_flip(b, **kw), data, what=str(kw))


@pytest.mark.oracle
@pytest.mark.parametrize("ltrb", [False, True])
def test_bb_flip_per_sample_flags_match_dali(ltrb):
    data = LTRB if ltrb else BOXES
    check(lambda fn, t, b, h, v: fn.bb_flip(b, ltrb=ltrb, horizontal=h, vertical=v), data, FLAGS_H, FLAGS_V)


POINTS2 = [RNG.uniform(-1, 2, (5, 2)).astype(np.float32), RNG.uniform(0, 1, (1, 2)).astype(np.float32)]
POINTS3 = [RNG.uniform(-1, 2, (4, 3)).astype(np.float32), RNG.uniform(0, 1, (6, 3)).astype(np.float32)]


@pytest.mark.oracle
@pytest.mark.parametrize("kw", [dict(), dict(flip_x=0, flip_y=1), dict(flip_x=1, flip_y=1, center_x=0.2, center_y=3),
                                dict(layout="yx", flip_x=1, center_x=0.1)], ids=str)
def test_coord_flip_2d_matches_dali(kw):
    check(lambda fn, t, p: fn.coord_flip(p, **kw), POINTS2, what=str(kw))


@pytest.mark.oracle
@pytest.mark.parametrize("kw", [dict(flip_z=1, center_z=-1.0), dict(layout="zxy", flip_x=0, flip_y=1, flip_z=1)],
                         ids=str)
def test_coord_flip_3d_matches_dali(kw):
    check(lambda fn, t, p: fn.coord_flip(p, **kw), POINTS3, what=str(kw))


@pytest.mark.oracle
def test_coord_flip_per_sample_args_match_dali():
    cx = [np.array(0.3, np.float32), np.array(-2.0, np.float32)]
    fy = [np.array(1, np.int32), np.array(0, np.int32)]
    check(lambda fn, t, p, c, f: fn.coord_flip(p, center_x=c, flip_y=f), POINTS2, cx, fy)


@pytest.mark.oracle
@pytest.mark.parametrize("kw", [dict(M=2.0), dict(M=[1, 2, 3, 4], T=[0.5, -1]), dict(T=3.0),
                                dict(MT=[1, 0, 2, 0.5, 1, -1]), dict(M=[1, 2, 3, 4, 5, 6], T=[1, 2, 3]),
                                dict(M=[1, 1], T=7), dict(MT=[1, 2, 3])], ids=str)
def test_coord_transform_matches_dali(kw):
    check(lambda fn, t, p: fn.coord_transform(p, **kw), POINTS2, tol=0, what=str(kw))


@pytest.mark.oracle
def test_coord_transform_per_sample_and_ints_match_dali():
    ms = [RNG.uniform(-2, 2, (3, 3)).astype(np.float32) for _ in POINTS3]
    ts = [RNG.uniform(-2, 2, 3).astype(np.float32) for _ in POINTS3]
    check(lambda fn, t, p, m, tt: fn.coord_transform(p, M=m, T=tt), POINTS3, ms, ts)
    mts = [RNG.uniform(-2, 2, (2, 4)).astype(np.float32) for _ in POINTS3]
    check(lambda fn, t, p, m: fn.coord_transform(p, MT=m), POINTS3, mts)
    ints = [(p * 100).astype(np.int32) for p in POINTS2]
    check(lambda fn, t, p: fn.coord_transform(p, M=[0.5, 0, 0, 1.5], T=[0.25, 0], dtype=t.INT32), ints)
    check(lambda fn, t, p: fn.coord_transform(p, M=[0.5, 0, 0, 1.5], T=[0.25, 0]), ints)
    with pytest.raises(StokerError, match="coord_transform.*'dtype'"):
        run_graph("stoker", lambda fn, t, p: fn.coord_transform(p, M=2, dtype=t.INT16), ints)


def test_coord_transform_bad_matrix_names_argument():
    with pytest.raises(StokerError, match="coord_transform.*'M'"):
        run_graph("stoker", lambda fn, t, p: fn.coord_transform(p, M=[1, 2, 3]), POINTS2)


@pytest.mark.oracle
@pytest.mark.parametrize("kw", [dict(ratio=2.0), dict(ratio=1.5, paste_x=0, paste_y=1),
                                dict(ratio=3.0, paste_x=0.25, ltrb=True), dict(ratio=1.0, ltrb=True)], ids=str)
def test_bbox_paste_matches_dali(kw):
    data = LTRB if kw.get("ltrb") else BOXES
    check(lambda fn, t, b: fn.bbox_paste(b, **kw), data, tol=1e-7, what=str(kw))


@pytest.mark.oracle
def test_bbox_paste_per_sample_args_match_dali():
    ratio = [np.array(r, np.float32) for r in (1.0, 2.5, 4.0)]
    px = [np.array(p, np.float32) for p in (0.1, 0.9, 0.5)]
    check(lambda fn, t, b, r, x: fn.bbox_paste(b, ratio=r, paste_x=x, ltrb=True), LTRB, ratio, px, tol=1e-7)


@pytest.mark.oracle
def test_bbox_paste_reads_any_shape_as_boxes_like_dali():
    data = [LTRB[2][:6].reshape(4, 6), LTRB[0].reshape(2, 6)]
    check(lambda fn, t, b: fn.bbox_paste(b, ratio=2.5, paste_y=0.2, ltrb=True), data, tol=1e-7)


def test_coord_flip_needs_2d_points():
    with pytest.raises(StokerError, match="coord_flip"):
        run_graph("stoker", lambda fn, t, p: fn.coord_flip(p), [p.reshape(-1) for p in POINTS2])


def test_bbox_paste_ratio_below_one_names_argument():
    with pytest.raises(StokerError, match="bbox_paste.*'ratio'"):
        run_graph("stoker", lambda fn, t, b: fn.bbox_paste(b, ratio=0.5), BOXES)


def _boxes3d(n, ltrb):
    lo = RNG.uniform(0, 0.5, (n, 3))
    ext = RNG.uniform(0.05, 0.4, (n, 3))
    return np.concatenate([lo, lo + ext if ltrb else ext], 1).astype(np.float32)


@pytest.mark.oracle
@pytest.mark.parametrize("ltrb", [False, True])
def test_bb_flip_reads_any_shape_as_4_coordinate_boxes_like_dali(ltrb):
    data = [_boxes3d(4, ltrb), _boxes3d(2, ltrb)]
    check(lambda fn, t, b: fn.bb_flip(b, ltrb=ltrb, horizontal=1, vertical=1), data)


@pytest.mark.oracle
def test_coord_flip_1d_matches_dali():
    pts = [RNG.uniform(-1, 2, (5, 1)).astype(np.float32), RNG.uniform(0, 1, (2, 1)).astype(np.float32)]
    check(lambda fn, t, p: fn.coord_flip(p, center_x=0.25), pts)
