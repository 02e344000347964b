"""random_bbox_crop, box_encoder and bb_flip compute a batch at once (run_cpu); the results must
equal the per-sample rule (run_sample, Operator.run_cpu) to the bit, and a bad sample must still
fail by itself, named."""

import numpy as np
import pytest

from stoker.errors import OperatorError
from stoker.operators.base import BatchContext, Operator
from stoker.operators.schema import get_operator
from stoker.tensors import TensorListCPU

RNG = np.random.default_rng(2024)
# zero-width boxes: log(0) in box_encoder's offsets, as in the per-sample path
pytestmark = pytest.mark.filterwarnings("ignore:divide by zero encountered in log:RuntimeWarning")


def _make(name, seed=12345, **kw):
    cls = get_operator(name)
    static, _ = cls.schema.bind(kw, lambda v: False)
    return cls(static, "cpu", op_seed=seed)


def _ctx(n, iteration, **kw):
    return BatchContext(n, iteration, **kw)


def _batch(op, inputs, arg_inputs=None, iteration=0, strict=True, **ctx):
    """(batch path outputs, per-sample outputs); with ``strict`` the batch path may not call run_sample."""
    n = len(inputs[0])
    arg_inputs = arg_inputs or {}
    if strict:
        def boom(*a, **k):
            raise AssertionError("the batch path fell back to run_sample")
        op.run_sample, keep = boom, op.run_sample
        try:
            fast = op.run_cpu(_ctx(n, iteration, **ctx), inputs, arg_inputs)
        finally:
            op.run_sample = keep
    else:
        fast = op.run_cpu(_ctx(n, iteration, **ctx), inputs, arg_inputs)
    slow = Operator.run_cpu(op, _ctx(n, iteration, **ctx), inputs, arg_inputs)
    return fast, slow


def _same(fast, slow):
    assert len(fast) == len(slow)
    for f, s in zip(fast, slow):
        assert len(f) == len(s)
        assert f.source_info() == s.source_info()
        for a, b in zip(f.samples(), s.samples()):
            a, b = np.asarray(a), np.asarray(b)
            assert a.dtype == b.dtype and a.shape == b.shape, (a, b)
            assert np.ascontiguousarray(a).tobytes() == np.ascontiguousarray(b).tobytes(), (a, b)


def _boxes(n, ndim=2, layout=None, size=(0.02, 0.6), dtype=np.float32):
    lo = RNG.uniform(0, 1 - size[0], (n, ndim))
    hi = np.minimum(lo + RNG.uniform(*size, (n, ndim)), 1.0)
    if RNG.random() < 0.3 and n:  # boxes touching the edge
        hi[-1, 0] = 1.0
    if RNG.random() < 0.2 and n:  # degenerate boxes (zero area) too
        hi[0] = lo[0]
    layout = layout or "xyzXYZ"[:ndim] + "xyzXYZ"[3:3 + ndim]
    out = np.empty((n, 2 * ndim))
    for d in range(ndim):
        out[:, layout.index("xyz"[d])] = lo[:, d]
        end = "XYZ"[d] if "XYZ"[d] in layout else "WHD"[d]
        out[:, layout.index(end)] = hi[:, d] if end in "XYZ" else hi[:, d] - lo[:, d]
    out = out.astype(dtype)
    for d in range(ndim):  # x + w may round above 1 (in float64, as checked): shrink w
        if "WHD"[d] in layout:
            x, w = out[:, layout.index("xyz"[d])], out[:, layout.index("WHD"[d])]
            while np.any(over := x.astype(np.float64) + w > 1):
                w[over] = np.nextafter(w[over], np.float32(0))
    return out


def _box_batch(bs, ndim=2, layout=None, most=9, dtype=np.float32):
    counts = RNG.integers(0, most, bs)
    counts[RNG.random(bs) < 0.15] = 0
    return [_boxes(int(c), ndim, layout, dtype=dtype) for c in counts]


