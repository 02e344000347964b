"""The GPU coord_transform and box_encoder (stoker/operators/detection/gpu_coord_transform.py,
gpu_box_encoder.py) run end to end without a GPU, against the CPU operators, to the bit.

On the null device (tests/null_device.py) the GPU functions plan and upload as on a GPU; their
kernel launches run either the NumPy transcriptions of the kernels (gpu_box_kernels_model.py) or
the .cu files themselves compiled for the host with g++ (skipped without g++). Random batches
cover: 1..4 coordinates, 1-D / 2-D / 3-D points, empty samples, every input type, integer outputs
(halves, saturation), constant and per-sample M / T / MT of every accepted size; boxes with IoU
ties (duplicated boxes, anchors on a grid), zero-area and inverted boxes, samples without boxes,
boxes overlapping no anchor, several boxes claiming one anchor, labels of several types and shapes,
offsets with means / stds. Also: the CPU's errors for bad samples, one table upload per batch,
host calls that do not grow with the batch, no host fallback (but for per-frame matrices).
"""

import os
import sys

import gpu_box_kernels_model as model
import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
import null_device  # noqa: E402

from stoker.errors import OperatorError  # noqa: E402
from stoker.operators import gpu_registry  # noqa: E402
from stoker.operators.base import BatchContext  # noqa: E402
from stoker.operators.schema import get_operator  # noqa: E402
from stoker.tensors import TensorListCPU  # noqa: E402

DTYPES = [np.float32, np.float64, np.float16, np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32,
          np.int64, np.uint64]


@pytest.fixture(scope="module")
def host_built(tmp_path_factory):
    return model.host_kernels(tmp_path_factory.mktemp("box_kernels"))


@pytest.fixture(params=["model", "host_build"])
def device(request, monkeypatch, host_built):
    """The null device, its launches of the two modules' kernels emulated by the NumPy model or
    run by the host build of the .cu files."""
    kernels = model.MODELS if request.param == "model" else host_built
    if kernels is None:
        pytest.skip("no g++ to build the kernels for the host")
    gpu_registry.load_gpu_impls()
    with null_device.installed() as cp:
        for name, fn in kernels.items():
            monkeypatch.setitem(null_device.EMULATED, name, fn)
        yield cp


def make_ops(name, **kwargs):
    cls = get_operator(name)
    static, _ = cls.schema.bind(kwargs, lambda v: False)
    return cls(static, "gpu"), cls(static, "cpu")


def to_device(cp, samples, how):
    """Host samples as a TensorListGPU: "flat" (one buffer, gaps between samples) or "list"."""
    from stoker.tensors_gpu import TensorListGPU

    if how == "list":
        return TensorListGPU([cp.asarray(s) for s in samples], "")
    sizes = np.array([s.size for s in samples], np.int64)
    offsets = np.concatenate([[0], np.cumsum(sizes + 2)[:-1]]).astype(np.int64)
    buf = np.zeros(int(sizes.sum()) + 2 * len(samples) + 1, samples[0].dtype)
    for o, s in zip(offsets, samples):
        buf[o:o + s.size] = s.reshape(-1)
    shapes = np.asarray([s.shape for s in samples], np.int64).reshape(len(samples), -1)
    return TensorListGPU.from_flat(cp.asarray(buf), offsets, shapes, "")


def run_both(cp, name, kwargs, inputs, arg_inputs=None, how="flat"):
    """(GPU outputs, CPU outputs), each a list of lists of host arrays."""
    gpu_op, cpu_op = make_ops(name, **kwargs)
    arg_inputs = arg_inputs or {}
    n = len(inputs[0])
    before = dict(gpu_registry.FALLBACKS)
    got = gpu_op.run_gpu(BatchContext(batch_size=n), [to_device(cp, x, how) for x in inputs], arg_inputs)
    assert dict(gpu_registry.FALLBACKS) == before, "the host fallback ran"
    want = cpu_op.run_cpu(BatchContext(batch_size=n), [TensorListCPU(x, "") for x in inputs], arg_inputs)
    return [[np.asarray(s) for s in o.as_cpu().samples()] for o in got], [[np.asarray(s) for s in o.samples()]
                                                                         for o in want]


