"""random_bbox_crop: properties of the sampled windows, determinism, and output structure against DALI."""

import numpy as np
import pytest
from oracle import check_samples as check  # layouts not compared
from oracle import run_graph_samples as run_graph  # samples only, no layouts

from stoker.errors import StokerError

RNG = np.random.default_rng(21)
BS = 16


def _boxes(n, ndim=2, size=(0.05, 0.5)):
    lo = RNG.uniform(0, 1 - size[0], (n, ndim))
    hi = np.minimum(lo + RNG.uniform(*size, (n, ndim)), 1.0)
    return np.concatenate([lo, hi], 1).astype(np.float32)


BOXES = [_boxes(int(n)) for n in RNG.integers(1, 6, BS)]
LABELS = [np.arange(len(b), dtype=np.int32) + 10 for b in BOXES]


def _run(kw, boxes=BOXES, labels=LABELS, **run_kw):
    if labels is None:
        return run_graph("stoker", lambda fn, t, b: fn.random_bbox_crop(b, **kw), boxes, **run_kw)
    return run_graph("stoker", lambda fn, t, b, lab: fn.random_bbox_crop(b, lab, **kw), boxes, labels, **run_kw)


def _iou(lo, hi, a, s):
    inter = np.prod(np.clip(np.minimum(hi, a + s) - np.maximum(lo, a), 0, None), -1)
    area = np.prod(hi - lo, -1)
    return inter / (area + np.prod(s) - inter), inter / area


def _expected_boxes(lo, hi, a, s):
    """Reference mapping: keep boxes whose centre is in the window, clip, express in window units."""
    c = (lo + hi) / 2
    keep = np.all((c >= a) & (c <= a + s), 1)
    return keep, np.concatenate([np.clip((lo[keep] - a) / s, 0, 1), np.clip((hi[keep] - a) / s, 0, 1)], 1)


@pytest.mark.parametrize("kw", [dict(thresholds=[0.3], scaling=[0.3, 1.0], aspect_ratio=[0.5, 2.0],
                                     allow_no_crop=False, num_attempts=20),
                                dict(thresholds=[0.5], threshold_type="overlap", scaling=[0.5, 0.9],
                                     allow_no_crop=False, num_attempts=5),
                                dict(thresholds=[0.1], scaling=[0.4, 0.8], allow_no_crop=False,
                                     all_boxes_above_threshold=False)], ids=range(3))
def test_windows_meet_constraints_and_boxes_are_mapped(kw):
    # all boxes above an IoU threshold can be impossible for several boxes (DALI would search forever)
    boxes = [_boxes(1, size=(0.4, 0.7)) for _ in BOXES] if kw.get("threshold_type") is None else BOXES
    labels = [lab[:len(b)] for lab, b in zip(LABELS, boxes)]
    anchors, shapes, out_boxes, out_labels = _run(kw, boxes=boxes, labels=labels)
    thr = kw["thresholds"][0]
    smin, smax = kw["scaling"]
    amin, amax = kw.get("aspect_ratio", [1.0, 1.0])
    for i, b in enumerate(boxes):
        a, s = anchors[i], shapes[i]
        assert a.dtype == s.dtype == np.float32 and a.shape == s.shape == (2,)
        assert np.all(a >= 0) and np.all(a + s <= 1 + 1e-6)
        assert np.all(s >= smin - 1e-6) and np.all(s <= smax + 1e-6)
        assert amin - 1e-5 <= s[0] / s[1] <= amax + 1e-5
        iou, frac = _iou(b[:, :2], b[:, 2:], a.astype(np.float64), s.astype(np.float64))
        metric = frac if kw.get("threshold_type") == "overlap" else iou
        if kw.get("all_boxes_above_threshold", True):
            assert np.all(metric >= thr - 1e-6), (metric, thr)
        else:
            assert np.any(metric >= thr - 1e-6)
        keep, expected = _expected_boxes(b[:, :2], b[:, 2:], a, s)
        assert keep.any()
        np.testing.assert_allclose(out_boxes[i], expected, atol=1e-6)
        np.testing.assert_array_equal(out_labels[i], labels[i][keep])