def _rbc_config(case):
    rng = np.random.default_rng(case)
    ndim = 3 if case % 5 == 4 else 2
    kw = {}
    kw["thresholds"] = sorted(rng.choice([0.0, 0.1, 0.3, 0.5, 0.7, 0.9], int(rng.integers(1, 5)), False).tolist())
    lo = float(rng.choice([0.1, 0.3, 0.5]))
    kw["scaling"] = [lo, float(rng.choice([lo, 0.8, 1.0]))]
    if ndim == 2 or rng.random() < 0.5:
        kw["aspect_ratio"] = [float(rng.choice([0.5, 1.0])), float(rng.choice([1.0, 2.0]))]
    else:
        kw["aspect_ratio"] = [0.5, 2.0, 0.7, 1.5, 0.5, 2.0]
    kw["threshold_type"] = str(rng.choice(["iou", "overlap"]))
    kw["num_attempts"] = int(rng.choice([1, 5, 50]))
    kw["allow_no_crop"] = bool(rng.random() < 0.7)
    if not kw["allow_no_crop"] or rng.random() < 0.3:
        kw["total_num_attempts"] = int(rng.choice([1, 7, 60, 200]))
    kw["all_boxes_above_threshold"] = bool(rng.random() < 0.6)
    if rng.random() < 0.3:
        kw["bbox_prune_threshold"] = float(rng.choice([0.0, 0.3, 0.8]))
    kw["output_bbox_indices"] = bool(rng.random() < 0.5)
    layouts = ["xyXY", "xyWH", "XYxy", "yxHW"] if ndim == 2 else ["xyzXYZ", "xyzWHD"]
    layout = str(rng.choice(layouts))
    if layout == "xyWH" and rng.random() < 0.5:
        kw["ltrb"] = False
    elif layout != "xyXY" or rng.random() < 0.5:
        kw["bbox_layout"] = layout
    if rng.random() < 0.3:
        kw["input_shape"] = [int(v) for v in rng.integers(20, 400, ndim)]
        if rng.random() < 0.5:
            kw["crop_shape"] = [int(rng.integers(1, v + 1)) for v in kw["input_shape"]]
    return ndim, layout, kw


@pytest.mark.parametrize("case", range(60))
def test_random_bbox_crop_batch_equals_per_sample(case):
    ndim, layout, kw = _rbc_config(case)
    labels = case % 3 != 0
    op = _make("random_bbox_crop", seed=case * 7 + 1, _num_inputs=2 if labels else 1, **kw)
    for it in range(3):
        boxes = _box_batch(int(RNG.integers(1, 40)), ndim, layout, most=int(RNG.choice([2, 9, 30])))
        inputs = [TensorListCPU(boxes)]
        if labels:
            inputs.append(TensorListCPU([np.arange(len(b), dtype=np.int32)[:, None] * 3 + it for b in boxes]))
        _same(*_batch(op, inputs, iteration=it + case))


def test_random_bbox_crop_ssd_recipe_and_batch_contexts():
    kw = dict(aspect_ratio=[0.5, 2.0], thresholds=[0.0, 0.1, 0.3, 0.5, 0.7, 0.9], scaling=[0.3, 1.0],
              bbox_layout="xyXY", allow_no_crop=True, num_attempts=50)
    op = _make("random_bbox_crop", seed=99, _num_inputs=2, **kw)
    boxes = _box_batch(256)
    labels = [np.arange(len(b), dtype=np.int32) for b in boxes]
    inputs = [TensorListCPU(boxes, "", [f"s{i}" for i in range(256)]), TensorListCPU(labels)]
    for it in range(4):
        _same(*_batch(op, inputs, iteration=it, sources=[f"s{i}" for i in range(256)]))
    _same(*_batch(op, inputs, iteration=5, index_offset=300))  # a refilled batch
    _same(*_batch(op, inputs, iteration=5, sample_ids=list(range(3, 3 * 256 + 3, 3))))  # in a branch


def test_random_bbox_crop_empty_and_odd_inputs():
    op = _make("random_bbox_crop", thresholds=[0.5], allow_no_crop=False, num_attempts=10, _num_inputs=2)
    empty = [np.zeros((0,), np.float32) for _ in range(5)]
    _same(*_batch(op, [TensorListCPU(empty), TensorListCPU([np.zeros(0, np.int64)] * 5)]))
    op = _make("random_bbox_crop", thresholds=[0.5], num_attempts=10, _num_inputs=2)
    f64 = [b.astype(np.float64) for b in _box_batch(12)]  # cast to float32 first, as run_sample
    _same(*_batch(op, [TensorListCPU(f64), TensorListCPU([np.ones(len(b), np.float32) for b in f64])]))