def assert_same(got, want, what):
    for k, (g_out, w_out) in enumerate(zip(got, want)):
        assert len(g_out) == len(w_out)
        for i, (g, w) in enumerate(zip(g_out, w_out)):
            assert g.shape == w.shape and g.dtype == w.dtype, (what, k, i, g.shape, w.shape, g.dtype, w.dtype)
            assert np.array_equal(g.view(np.uint8), w.view(np.uint8)) or np.array_equal(g, w, equal_nan=True), \
                (what, k, i, g, w)


# --- coord_transform ------------------------------------------------------------------------------

def _points(rng, n, in_dim, dtype, ndim):
    out = []
    for _ in range(n):
        count = int(rng.integers(0, 7)) if rng.random() < 0.8 else 0
        shape = {1: (count * in_dim,), 2: (count, in_dim), 3: (count, 2, in_dim)}[ndim]
        kind = np.dtype(dtype).kind
        if kind == "f":
            v = rng.normal(0, 50, shape) * (rng.random(shape) < 0.9)
            v = np.where(rng.random(shape) < 0.2, np.round(v * 2) / 2, v)  # halves: rounding
        else:
            info = np.iinfo(dtype)
            v = rng.integers(max(info.min, -300), min(info.max, 300), shape, endpoint=True)
        out.append(np.asarray(v).astype(dtype))
    return out


def _matrix_args(rng, n, in_dim):
    """Random M / T / MT, static or per sample, of every size the CPU takes."""
    out_dim = int(rng.integers(1, 5))
    names = ["MT"] if rng.random() < 0.3 else [k for k in ("M", "T") if rng.random() < 0.7]
    m_scalar = rng.random() < 0.3
    if "MT" not in names and (m_scalar or "M" not in names):
        out_dim = in_dim  # a scalar M (or none) keeps the dimension
    sizes = {"M": 1 if m_scalar else out_dim * in_dim, "T": int(rng.choice([1, out_dim])),
             "MT": int(rng.choice([1, out_dim * (in_dim + 1)]))}
    static, per_sample = {}, {}
    for k in names:
        size = sizes[k]
        vals = np.round(rng.normal(0, 2, (n, size)) * 4) / 4 if rng.random() < 0.5 else rng.normal(0, 2, (n, size))
        if rng.random() < 0.5:
            per_sample[k] = [v.astype(rng.choice([np.float32, np.float64])) for v in vals]
        else:
            static[k] = vals[0].tolist()
    return static, per_sample


@pytest.mark.parametrize("seed", range(6))
def test_coord_transform_random_batches(device, seed):
    rng = np.random.default_rng(seed)
    for case in range(40):
        dtype = DTYPES[int(rng.integers(0, len(DTYPES)))]
        in_dim, ndim, n = int(rng.integers(1, 5)), int(rng.integers(1, 4)), int(rng.integers(1, 6))
        if ndim == 1:
            in_dim = 1
        static, per_sample = _matrix_args(rng, n, in_dim)
        out_dtype = dtype if rng.random() < 0.5 else np.float32
        got, want = run_both(device, "coord_transform", dict(static, dtype=out_dtype),
                             [_points(rng, n, in_dim, dtype, ndim)], per_sample, ["flat", "list"][case % 2])
        assert_same(got, want, (seed, case, dtype, static, {k: len(v) for k, v in per_sample.items()}))


def test_coord_transform_integer_rounding_and_saturation(device):
    """Halves away from zero (and float32's own rounding of |v| + 0.5), saturation at each type's
    bounds where its float32 bounds are exact (8 and 16 bits; 32 bits below 2^31)."""
    pts = np.array([[0.5], [-0.5], [1.5], [-2.5], [0.49999997], [126.6], [127.5], [-128.5], [300], [-300]])
    for dtype in (np.int8, np.uint8, np.int16, np.uint16, np.int32, np.int64):
        x = [(pts if np.dtype(dtype).kind == "i" else np.abs(pts)).astype(np.float64).astype(dtype)]
        for scale in (1.0, 0.5, 1.5, 113.25):
            got, want = run_both(device, "coord_transform", dict(M=[scale], T=[0.25], dtype=dtype), [x])
            assert_same(got, want, (dtype, scale))


def test_coord_transform_ragged_in_dim_plans_sample_by_sample(device):
    x = [np.arange(6, dtype=np.float32).reshape(3, 2), np.arange(9, dtype=np.float32).reshape(3, 3)]
    got, want = run_both(device, "coord_transform", dict(M=[2.0], T=[1.0]), [x], how="list")
    assert_same(got, want, "ragged in_dim")
    got, want = run_both(device, "coord_transform", {}, [x], {"M": [np.eye(2).ravel() * 3, np.ones(6)]}, how="list")
    assert_same(got, want, "ragged in_dim, per-sample M")