def test_no_crop_outcome_and_xywh_layout_and_indices():
    xywh = [np.concatenate([b[:, :2], b[:, 2:] - b[:, :2]], 1) for b in BOXES]
    kw = dict(thresholds=[0.9], scaling=[0.2, 0.5], bbox_layout="xyWH", output_bbox_indices=True,
              num_attempts=2, total_num_attempts=4)
    anchors, shapes, out_boxes, out_labels, idx = _run(kw, boxes=xywh)
    for i in range(BS):
        assert idx[i].dtype == np.int32
        np.testing.assert_array_equal(out_labels[i], LABELS[i][idx[i]])
        if np.all(shapes[i] == 1):  # the "no crop" outcome leaves the boxes as they were
            np.testing.assert_array_equal(out_boxes[i], xywh[i])
        else:
            lo = (xywh[i][idx[i], :2] - anchors[i]) / shapes[i]
            np.testing.assert_allclose(out_boxes[i][:, :2], np.clip(lo, 0, 1), atol=1e-6)
            assert np.all(out_boxes[i][:, 2:] >= 0) and np.all(out_boxes[i][:, :2] + out_boxes[i][:, 2:] <= 1 + 1e-6)


def test_prune_threshold_keeps_boxes_by_covered_fraction():
    kw = dict(thresholds=[0.0], scaling=[0.3, 0.6], allow_no_crop=False, bbox_prune_threshold=0.4,
              output_bbox_indices=True)
    anchors, shapes, _, _, idx = _run(kw)
    for i, b in enumerate(BOXES):
        _, frac = _iou(b[:, :2], b[:, 2:], anchors[i].astype(np.float64), shapes[i].astype(np.float64))
        np.testing.assert_array_equal(idx[i], np.flatnonzero(frac >= 0.4 - 1e-7))


def test_3d_boxes():
    boxes = [_boxes(1, 3, size=(0.5, 0.8)) for _ in range(6)]
    kw = dict(thresholds=[0.1], scaling=[0.4, 1.0], aspect_ratio=[0.5, 2.0], allow_no_crop=False, num_attempts=50)
    anchors, shapes, out = _run(kw, boxes=boxes, labels=None)
    for i, b in enumerate(boxes):
        assert anchors[i].shape == (3,) and out[i].shape[1] == 6
        iou, _ = _iou(b[:, :3], b[:, 3:], anchors[i].astype(np.float64), shapes[i].astype(np.float64))
        assert np.all(iou >= 0.1 - 1e-6)
        s = shapes[i]
        for p, q in ((0, 1), (0, 2), (1, 2)):
            assert 0.5 - 1e-5 <= s[p] / s[q] <= 2.0 + 1e-5


KW = dict(thresholds=[0.1, 0.3, 0.5], scaling=[0.3, 1.0], aspect_ratio=[0.5, 2.0], num_attempts=10)


def test_deterministic_for_a_seed_and_independent_of_threads():
    first = _run(KW, seed=5, num_threads=1)
    for again in (_run(KW, seed=5, num_threads=3), _run(KW, seed=5, num_threads=2)):
        for a_out, b_out in zip(first, again):
            for a, b in zip(a_out, b_out):
                np.testing.assert_array_equal(a, b)
    other = _run(KW, seed=6)
    assert any(not np.array_equal(a, b) for a, b in zip(first[0], other[0]))


def test_thresholds_are_drawn_per_sample():
    anchors, shapes, *_ = _run(KW, seed=9)
    full = sum(bool(np.all(s == 1)) for s in shapes)
    assert 0 < full < BS  # one in four options is "no crop"


@pytest.mark.oracle
@pytest.mark.parametrize("kw", [dict(), dict(output_bbox_indices=True), dict(bbox_layout="xyXY"), dict(ltrb=True)],
                         ids=str)
@pytest.mark.parametrize("labels", [True, False])
def test_full_window_matches_dali_exactly(kw, labels):
    """scaling [1, 1] and square aspect leave one possible window: every output is deterministic."""
    if labels:
        check(lambda fn, t, b, lab: fn.random_bbox_crop(b, lab, **kw), BOXES, LABELS, what=str(kw))
    else:
        check(lambda fn, t, b: fn.random_bbox_crop(b, **kw), BOXES, what=str(kw))


@pytest.mark.oracle
def test_fixed_crop_shape_equal_to_input_matches_dali():
    shapes = [np.array([64, 48], np.int32)] * BS
    check(lambda fn, t, b, s: fn.random_bbox_crop(b, input_shape=s, crop_shape=s, allow_no_crop=False),
          BOXES, shapes)


@pytest.mark.parametrize("lib", ["stoker", pytest.param("dali", marks=pytest.mark.oracle)])
def test_relative_windows_stay_in_scaling_range(lib):
    _, shapes, *_ = run_graph(lib, lambda fn, t, b: fn.random_bbox_crop(b, scaling=[0.3, 0.5], aspect_ratio=[0.5, 2],
                                                                         allow_no_crop=False), BOXES)
    s = np.array(shapes)
    assert s.min() >= 0.3 - 1e-6 and s.max() <= 0.5 + 1e-6
    assert np.all((s[:, 0] / s[:, 1] >= 0.5 - 1e-6) & (s[:, 0] / s[:, 1] <= 2 + 1e-6))