def test_random_bbox_crop_per_sample_shapes():
    op = _make("random_bbox_crop", thresholds=[0.1, 0.3], scaling=[0.3, 1.0], aspect_ratio=[0.5, 2.0],
               num_attempts=10, shape_layout="HW")
    boxes = _box_batch(20)
    ins = [np.array([int(RNG.integers(50, 300)), int(RNG.integers(50, 300))], np.int32) for _ in boxes]
    _same(*_batch(op, [TensorListCPU(boxes)], {"input_shape": ins}, iteration=3))
    crop = [(s * RNG.uniform(0.2, 1.0, 2)).astype(np.int32) + 1 for s in ins]
    _same(*_batch(op, [TensorListCPU(boxes)], {"input_shape": ins, "crop_shape": crop}, iteration=4))


def test_random_bbox_crop_hard_samples_fall_back():
    # a threshold several boxes cannot all meet: the samples left searching go to run_sample, and
    # without total_num_attempts that raises for the first of them, named
    op = _make("random_bbox_crop", thresholds=[0.95], allow_no_crop=False, num_attempts=3,
               total_num_attempts=500)
    boxes = _box_batch(12, most=5)
    _same(*_batch(op, [TensorListCPU(boxes)], strict=False))
    op = _make("random_bbox_crop", thresholds=[0.99], allow_no_crop=False, num_attempts=100)
    whole, two = np.array([[0, 0, 1, 1]], np.float32), np.array([[0, 0, .2, .2], [.5, .5, .6, .6]], np.float32)
    boxes = [whole] * 3 + [two] + [whole] * 2  # the whole image is the only window (scaling [1, 1])
    with pytest.raises(OperatorError) as e:
        op.run_cpu(_ctx(6, 0), [TensorListCPU(boxes)], {})
    assert e.value.sample_index == 3 and "no valid crop window" in str(e.value)


def test_random_bbox_crop_bad_sample_is_named():
    op = _make("random_bbox_crop", thresholds=[0.3], num_attempts=10, _num_inputs=2)
    boxes = _box_batch(8, most=4)
    boxes[5] = np.array([[0.2, 0.2, 1.5, 0.4]], np.float32)  # outside [0, 1]
    labels = [np.zeros(len(b), np.int32) for b in boxes]
    with pytest.raises(OperatorError) as e:
        op.run_cpu(_ctx(8, 0), [TensorListCPU(boxes), TensorListCPU(labels)], {})
    assert e.value.sample_index == 5 and "within [0, 1]" in str(e.value)
    ctx = _ctx(8, 0, on_error="skip")  # on_error: the others still computed, as per sample
    out = op.run_cpu(ctx, [TensorListCPU(boxes), TensorListCPU(labels)], {})
    assert list(ctx.failures) == [5] and len(out[0]) == 7
    boxes[5] = _boxes(2)
    labels[2] = np.zeros(7, np.int32)  # labels that do not match the boxes
    with pytest.raises(OperatorError) as e:
        op.run_cpu(_ctx(8, 0), [TensorListCPU(boxes), TensorListCPU(labels)], {})
    assert e.value.sample_index == 2


# --- box_encoder ------------------------------------------------------------------------------

def _anchors(n_grid=6, extra=20):
    c = (np.arange(n_grid) + 0.5) / n_grid
    cx, cy = np.meshgrid(c, c)
    out = [np.stack([cx - s / 2, cy - s / 2, cx + s / 2, cy + s / 2], -1).reshape(-1, 4) for s in (0.15, 0.3)]
    out.append(_boxes(extra))
    return np.clip(np.concatenate(out), 0, 1).astype(np.float32)


def _iou_reference(a, b):
    """box_encoder's IoU as it was written before (per-sample results must not change)."""
    lt = np.maximum(a[:, None, :2], b[None, :, :2])
    rb = np.minimum(a[:, None, 2:], b[None, :, 2:])
    wh = np.clip(rb - lt, 0, None)
    inter = wh[..., 0] * wh[..., 1]
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    union = area_a[:, None] + area_b[None, :] - inter
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(union > 0, inter / union, np.float32(0)).astype(np.float32)


