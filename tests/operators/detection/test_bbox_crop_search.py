"""The batch paths of box_encoder and random_bbox_crop on inputs the other tests do not reach: SSD's
8732 anchors, many boxes per sample, empty samples among others, inverted boxes and degenerate
anchors (box_encoder's masked IoU); and random_bbox_crop's rounds that the batch search skips
without reading their draws (``BatchSearch._hopeless``) must be ones in which no window is valid."""

import numpy as np
import pytest

from stoker.operators.base import BatchContext, Operator
from stoker.operators.detection import _bbox_crop_search
from stoker.operators.schema import get_operator
from stoker.tensors import TensorListCPU

RNG = np.random.default_rng(7)
# (offsets from boxes or anchors of no extent: the same infinities and NaNs as per sample)
pytestmark = [pytest.mark.filterwarnings("ignore:divide by zero encountered:RuntimeWarning"),
              pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")]


def _make(name, seed=5, **kw):
    cls = get_operator(name)
    static, _ = cls.schema.bind(kw, lambda v: False)
    return cls(static, "cpu", op_seed=seed)


def _same_as_per_sample(op, inputs, iteration=0):
    """The batch path (which may not fall back to run_sample) equals run_sample to the bit."""
    n = len(inputs[0])

    def boom(*a, **k):
        raise AssertionError("the batch path fell back to run_sample")
    op.run_sample, keep = boom, op.run_sample
    try:
        fast = op.run_cpu(BatchContext(n, iteration), inputs, {})
    finally:
        op.run_sample = keep
    slow = Operator.run_cpu(op, BatchContext(n, iteration), inputs, {})
    for f, s in zip(fast, slow):
        for a, b in zip(f.samples(), s.samples()):
            a, b = np.asarray(a), np.asarray(b)
            assert a.dtype == b.dtype and a.shape == b.shape
            assert np.ascontiguousarray(a).tobytes() == np.ascontiguousarray(b).tobytes()


def _boxes(n, size=(0.02, 0.5)):
    lo = RNG.uniform(0, 0.9, (n, 2))
    hi = np.minimum(lo + RNG.uniform(*size, (n, 2)), 1.0)
    return np.concatenate([lo, hi], 1).astype(np.float32)


def _ssd_anchors():
    """SSD300's 8732 default boxes (ltrb, clipped to [0, 1])."""
    out = []
    for cells, s, s_next, ratios in ((38, .1, .2, (2,)), (19, .2, .37, (2, 3)), (10, .37, .54, (2, 3)),
                                     (5, .54, .71, (2, 3)), (3, .71, .88, (2,)), (1, .88, 1.05, (2,))):
        shapes = [(s, s), (np.sqrt(s * s_next),) * 2]
        shapes += [(s * np.sqrt(r), s / np.sqrt(r)) for r in ratios]
        shapes += [(s / np.sqrt(r), s * np.sqrt(r)) for r in ratios]
        c = (np.arange(cells) + 0.5) / cells
        for cy in c:
            for cx in c:
                out += [(cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2) for w, h in shapes]
    return np.clip(np.array(out), 0, 1).astype(np.float32)


@pytest.mark.parametrize("kw", [dict(), dict(criteria=0.0), dict(offset=True, scale=300.0, stds=[.1, .1, .2, .2])],
                         ids=str)
def test_box_encoder_ssd_anchors_many_and_no_boxes(kw):
    anchors = _ssd_anchors()
    assert anchors.shape == (8732, 4)
    op = _make("box_encoder", anchors=anchors.reshape(-1).tolist(), **kw)
    counts = [0, 3, 40, 0, 1, 12, 7, 0, 25, 2]
    boxes = [_boxes(c) for c in counts]
    boxes[4] = anchors[[100, 100, 5000]]  # ties: a box equal to anchors, twice
    labels = [RNG.integers(1, 80, len(b)).astype(np.int32) for b in boxes]
    _same_as_per_sample(op, [TensorListCPU(boxes), TensorListCPU(labels)])


def test_box_encoder_inverted_boxes_and_degenerate_anchors():
    """Boxes with right < left and an anchor of no area: union <= 0 happens, the IoU is 0 there."""
    anchors = np.concatenate([_boxes(30), [[0.5, 0.5, 0.5, 0.9], [0.2, 0.2, 0.2, 0.2]]]).astype(np.float32)
    boxes = [_boxes(5), _boxes(3)[:, [2, 1, 0, 3]], np.array([[0.5, 0.5, 0.5, 0.9]], np.float32), _boxes(0)]
    labels = [np.arange(len(b), dtype=np.int64) + 1 for b in boxes]
    for kw in (dict(), dict(criteria=0.0), dict(offset=True)):
        op = _make("box_encoder", anchors=anchors.reshape(-1).tolist(), **kw)
        _same_as_per_sample(op, [TensorListCPU(boxes), TensorListCPU(labels)])
        # only inverted boxes (every anchor with an area): the masked division for the batch alone
        _same_as_per_sample(op, [TensorListCPU(boxes[1:2]), TensorListCPU(labels[1:2])])


def _clustered(n, nd, most):
    """Samples of 0..most boxes around one centre each: high thresholds are sometimes met."""
    out = []
    for k in RNG.integers(0, most + 1, n):
        c = RNG.uniform(0.3, 0.7, nd)
        lo = np.clip(c - RNG.uniform(0.02, 0.3, (int(k), nd)), 0, 1)
        hi = np.clip(c + RNG.uniform(0.02, 0.3, (int(k), nd)), 0, 1)
        out.append(np.concatenate([lo, hi], 1).astype(np.float32))
    return out


def test_random_bbox_crop_skipped_rounds_have_no_valid_window(monkeypatch):
    """With the skip off, no round that _hopeless rules out finds a window (its bounds are sound),
    over random thresholds, scalings, aspect ratios and boxes; and with it on, the batch path still
    equals run_sample."""
    table = {}
    hopeless, rounds = _bbox_crop_search.BatchSearch._hopeless, _bbox_crop_search.BatchSearch._rounds

    def record(self, thresholds):
        table["h"], table["t"] = hopeless(self, thresholds), thresholds
        return None

    def check(self, rows, at, thr, k, track_best):
        res = rounds(self, rows, at, thr, k, track_best)
        if table["h"] is not None:
            ruled_out = table["h"][rows, np.searchsorted(table["t"], thr)]
            table["n"] = table.get("n", 0) + int(ruled_out.sum())
            table["found"] = table.get("found", 0) + int((ruled_out & res[0]).sum())  # (run_cpu would
        return res                                                                  # swallow a raise)

    for trial in range(40):
        nd = 3 if trial % 5 == 4 else 2
        kw = dict(thresholds=sorted(RNG.choice([0.0, 0.05, 0.1, 0.2, 0.3, 0.5, 0.6, 0.7, 0.9, 1.0],
                                               int(RNG.integers(1, 5)), False).tolist()),
                  scaling=[float(RNG.choice([0.05, 0.3])), float(RNG.choice([0.5, 1.0]))],
                  aspect_ratio=[float(RNG.choice([0.25, 1.0])), float(RNG.choice([1.0, 4.0]))],
                  num_attempts=int(RNG.choice([5, 50])), bbox_layout="xyzXYZ"[:nd] + "xyzXYZ"[3:3 + nd])
        op = _make("random_bbox_crop", seed=trial, **kw)
        boxes = _clustered(48, nd, int(RNG.choice([1, 3, 8])))
        _same_as_per_sample(op, [TensorListCPU(boxes)], iteration=trial)
        with monkeypatch.context() as m:
            m.setattr(_bbox_crop_search.BatchSearch, "_hopeless", record)
            m.setattr(_bbox_crop_search.BatchSearch, "_rounds", check)
            op.run_cpu(BatchContext(48, trial), [TensorListCPU(boxes)], {})
    assert table["n"] > 300  # (the check saw many rounds ruled out)
    assert table["found"] == 0, "a round ruled out found a window"
