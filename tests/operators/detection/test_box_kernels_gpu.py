"""GPU coord_transform and box_encoder (stoker/operators/detection/gpu_coord_transform.py,
gpu_box_encoder.py) against the CPU operators through pipelines: ragged numbers of points and
boxes (empty samples among them), constant and per-sample M / T / MT, integer outputs, IoU ties,
offsets; the bad-argument errors naming the operator.

Tolerance: none. coord_transform does the CPU's float32 products and sums in its order (no FMA);
box_encoder its IoU, tie rules and encoding. The one step that could differ is box_encoder's log
of the width / height ratio (double log on both devices; CUDA's is within 1 ulp of the correctly
rounded one): a mismatch there, if ever, is in the last bit of an offset's w / h.
"""

import numpy as np
import pytest
from gpu_pipelines import compare_exact, load_gpu_module, run_pipeline

import stoker.fn as fn
from stoker import pipeline_def
from stoker.errors import StokerError
from stoker.operators import gpu_registry

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True, scope="module")
def _modules():
    load_gpu_module("stoker.operators.detection.gpu_coord_transform")
    load_gpu_module("stoker.operators.detection.gpu_box_encoder")


def _per_sample(values, dtype=np.float32):
    return fn.external_source(source=[[np.asarray(v, dtype) for v in values]], cycle=True)


def _points(rng, counts, dim, dtype=np.float32):
    return [(rng.normal(0, 40, (n, dim))).astype(dtype) for n in counts]


RAGGED = [3, 0, 7, 1, 12]


@pytest.mark.parametrize("kw", [dict(M=[2.5]), dict(M=[1, 2, 3, 4, 5, 6], T=[0.5, -1, 2]), dict(T=[3.0]),
                                dict(MT=[1, 0, 2, 0.5, 1, -3]), dict(MT=[0.75]), {}], ids=str)
def test_coord_transform_constant(kw, rng):
    compare_exact(lambda p: fn.coord_transform(p, **kw), _points(rng, RAGGED, 2), "coord_transform", "")


def test_coord_transform_per_sample_matrices(rng):
    ms = [rng.normal(size=6) for _ in RAGGED]
    ts = [rng.normal(size=2) for _ in RAGGED]
    mts = [rng.normal(size=(2, 4)) for _ in RAGGED]
    pts = _points(rng, RAGGED, 3)
    compare_exact(lambda p: fn.coord_transform(p, M=_per_sample(ms), T=_per_sample(ts)), pts, "coord_transform", "")
    compare_exact(lambda p: fn.coord_transform(p, MT=_per_sample(mts)), pts, "coord_transform", "")

    def scaled(p):  # a scalar M per sample
        return fn.coord_transform(p, M=_per_sample([[2.0], [0.5], [1], [3], [-1]]), T=[1, 2, 3])

    compare_exact(scaled, pts, "coord_transform", "")


@pytest.mark.parametrize("dtype", [np.int16, np.uint8, np.int32, np.float64, np.float16], ids=str)
def test_coord_transform_input_and_output_types(dtype, rng):
    pts = [np.clip(p, 0, 200).astype(dtype) for p in _points(rng, RAGGED, 2, np.float64)]
    for out in (dtype, np.float32):
        compare_exact(lambda p, out=out: fn.coord_transform(p, M=[0.5, 1.5, -0.25, 1], T=[0.5, 0.25], dtype=out), pts,
                      "coord_transform", "")


def test_coord_transform_bad_arguments_fail_like_the_cpu(rng):
    pts = _points(rng, [2, 3], 2)
    for gpu in (True, False):
        with pytest.raises(StokerError, match="coord_transform: argument 'M': 3 values do not make rows"):
            run_pipeline(lambda p: fn.coord_transform(p, M=[1, 2, 3]), [pts], gpu, "")
        with pytest.raises(StokerError, match="argument 'T': 3 values do not match out_dim 2"):
            run_pipeline(lambda p: fn.coord_transform(p, T=_per_sample([[1, 2], [1, 2, 3]])), [pts], gpu, "")


# --- box_encoder ---------------------------------------------------------------------------------

def _anchors():
    g = np.linspace(0, 1, 9)[:-1]
    small = [[x, y, x + 0.125, y + 0.125] for y in g for x in g]
    big = [[x, y, x + 0.5, y + 0.5] for y in g[::2] for x in g[::2]]
    return np.array(small + big, np.float32)


def _box_batch(rng, counts):
    boxes, labels = [], []
    for n in counts:
        lo = rng.uniform(0, 0.7, (n, 2))
        b = np.concatenate([lo, lo + rng.uniform(0.02, 0.4, (n, 2))], 1).astype(np.float32)
        if n > 2:
            b[1] = _anchors()[5] + np.float32(0.0625) * np.array([1, 0, 1, 0], np.float32)  # IoU ties
            b[2] = b[0]  # two boxes claiming one anchor
        boxes.append(b)
        labels.append(rng.integers(1, 80, n).astype(np.int32))
    return boxes, labels


def _run_encoder(boxes, labels, gpu, **kw):
    @pipeline_def(batch_size=len(boxes), num_threads=1, device_id=0, seed=1)
    def pipe():
        b = fn.external_source(source=[boxes], cycle=True)
        lab = fn.external_source(source=[labels], cycle=True)
        if gpu:
            b, lab = b.gpu(), lab.gpu()
        return tuple(fn.box_encoder(b, lab, anchors=_anchors().ravel().tolist(), **kw))

    p = pipe()
    p.build()
    outs = p.run()
    p.close()
    return [[np.asarray(a) for a in (o.as_cpu() if gpu else o).samples()] for o in outs]


@pytest.mark.parametrize("kw", [dict(), dict(criteria=0.3), dict(offset=True),
                                dict(offset=True, scale=300.0, means=[0.1, 0.0, -0.2, 0.05],
                                     stds=[0.1, 0.1, 0.2, 0.2])], ids=str)
def test_box_encoder_matches_cpu(kw, rng):
    boxes, labels = _box_batch(rng, [4, 0, 7, 1, 3])
    before = gpu_registry.FALLBACKS["box_encoder"]
    got = _run_encoder(boxes, labels, True, **kw)
    assert gpu_registry.FALLBACKS["box_encoder"] == before
    want = _run_encoder(boxes, labels, False, **kw)
    for g_out, w_out in zip(got, want):
        for g, w in zip(g_out, w_out):
            assert g.shape == w.shape and g.dtype == w.dtype
            np.testing.assert_array_equal(g, w)


def test_box_encoder_bad_labels_fail_like_the_cpu(rng):
    boxes, labels = _box_batch(rng, [2, 3])
    labels[1] = labels[1][:2]
    for gpu in (True, False):
        with pytest.raises(StokerError, match="box_encoder: 3 boxes but 2 labels"):
            _run_encoder(boxes, labels, gpu)