def test_iou_matrix_unchanged():
    from stoker.operators.detection.box_encoder import iou_matrix

    a = np.concatenate([_boxes(300), _anchors()[:5], np.zeros((2, 4), np.float32)])
    b = np.concatenate([_anchors(), a[:7]])
    assert iou_matrix(a, b).tobytes() == _iou_reference(a, b).tobytes()


BOX_ENCODER_ARGS = [dict(), dict(criteria=0.3), dict(criteria=0.0), dict(criteria=0.9), dict(criteria=1.0),
                    dict(offset=True), dict(offset=True, criteria=0.4, scale=300.0),
                    dict(offset=True, stds=[0.1, 0.1, 0.2, 0.2], means=[0.01, -0.02, 0.0, 0.1]),
                    dict(offset=True, scale=0.5, stds=[-1.0, 2.0, 0.3, 0.25])]


@pytest.mark.parametrize("kw", BOX_ENCODER_ARGS, ids=str)
def test_box_encoder_batch_equals_per_sample(kw):
    anchors = _anchors()
    op = _make("box_encoder", anchors=anchors.reshape(-1).tolist(), **kw)
    for it in range(4):
        boxes = _box_batch(int(RNG.integers(1, 60)), most=int(RNG.choice([2, 9, 25])))
        if it == 1:  # ties: repeated boxes and boxes equal to anchors (last box / last anchor wins)
            boxes[0] = np.concatenate([anchors[:3], anchors[:3], _boxes(2)])
            boxes[-1] = np.repeat(_boxes(2), 3, 0)
        labels = [RNG.integers(1, 80, len(b)).astype(np.int32) for b in boxes]
        if it == 2:  # labels with more axes, another dtype
            labels = [RNG.uniform(0, 1, (len(b), 3)).astype(np.float64) for b in boxes]
        _same(*_batch(op, [TensorListCPU(boxes), TensorListCPU(labels)], sources=[str(i) for i in range(len(boxes))]))
    empty = [np.zeros((0, 4), np.float32)] * 3
    _same(*_batch(op, [TensorListCPU(empty), TensorListCPU([np.zeros(0, np.int32)] * 3)]))
    empty = [np.zeros((0,), np.float32)] * 2  # 1D empty boxes
    _same(*_batch(op, [TensorListCPU(empty), TensorListCPU([np.zeros(0, np.int64)] * 2)]))


def test_box_encoder_bad_sample_is_named():
    op = _make("box_encoder", anchors=_anchors().reshape(-1).tolist())
    boxes = _box_batch(6, most=4)
    boxes[1] = _boxes(2)
    labels = [np.zeros(len(b), np.int32) for b in boxes]
    labels[1] = np.zeros(3, np.int32)
    with pytest.raises(OperatorError) as e:
        op.run_cpu(_ctx(6, 0), [TensorListCPU(boxes), TensorListCPU(labels)], {})
    assert e.value.sample_index == 1 and "2 boxes but 3 labels" in str(e.value)
    bad = [np.zeros((2, 3), np.float32), np.zeros((1, 3), np.float32), np.zeros((1, 4), np.float32)]
    with pytest.raises(OperatorError) as e:
        op.run_cpu(_ctx(3, 0), [TensorListCPU(bad), TensorListCPU([np.zeros(len(b), np.int32) for b in bad])], {})
    assert e.value.sample_index == 0 and "(N, 4)" in str(e.value)


# --- bb_flip ----------------------------------------------------------------------------------

@pytest.mark.parametrize("ltrb", [False, True])
def test_bb_flip_batch_equals_per_sample(ltrb):
    boxes = _box_batch(40, most=12) if ltrb else _box_batch(40, layout="xyWH", most=12)
    for kw in (dict(), dict(horizontal=0), dict(vertical=1), dict(horizontal=0, vertical=1)):
        op = _make("bb_flip", ltrb=ltrb, **kw)
        _same(*_batch(op, [TensorListCPU(boxes, "", [f"b{i}" for i in range(40)])],
                      sources=[f"b{i}" for i in range(40)]))
    op = _make("bb_flip", ltrb=ltrb)
    coins = [RNG.integers(0, 2, 40).astype(t) for t in (np.int32, np.bool_, np.float32, np.uint8)]
    for h, v in ((coins[0], None), (None, coins[1]), (coins[2], coins[3])):
        args = {k: [np.array(x) for x in c] for k, c in (("horizontal", h), ("vertical", v)) if c is not None}
        _same(*_batch(op, [TensorListCPU(boxes)], args))
        args = {k: [np.array([x]) for x in c] for k, c in (("horizontal", h), ("vertical", v)) if c is not None}
        _same(*_batch(op, [TensorListCPU(boxes)], args))  # (1,)-shaped flags
    shaped = [RNG.uniform(0, 0.5, (int(n), 2, 4)).astype(np.float64) for n in RNG.integers(0, 4, 10)]
    _same(*_batch(op, [TensorListCPU(shaped)], {"vertical": [np.array(i % 2) for i in range(10)]}))
    flat = [RNG.uniform(0, 0.5, 4 * int(n)).astype(np.float32) for n in RNG.integers(0, 4, 10)]
    _same(*_batch(op, [TensorListCPU(flat)]))