@pytest.mark.parametrize("kwargs, per_sample, message", [
    (dict(M=[1, 2, 3]), None, "coord_transform: argument 'M': 3 values do not make rows of in_dim=2"),
    (dict(M=[1, 2, 3, 4], T=[1, 2, 3]), None, "argument 'T': 3 values do not match out_dim 2"),
    (dict(MT=[1, 2, 3, 4]), None, "argument 'MT': 4 values do not make rows of 3"),
    (dict(dtype=np.int16), None, "argument 'dtype' must be float32 or the input's type"),
    ({}, {"M": [np.ones(4), np.ones(5)]}, "argument 'M': 5 values do not make rows of in_dim=2"),
])
def test_coord_transform_errors_name_operator_and_sample(kwargs, per_sample, message):
    with null_device.installed() as cp:
        gpu_registry.load_gpu_impls()
        x = [np.ones((2, 2), np.float32), np.ones((3, 2), np.float32)]
        gpu_op, cpu_op = make_ops("coord_transform", **kwargs)
        ctx = BatchContext(batch_size=2, sources=["a.txt", "b.txt"])
        with pytest.raises(OperatorError, match=message) as e:
            gpu_op.run_gpu(ctx, [to_device(cp, x, "flat")], per_sample or {})
        assert e.value.sample_index == (1 if per_sample else 0)
        with pytest.raises(OperatorError, match=message):
            cpu_op.run_cpu(BatchContext(batch_size=2), [TensorListCPU(x, "")], per_sample or {})


# --- box_encoder ----------------------------------------------------------------------------------

def _anchors(rng):
    """A grid of anchors (many equal-IoU neighbours: ties), some random ones, a zero-area one."""
    g = np.linspace(0, 1, 5)[:-1]
    grid = np.array([[x, y, x + 0.25, y + 0.25] for y in g for x in g])
    rand = rng.uniform(0, 0.7, (int(rng.integers(0, 40)), 2))
    rand = np.concatenate([rand, rand + rng.uniform(0.05, 0.3, rand.shape)], 1)
    return np.concatenate([grid, rand, [[0.5, 0.5, 0.5, 0.5]]]).astype(np.float32)


def _boxes(rng, anchors, count):
    parts = []
    for _ in range(count):
        r = rng.random()
        if r < 0.25:  # an anchor itself, or shifted on the grid: IoU ties
            b = anchors[int(rng.integers(0, len(anchors)))] + np.float32(0.125) * int(rng.integers(0, 2))
        elif r < 0.35:  # zero area, or inverted
            x, y = rng.uniform(0, 1, 2)
            b = [x, y, x, y + 0.1] if rng.random() < 0.5 else [x + 0.1, y, x, y + 0.2]
        elif r < 0.45:  # outside every anchor
            b = [2.0, 2.0, 2.5, 2.5]
        else:
            lo = rng.uniform(0, 0.8, 2)
            b = np.concatenate([lo, lo + rng.uniform(0.01, 0.5, 2)])
        parts.append(np.asarray(b, np.float32))
    if count > 1 and rng.random() < 0.3:
        parts[-1] = parts[0].copy()  # a duplicate: two boxes claim one anchor
    return np.array(parts, np.float32).reshape(count, 4)


def _box_batch(rng, anchors, n, label_dtype, label_tail):
    boxes, labels = [], []
    for _ in range(n):
        count = int(rng.integers(0, 6)) if rng.random() < 0.85 else 0
        boxes.append(_boxes(rng, anchors, count))
        labels.append(rng.integers(1, 90, (count, *label_tail)).astype(label_dtype))
    return boxes, labels


