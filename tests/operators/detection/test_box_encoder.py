"""box_encoder against DALI's CPU operator."""

import numpy as np
import pytest
from oracle import check_samples as check  # layouts not compared
from oracle import run_graph_samples as run_graph  # samples only, no layouts

from stoker.errors import StokerError

RNG = np.random.default_rng(33)


def _boxes(n, size=(0.05, 0.4)):
    lo = RNG.uniform(0, 0.6, (n, 2))
    hi = np.minimum(lo + RNG.uniform(*size, (n, 2)), 1.0)
    return np.concatenate([lo, hi], 1).astype(np.float32)


def _grid_anchors():
    """SSD-like anchors: a 6x6 grid at two sizes plus random ones."""
    c = (np.arange(6) + 0.5) / 6
    cx, cy = np.meshgrid(c, c)
    out = []
    for s in (0.15, 0.3):
        out.append(np.stack([cx - s / 2, cy - s / 2, cx + s / 2, cy + s / 2], -1).reshape(-1, 4))
    out.append(_boxes(20))
    return np.clip(np.concatenate(out), 0, 1).astype(np.float32)


ANCHORS = _grid_anchors()
BOXES = [_boxes(int(n)) for n in (1, 3, 8, 2)] + [_boxes(5, (0.3, 0.6))]
LABELS = [RNG.integers(1, 20, len(b)).astype(np.int32) for b in BOXES]


@pytest.mark.oracle
@pytest.mark.parametrize("kw", [dict(), dict(criteria=0.3), dict(criteria=0.0), dict(criteria=0.9),
                                dict(offset=True), dict(offset=True, criteria=0.4, scale=300.0),
                                dict(offset=True, stds=[0.1, 0.1, 0.2, 0.2], means=[0.01, -0.02, 0.0, 0.1])],
                         ids=str)
def test_box_encoder_matches_dali(kw):
    anchors = ANCHORS.reshape(-1).tolist()
    check(lambda fn, t, b, lab: fn.box_encoder(b, lab, anchors=anchors, **kw), BOXES, LABELS,
          tol=2e-7 if kw.get("offset") else 0.0, what=str(kw))  # offsets: an ulp from DALI's log


@pytest.mark.oracle
def test_duplicate_boxes_and_shared_best_anchor_match_dali():
    b = _boxes(3)
    boxes = [np.concatenate([b, b[:1], b[:1] + 0.01]), b[[1, 1, 2]]]
    labels = [np.arange(len(x), dtype=np.int32) + 1 for x in boxes]
    anchors = ANCHORS.reshape(-1).tolist()
    check(lambda fn, t, bb, lab: fn.box_encoder(bb, lab, anchors=anchors, criteria=0.2), boxes, labels)


def test_every_box_claims_an_anchor():
    """Independent of DALI: even with criteria 1.0 each box's best anchor carries its label."""
    anchors = ANCHORS.reshape(-1).tolist()
    boxes, labels = BOXES[2], np.arange(1, 9, dtype=np.int32)
    _, (lab,) = run_graph("stoker", lambda fn, t, b, lab: fn.box_encoder(b, lab, anchors=anchors, criteria=1.0),
                          [boxes], [labels])
    assert sorted(set(lab[lab > 0].tolist())) == sorted(set(labels.tolist()))


def test_bad_anchors_name_the_argument():
    with pytest.raises(StokerError, match="box_encoder.*'anchors'"):
        run_graph("stoker", lambda fn, t, b, lab: fn.box_encoder(b, lab, anchors=[0.1, 0.2, 0.3]), BOXES, LABELS)
    with pytest.raises(StokerError, match="box_encoder.*'stds'"):
        run_graph("stoker", lambda fn, t, b, lab: fn.box_encoder(b, lab, anchors=[0, 0, 1, 1], stds=[1, 0, 1, 1]),
                  BOXES, LABELS)


@pytest.mark.oracle
def test_duplicate_anchors_match_dali():
    """A box whose best anchor appears twice: the tie is broken as DALI does."""
    anchors = np.concatenate([ANCHORS[:30], ANCHORS[:30], ANCHORS[30:]]).reshape(-1).tolist()
    check(lambda fn, t, b, lab: fn.box_encoder(b, lab, anchors=anchors, criteria=0.99), BOXES, LABELS)
    check(lambda fn, t, b, lab: fn.box_encoder(b, lab, anchors=anchors, criteria=0.1, offset=True), BOXES, LABELS,
          tol=1e-6)