def test_bb_flip_bad_sample_is_named():
    op = _make("bb_flip", ltrb=True)
    boxes = [_boxes(2).reshape(-1) for _ in range(5)]
    boxes[3] = boxes[3][:6]
    with pytest.raises(OperatorError) as e:
        op.run_cpu(_ctx(5, 0), [TensorListCPU(boxes)], {})
    assert e.value.sample_index == 3 and "4 coordinates" in str(e.value)
    boxes[3] = boxes[2]
    flags = [np.array(1.0), np.array(0.0), np.array(0.5), np.array(1.0), np.array(0.0)]
    with pytest.raises(OperatorError) as e:
        op.run_cpu(_ctx(5, 0), [TensorListCPU(boxes)], {"horizontal": flags})
    assert e.value.sample_index == 2 and "whole numbers" in str(e.value)


# --- in a pipeline ----------------------------------------------------------------------------

def _ssd_outputs(threads, exec_async, iterations=3):
    import stoker
    import stoker.fn as fn

    boxes = _box_batch(64, most=9)
    labels = [RNG.integers(1, 80, (len(b), 1)).astype(np.int32) for b in boxes]
    anchors = _anchors().reshape(-1).tolist()

    @stoker.pipeline_def(batch_size=32, num_threads=threads, device_id=None, seed=7, exec_async=exec_async,
                         exec_pipelined=exec_async)
    def pipe():
        b = fn.external_source(source=lambda info: boxes[info.idx_in_epoch % 64], batch=False)
        lab = fn.external_source(source=lambda info: labels[info.idx_in_epoch % 64], batch=False)
        anchor, shape, b, lab = fn.random_bbox_crop(
            b, lab, aspect_ratio=[0.5, 2.0], thresholds=[0.0, 0.1, 0.3, 0.5, 0.7, 0.9], scaling=[0.3, 1.0],
            bbox_layout="xyXY", allow_no_crop=True, num_attempts=50)
        flip = fn.random.coin_flip(probability=0.5)
        b = fn.bb_flip(b, ltrb=True, horizontal=flip)
        enc, enc_lab = fn.box_encoder(b, lab, criteria=0.5, anchors=anchors, offset=True)
        return anchor, shape, b, lab, enc, enc_lab

    p = pipe()
    p.build()
    try:
        return [p.run() for _ in range(iterations)]
    finally:
        p.close()


@pytest.mark.parametrize("threads,exec_async", [(1, False), (4, True), (16, True)])
def test_ssd_pipeline_equals_per_sample(monkeypatch, threads, exec_async):
    from stoker.operators.detection.box_encoder import BoxEncoder
    from stoker.operators.detection.boxes import BbFlip
    from stoker.operators.detection.random_bbox_crop import RandomBBoxCrop

    def boom(*a, **k):
        raise AssertionError("the batch path fell back to run_sample")

    state = RNG.bit_generator.state
    with monkeypatch.context() as m:
        for cls in (RandomBBoxCrop, BbFlip, BoxEncoder):
            m.setattr(cls, "run_sample", boom)
        fast = _ssd_outputs(threads, exec_async)
    RNG.bit_generator.state = state
    for cls in (RandomBBoxCrop, BbFlip, BoxEncoder):  # the per-sample rule (fused where it can be)
        monkeypatch.setattr(cls, "run_cpu", Operator.run_cpu)
    slow = _ssd_outputs(threads, exec_async)
    for f, s in zip(fast, slow):
        _same(f, s)