@pytest.mark.parametrize("seed", range(5))
def test_box_encoder_random_batches(device, seed):
    rng = np.random.default_rng(100 + seed)
    for case in range(12):
        anchors = _anchors(rng)
        kw = dict(anchors=anchors.ravel().tolist(), criteria=float(rng.choice([0.0, 0.3, 0.5, 1.0])),
                  offset=bool(case % 2))
        if kw["offset"] and rng.random() < 0.7:
            kw.update(scale=float(rng.choice([1.0, 300.0])), means=rng.normal(0, 0.1, 4).tolist(),
                      stds=rng.choice([0.1, 0.2, 1.0], 4).tolist())
        if kw["offset"]:
            anchors[-1] += np.float32(0.0625) * np.array([0, 0, 1, 1], np.float32)  # offsets divide by anchor wh
            kw["anchors"] = anchors.ravel().tolist()
        ldtype = [np.int32, np.int64, np.float32, np.uint8][case % 4]
        tail = [(), (), (1,), (2,)][int(rng.integers(0, 4))]
        boxes, labels = _box_batch(rng, anchors, int(rng.integers(1, 6)), ldtype, tail)
        got, want = run_both(device, "box_encoder", kw, [boxes, labels], how=["flat", "list"][case % 2])
        assert_same(got, want, (seed, case))
        # (the CPU's batch path against its per-sample path, which defines the rules)
        cpu = make_ops("box_encoder", **kw)[1]
        for i, (b, lab) in enumerate(zip(boxes, labels)):
            enc, lab_out = cpu.run_sample((b, lab), cpu.args, None)
            assert np.array_equal(enc, want[0][i], equal_nan=True) and np.array_equal(lab_out, want[1][i])


def test_box_encoder_boxes_of_other_types_and_scalar_labels(device):
    rng = np.random.default_rng(7)
    anchors = _anchors(rng)
    boxes = [(_boxes(rng, anchors, 1) * 4).astype(np.float64), (_boxes(rng, anchors, 1) * 4).astype(np.float64)]
    labels = [np.array(3, np.int32), np.array(5, np.int32)]
    for dtype in (np.float64, np.float16, np.int32):
        got, want = run_both(device, "box_encoder", dict(anchors=(anchors * 4).ravel().tolist(), criteria=0.2),
                             [[b.astype(dtype) for b in boxes], labels], how="list")
        assert_same(got, want, dtype)


def test_box_encoder_no_boxes_anywhere_and_empty_shapes(device):
    anchors = _anchors(np.random.default_rng(3))
    labels = [np.zeros((0,), np.int32), np.zeros((0,), np.int32)]
    for shape in ((0, 4), (0,), (3, 0)):
        boxes = [np.zeros(shape, np.float32)] * 2
        for offset in (False, True):
            got, want = run_both(device, "box_encoder", dict(anchors=anchors.ravel().tolist(), offset=offset),
                                 [boxes, labels], how="list")
            assert_same(got, want, (shape, offset))


@pytest.mark.parametrize("boxes, labels, message", [
    ([np.zeros((2, 4)), np.zeros((2, 3))], [np.zeros(2), np.zeros(2)],
     r"expected boxes of shape \(N, 4\), got \(2, 3\)"),
    ([np.zeros((2, 4)), np.zeros((2, 4))], [np.zeros(2), np.zeros(3)], "2 boxes but 3 labels"),
])
def test_box_encoder_errors_name_operator_and_sample(boxes, labels, message):
    with null_device.installed() as cp:
        gpu_registry.load_gpu_impls()
        boxes = [b.astype(np.float32) for b in boxes]
        labels = [lab.astype(np.int32) for lab in labels]
        gpu_op, cpu_op = make_ops("box_encoder", anchors=[0, 0, 0.5, 0.5, 0.5, 0.5, 1, 1])
        ctx = BatchContext(batch_size=2, sources=["a.jpg", "b.jpg"])
        with pytest.raises(OperatorError, match=message) as e:
            gpu_op.run_gpu(ctx, [to_device(cp, boxes, "list"), to_device(cp, labels, "list")], {})
        assert e.value.sample_index == 1 and "b.jpg" in str(e.value)
        with pytest.raises(OperatorError, match=message):
            cpu_op.run_cpu(BatchContext(batch_size=2), [TensorListCPU(boxes, ""), TensorListCPU(labels, "")], {})


# --- the host half: tables, calls, no fallback -------------------------------------------------------

def _dense(cp, samples):
    """Samples back to back in one buffer, no gaps (a GPU operator's output form)."""
    from stoker.tensors_gpu import TensorListGPU

    sizes = np.array([s.size for s in samples], np.int64)
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    shapes = np.asarray([s.shape for s in samples], np.int64).reshape(len(samples), -1)
    return TensorListGPU.from_flat(cp.asarray(np.concatenate([s.reshape(-1) for s in samples])), offsets, shapes, "")


