"""image_slice's windows for a whole batch (the mixed decoder's hardware path) equal the
per-sample rule's, and a batch the batch rule refuses goes back to the per-sample rule."""

import numpy as np
import pytest

from stoker.operators.decoders import roi
from stoker.operators.schema import get_operator


def _per_sample(h, w, axes, anchors, shapes, na, ns):
    return np.array([roi.positional_slice_window(int(a), int(b), axes, an, sh, na, ns)
                     for a, b, an, sh in zip(h, w, anchors, shapes)], np.int64).reshape(-1, 4)


@pytest.mark.parametrize("axes", [[1, 0], [0, 1], [1], [0]])
@pytest.mark.parametrize("dtype,na,ns", [(np.float32, True, True), (np.float64, True, False),
                                         (np.int32, True, True), (np.float32, False, True)])
def test_batch_windows_match_sample_by_sample(axes, dtype, na, ns):
    rng = np.random.default_rng(len(axes) * 7 + int(na) + 2 * int(ns))
    n = 40
    h, w = rng.integers(20, 400, n), rng.integers(20, 400, n)
    if np.dtype(dtype).kind == "f" and na and ns:
        anchors = [rng.uniform(0, 0.5, len(axes)).astype(dtype) for _ in range(n)]
        shapes = [rng.uniform(0.1, 0.5, len(axes)).astype(dtype) for _ in range(n)]
    else:  # absolute values that fit
        lim = np.minimum(h, w)[:, None]
        anchors = [(rng.uniform(0, 0.4) * lim[i] * np.ones(len(axes))).astype(dtype) for i in range(n)]
        shapes = [(rng.uniform(0.1, 0.5) * lim[i] * np.ones(len(axes))).astype(dtype) for i in range(n)]
        if np.dtype(dtype).kind == "f":
            anchors = [a if not na else a / lim[i].astype(dtype) for i, a in enumerate(anchors)]
            shapes = [s if not ns else s / lim[i].astype(dtype) for i, s in enumerate(shapes)]
    want = _per_sample(h, w, axes, anchors, shapes, na, ns)
    got = roi.positional_slice_windows(h, w, axes, anchors, shapes, na, ns)
    np.testing.assert_array_equal(got, want)


def test_a_window_that_does_not_fit_is_left_to_the_per_sample_rule():
    h, w = np.array([100, 100]), np.array([100, 100])
    anchors = [np.float32([0.1, 0.1]), np.float32([0.8, 0.8])]
    shapes = [np.float32([0.5, 0.5]), np.float32([0.5, 0.5])]  # the second runs past its image
    with pytest.raises(ValueError):
        roi.positional_slice_windows(h, w, [1, 0], anchors, shapes)
    with pytest.raises(ValueError, match="does not fit"):
        _per_sample(h, w, [1, 0], anchors, shapes, True, True)


def test_decoder_batch_windows_keep_unknown_rows_empty_and_refuse_named_arguments():
    cls = get_operator("decoders.image_slice")
    static, _ = cls.schema.bind({}, lambda v: False)
    op = cls(static, "cpu")
    sizes = np.array([[100, 200], [0, 0], [50, 60]], np.int64)
    known = sizes[:, 0] > 0
    args = {op.ANCHOR_INPUT: [np.float32([0.1, 0.2])] * 3, op.SHAPE_INPUT: [np.float32([0.5, 0.4])] * 3}
    got = op.batch_windows(args, sizes, known)
    assert got[1].tolist() == [0, 0, 0, 0]
    for i in (0, 2):
        assert tuple(got[i]) == roi.positional_slice_window(int(sizes[i, 0]), int(sizes[i, 1]), op.axes,
                                                            args[op.ANCHOR_INPUT][i], args[op.SHAPE_INPUT][i])
    assert op.batch_windows({**args, "rel_start": [np.float32([0.1, 0.1])] * 3}, sizes, known) is None


def test_batch_windows_take_a_batch_held_as_one_array():
    """The mixed decoder hands image_slice's anchor and shape batches over as they are held: one
    (N, k) array (DenseRows) for a whole-batch operator's output. The windows equal those of the
    same values given sample by sample."""
    from stoker.tensors import DenseRows

    cls = get_operator("decoders.image_slice")
    static, _ = cls.schema.bind({}, lambda v: False)
    op = cls(static, "mixed")
    rng = np.random.default_rng(5)
    n = 30
    sizes = np.column_stack([rng.integers(50, 300, n), rng.integers(50, 300, n)])
    known = np.ones(n, bool)
    known[[3, 17]] = False  # (rows of unknown size stay zero)
    anchors = rng.uniform(0, 0.4, (n, 2)).astype(np.float32)
    shapes = rng.uniform(0.2, 0.5, (n, 2)).astype(np.float32)
    as_list = op.batch_windows({op.ANCHOR_INPUT: list(anchors), op.SHAPE_INPUT: list(shapes)}, sizes, known)
    as_rows = op.batch_windows({op.ANCHOR_INPUT: DenseRows(anchors), op.SHAPE_INPUT: DenseRows(shapes)},
                               sizes, known)
    assert as_list is not None and as_rows is not None
    np.testing.assert_array_equal(as_rows, as_list)
    assert not as_rows[[3, 17]].any() and (as_rows[known, 2:] > 0).all()