@pytest.mark.oracle
@pytest.mark.parametrize("kw", [KW, dict(KW, output_bbox_indices=True, bbox_prune_threshold=0.2),
                                dict(KW, threshold_type="overlap", allow_no_crop=False)], ids=range(3))
def test_random_outputs_have_dali_structure(kw):
    build = lambda fn, t, b, lab: fn.random_bbox_crop(b, lab, **kw)  # noqa: E731
    ours = run_graph("stoker", build, BOXES, LABELS)
    theirs = run_graph("dali", build, BOXES, LABELS)
    assert len(ours) == len(theirs)
    for k, (a_list, b_list) in enumerate(zip(ours, theirs)):
        for a, b in zip(a_list, b_list):
            assert a.dtype == b.dtype and a.ndim == b.ndim, f"output {k}"
            if k < 2:
                assert a.shape == b.shape


def test_bad_arguments_name_them():
    with pytest.raises(StokerError, match="random_bbox_crop.*'threshold_type'"):
        _run(dict(threshold_type="area"))
    with pytest.raises(StokerError, match="random_bbox_crop.*'scaling'"):
        _run(dict(scaling=[0.9, 0.1]))
    with pytest.raises(StokerError, match="random_bbox_crop.*'bbox_layout'"):
        _run(dict(bbox_layout="xyXQ"))
    with pytest.raises(StokerError, match="random_bbox_crop.*'ltrb'"):
        _run(dict(bbox_layout="xyXY", ltrb=True))


def test_boxes_outside_the_image_fail_clearly():
    bad = [np.array([[0.2, 0.2, 1.4, 0.5]], np.float32)] * 2
    with pytest.raises(StokerError, match="random_bbox_crop.*within"):
        _run(dict(), boxes=bad, labels=None)


def test_fixed_crop_shape_gives_absolute_window():
    ins = [np.array([200, 100], np.int32)] * BS
    crop = [np.array([120, 60], np.int32)] * BS
    anchors, shapes, out, _ = run_graph(
        "stoker", lambda fn, t, b, lab, i, c: fn.random_bbox_crop(b, lab, input_shape=i, crop_shape=c,
                                                                 allow_no_crop=False),
        BOXES, LABELS, ins, crop)
    for i, b in enumerate(BOXES):
        np.testing.assert_array_equal(shapes[i], [120, 60])
        np.testing.assert_array_equal(anchors[i], np.round(anchors[i]))  # whole pixels, as DALI
        assert np.all(anchors[i] >= 0) and np.all(anchors[i] + shapes[i] <= [200 + 1e-4, 100 + 1e-4])
        a_rel, s_rel = anchors[i] / [200, 100], shapes[i] / [200, 100]
        _, expected = _expected_boxes(b[:, :2], b[:, 2:], a_rel, s_rel)
        np.testing.assert_allclose(out[i], expected, atol=1e-5)


@pytest.mark.parametrize("lib", ["stoker", pytest.param("dali", marks=pytest.mark.oracle)])
def test_input_shape_makes_aspect_ratio_absolute(lib):
    """Same property for both libraries: windows are square in pixels, the width drawn from scaling."""
    ins = [np.array([200, 100], np.int32)] * BS
    _, shapes, *_ = run_graph(
        lib, lambda fn, t, b, i: fn.random_bbox_crop(b, input_shape=i, scaling=[0.2, 0.5], allow_no_crop=False),
        BOXES, ins)
    for s in shapes:
        np.testing.assert_allclose(s[0] * 200, s[1] * 100, rtol=1e-5)
        assert 0.2 - 1e-6 <= s[0] <= 0.5 + 1e-6


@pytest.mark.parametrize("lib", ["stoker", pytest.param("dali", marks=pytest.mark.oracle)])
def test_samples_without_boxes(lib):
    boxes = [np.zeros((0, 4), np.float32), BOXES[0]]
    labels = [np.zeros((0,), np.int32), LABELS[0]]
    anchors, shapes, out, lab = run_graph(
        lib, lambda fn, t, b, la: fn.random_bbox_crop(b, la, scaling=[0.5, 0.8], allow_no_crop=False), boxes, labels)
    assert out[0].shape == (0, 4) and lab[0].shape == (0,) and out[0].dtype == np.float32
    assert 0.5 - 1e-6 <= shapes[0][0] <= 0.8 + 1e-6