def test_one_table_per_batch(monkeypatch):
    from stoker.operators.detection import gpu_box_encoder, gpu_coord_transform

    gpu_registry.load_gpu_impls()
    with null_device.recording_uploads(monkeypatch, [gpu_coord_transform, gpu_box_encoder]) as tables:
        cp = sys.modules["cupy"]
        x = [np.ones((3, 2), np.float32), np.ones((0, 2), np.float32), np.ones((5, 2), np.float32)]
        op = make_ops("coord_transform", T=[1.0, 2.0])[0]
        op.run_gpu(BatchContext(batch_size=3), [_dense(cp, x)], {"M": [np.eye(2).ravel() * k for k in (1, 2, 3)]})
        assert len(tables) == 1
        rows = tables[0][:3 * 6].reshape(3, 6)
        assert rows.tolist() == [[0, 0, 6, 2, 2, 0], [6, 6, 0, 2, 2, 6], [6, 6, 10, 2, 2, 12]]
        assert tables[0][18:].view(np.float32)[6:12].tolist() == [2, 0, 1, 0, 2, 2]
        tables.clear()
        boxes = [np.full((2, 4), 0.5, np.float32), np.zeros((0, 4), np.float32), np.ones((1, 4), np.float32)]
        labels = [np.ones(2, np.int32), np.ones(0, np.int32), np.ones(1, np.int32)]
        op = make_ops("box_encoder", anchors=[0, 0, 1, 1, 0, 0, 0.5, 0.5])[0]
        op.run_gpu(BatchContext(batch_size=3), [_dense(cp, boxes), _dense(cp, labels)], {})
        assert len(tables) == 1  # (the anchors went up once, with the operator)
        assert tables[0].reshape(3, 5).tolist() == [[0, 2, 0, 4, 0], [2, 0, 8, 4, 8], [2, 1, 8, 4, 16]]
        assert [name for name, _, _ in null_device.LAUNCHES] == ["coord_transform", "box_best_anchor", "box_encode"]


@pytest.mark.parametrize("per_sample", [False, True], ids=["static", "per_sample"])
def test_host_calls_do_not_grow_with_the_batch(per_sample):
    """Python calls of one GPU call at 4 and 36 samples (ragged, one flat buffer): the host plan is
    whole-batch NumPy (a few calls of slack, none per sample)."""
    gpu_registry.load_gpu_impls()
    rng = np.random.default_rng(0)
    with null_device.installed() as cp:
        calls = {}
        for n in (4, 36):
            pts = [rng.normal(size=(int(rng.integers(0, 9)), 3)).astype(np.float32) for _ in range(n)]
            args = {"M": [np.eye(3).ravel()] * n, "T": [np.ones(3)] * n} if per_sample else {}
            op = make_ops("coord_transform", **({} if per_sample else dict(M=[2.0], T=[1.0, 2.0, 3.0])))[0]
            anchors = _anchors(rng)
            boxes, labels = _box_batch(rng, anchors, n, np.int32, ())
            enc = make_ops("box_encoder", anchors=anchors.ravel().tolist())[0]
            xs, bs, ls = _dense(cp, pts), _dense(cp, boxes), _dense(cp, labels)
            before = dict(gpu_registry.FALLBACKS)
            op.run_gpu(BatchContext(batch_size=n), [xs], args)  # (warm: kernels loaded, anchors up)
            enc.run_gpu(BatchContext(batch_size=n), [bs, ls], {})

            def once(n=n, op=op, enc=enc, xs=xs, bs=bs, ls=ls, args=args):
                op.run_gpu(BatchContext(batch_size=n), [xs], args)
                enc.run_gpu(BatchContext(batch_size=n), [bs, ls], {})

            calls[n] = null_device.python_calls(once)
            assert dict(gpu_registry.FALLBACKS) == before
        assert calls[36] - calls[4] <= 8, calls


def test_per_frame_matrices_take_the_host_fallback():
    """Per-frame M (fn.per_frame) is planned on the host for now: counted as a fallback."""
    from stoker.operators.per_frame import FrameArray

    gpu_registry.load_gpu_impls()
    with null_device.installed() as cp:
        op = make_ops("coord_transform")[0]
        before = gpu_registry.FALLBACKS["coord_transform"]
        (out,) = op.run_gpu(BatchContext(batch_size=1), [_dense(cp, [np.ones((2, 2), np.float32)])],
                            {"M": [np.stack([np.eye(2).ravel(), 2 * np.eye(2).ravel()]).view(FrameArray)]})
        assert gpu_registry.FALLBACKS["coord_transform"] == before + 1
        assert out.as_cpu().samples()[0].shape == (2, 2, 2)
