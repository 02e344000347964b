"""GPU bb_flip and coord_flip (stoker/operators/detection/gpu_boxes.py) against the CPU operators:
the same pipelines on both devices over batches of different box / point counts (an empty sample
among them), [x, y, w, h] and [l, t, r, b] boxes, every coordinate layout, static and per-sample
flags and centres, several input types; each GPU path called directly on the ways a device batch
is stored (one dense array, one buffer with gaps, a list of arrays, strided arrays); a host batch
through the host fallback; bad arguments and shapes failing as on the CPU.

Tolerance: none. Both devices cast the input to float32 the same way and then only add and
subtract float32 values in the same order (``1 - hi``, ``x + w``, ``hi - lo``, ``2c - x``), so the
GPU output must equal the CPU's to the bit."""

import numpy as np
import pytest
from gpu_pipelines import compare_exact, load_gpu_module, run_pipeline

import stoker.fn as fn
from stoker.errors import StokerError
from stoker.operators import gpu_registry

pytestmark = pytest.mark.gpu

MODULE = "stoker.operators.detection.gpu_boxes"


@pytest.fixture(autouse=True, scope="module")
def _gpu_boxes():
    load_gpu_module(MODULE)


def _const(values, dtype):
    """A per-sample argument input: one array per sample."""
    return fn.external_source(source=[[np.asarray(v, dtype) for v in values]], cycle=True)


def _boxes(rng, counts, ltrb, dtype=np.float32):
    """Relative boxes, some reaching past [0, 1]: ``count`` rows of 4 per sample."""
    out = []
    for n in counts:
        lo = rng.uniform(-0.1, 0.8, (n, 2))
        ext = rng.uniform(0.0, 0.5, (n, 2))
        out.append(np.concatenate([lo, lo + ext if ltrb else ext], 1).astype(dtype))
    return out


RAGGED = [3, 0, 7, 1, 12]  # boxes (or points) per sample, one sample empty
DENSE = [5, 5, 5]


# --- bb_flip ---------------------------------------------------------------------------------

@pytest.mark.parametrize("counts", [RAGGED, DENSE], ids=["ragged", "dense"])
@pytest.mark.parametrize("flags", [(1, 0), (0, 1), (1, 1), (0, 0)], ids=str)
@pytest.mark.parametrize("ltrb", [False, True], ids=["xywh", "ltrb"])
def test_bb_flip_matches_cpu(ltrb, flags, counts, rng):
    boxes = _boxes(rng, counts, ltrb)
    h, v = flags
    compare_exact(lambda b: fn.bb_flip(b, ltrb=ltrb, horizontal=h, vertical=v), boxes, "bb_flip", "")


@pytest.mark.parametrize("dtype", [np.float64, np.float16, np.int32, np.uint8], ids=str)
def test_bb_flip_of_other_input_types(dtype, rng):
    """The input is cast to float32 first, as the CPU's astype casts it."""
    scale = 7 if np.dtype(dtype).kind in "iu" else 1  # whole coordinates for the integer types
    boxes = [np.abs(b) * scale for b in _boxes(rng, RAGGED, True, np.float64)]
    compare_exact(lambda b: fn.bb_flip(b, ltrb=True, vertical=1), [b.astype(dtype) for b in boxes], "bb_flip", "")
    compare_exact(lambda b: fn.bb_flip(b, horizontal=1), [b.astype(dtype) for b in boxes], "bb_flip", "")


@pytest.mark.parametrize("ltrb", [False, True], ids=["xywh", "ltrb"])
def test_bb_flip_per_sample_flags(ltrb, rng):
    boxes = _boxes(rng, RAGGED, ltrb)
    hs, vs = [1, 0, 1, 0, 1], [0, 1, 1, 0, 1]

    def build(b):
        return fn.bb_flip(b, ltrb=ltrb, horizontal=_const(hs, np.int32), vertical=_const(vs, np.int32))

    compare_exact(build, boxes, "bb_flip", "")


def test_bb_flip_of_other_shapes(rng):
    """Any shape whose size is a multiple of 4 is read as consecutive boxes and keeps its shape."""
    grouped = [b.reshape(-1, 2, 4) for b in _boxes(rng, [4, 2, 6], False)]
    compare_exact(lambda b: fn.bb_flip(b, horizontal=1, vertical=1), grouped, "bb_flip", "")
    flat = [b.reshape(-1) for b in _boxes(rng, [3, 0, 2], True)]
    compare_exact(lambda b: fn.bb_flip(b, ltrb=True, horizontal=1), flat, "bb_flip", "")


def test_bb_flip_bad_shape_and_flag_fail_like_the_cpu(rng):
    bad = [np.zeros((2, 4), np.float32), np.zeros((3, 3), np.float32)]
    for gpu in (True, False):
        with pytest.raises(StokerError, match=r"bb_flip: expected boxes of 4 coordinates, got shape \(3, 3\)"):
            run_pipeline(lambda b: fn.bb_flip(b), [bad], gpu, "")
    boxes = _boxes(rng, [2, 3], False)
    for gpu in (True, False):
        with pytest.raises(StokerError, match="'horizontal' takes whole numbers per sample"):
            run_pipeline(lambda b: fn.bb_flip(b, horizontal=_const([1, 0.5], np.float32)), [boxes], gpu, "")


# --- coord_flip ------------------------------------------------------------------------------

def _points(rng, counts, ndim, dtype=np.float32):
    return [rng.uniform(-1, 2, (n, ndim)).astype(dtype) for n in counts]


COORD_CASES = {
    "x default": (1, dict(center_x=0.25)),
    "xy default": (2, dict()),
    "xy flip y": (2, dict(flip_x=0, flip_y=1)),
    "xy both, centres": (2, dict(flip_x=1, flip_y=1, center_x=0.2, center_y=3)),
    "yx": (2, dict(layout="yx", flip_x=1, center_x=0.1)),
    "xyz z only": (3, dict(flip_x=0, flip_z=1, center_z=-1.0)),
    "zxy": (3, dict(layout="zxy", flip_x=0, flip_y=1, flip_z=1, center_y=0.7)),
    "xz of 2": (2, dict(layout="xz", flip_z=1, center_z=1e-3)),
    "no flip": (3, dict(flip_x=0)),
}


@pytest.mark.parametrize("counts", [RAGGED, DENSE], ids=["ragged", "dense"])
@pytest.mark.parametrize("case", sorted(COORD_CASES))
def test_coord_flip_matches_cpu(case, counts, rng):
    ndim, kw = COORD_CASES[case]
    compare_exact(lambda p: fn.coord_flip(p, **kw), _points(rng, counts, ndim), "coord_flip", "")


@pytest.mark.parametrize("dtype", [np.float64, np.float16, np.int16], ids=str)
def test_coord_flip_of_other_input_types(dtype, rng):
    points = [(p * 100).astype(dtype) for p in _points(rng, RAGGED, 2, np.float64)]
    compare_exact(lambda p: fn.coord_flip(p, flip_y=1, center_x=3.3), points, "coord_flip", "")


def test_coord_flip_per_sample_flags_and_centres(rng):
    points = _points(rng, RAGGED, 3)

    def build(p):
        return fn.coord_flip(p, flip_x=_const([1, 0, 1, 1, 0], np.int32), flip_z=_const([0, 1, 1, 0, 1], np.int32),
                             center_x=_const([0.3, -2.0, 0.1, 7.25, 0.5], np.float32),
                             center_z=_const([1.0, 0.45, -0.3, 0.0, 2.5], np.float32), flip_y=1)

    compare_exact(build, points, "coord_flip", "")


def test_coord_flip_bad_layout_and_shapes_fail_like_the_cpu(rng):
    points = _points(rng, [3, 2], 2)
    for gpu in (True, False):
        with pytest.raises(StokerError, match="coord_flip: argument 'layout'"):
            run_pipeline(lambda p: fn.coord_flip(p, layout="xx"), [points], gpu, "")
        with pytest.raises(StokerError, match="coord_flip: layout 'xyz' does not match 2 coordinates per point"):
            run_pipeline(lambda p: fn.coord_flip(p, layout="xyz"), [points], gpu, "")
        with pytest.raises(StokerError, match=r"coord_flip: expected coordinates of shape \(N, 1..3\), got \(6,\)"):
            run_pipeline(lambda p: fn.coord_flip(p), [[p.reshape(-1) for p in _points(rng, [3, 2], 2)]], gpu, "")


# --- each way of storing a device batch, empty batches, the host fallback ------------------------

def _stored(cp, samples, how: str):
    """``samples`` as a TensorListGPU: "dense" (one (N, ...) array), "flat" (one buffer, junk
    between the samples), "list" (one array per sample) or "strided" (non-contiguous views)."""
    from stoker.tensors_gpu import TensorListGPU

    if how == "dense":
        return TensorListGPU(cp.asarray(np.stack(samples)), "")
    if how == "list":
        return TensorListGPU([cp.asarray(s) for s in samples], "")
    if how == "strided":
        return TensorListGPU([cp.asarray(np.repeat(s, 2, axis=0))[::2] for s in samples], "")
    gap = 3
    sizes = np.array([s.size for s in samples], np.int64)
    offsets = np.concatenate([[0], np.cumsum(sizes + gap)[:-1]]).astype(np.int64)
    buf = np.full(int(sizes.sum()) + gap * len(samples), 9, samples[0].dtype)
    for o, s in zip(offsets, samples):
        buf[o:o + s.size] = s.reshape(-1)
    shapes = np.asarray([s.shape for s in samples], np.int64).reshape(len(samples), -1)
    return TensorListGPU.from_flat(cp.asarray(buf), offsets, shapes, "")


def _op(name, **kwargs):
    from stoker.operators.schema import get_operator

    cls = get_operator(name)
    static, _ = cls.schema.bind(kwargs, lambda v: False)
    return cls(static, "gpu"), cls(static, "cpu")


def _direct(name, kwargs, samples, x, batch_ctx):
    """The GPU function on device batch ``x`` and the CPU operator on ``samples``: equal."""
    from stoker.operators.base import BatchContext
    from stoker.tensors import TensorListCPU

    gpu_op, cpu_op = _op(name, **kwargs)
    (got,) = gpu_op.run_gpu(batch_ctx, [x], {})
    (want,) = cpu_op.run_cpu(BatchContext(batch_size=len(samples)), [TensorListCPU(samples, "")], {})
    batch_ctx.stream.synchronize()
    assert got.layout() == want.layout() and len(got) == len(want)
    for a, b in zip(got.as_cpu().samples(), want.samples()):
        a, b = np.asarray(a), np.asarray(b)
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("how", ["dense", "flat", "list", "strided"])
def test_each_storage_of_the_input_batch(how, rng, batch_ctx, cp):
    counts = DENSE if how == "dense" else RAGGED
    before = (gpu_registry.FALLBACKS["bb_flip"], gpu_registry.FALLBACKS["coord_flip"])
    for ltrb in (False, True):
        boxes = _boxes(rng, counts, ltrb)
        _direct("bb_flip", dict(ltrb=ltrb, horizontal=1, vertical=1), boxes, _stored(cp, boxes, how), batch_ctx)
    points = _points(rng, counts, 3, np.float64)
    _direct("coord_flip", dict(layout="yzx", flip_x=1, flip_z=1, center_z=0.8), points, _stored(cp, points, how),
            batch_ctx)
    assert (gpu_registry.FALLBACKS["bb_flip"], gpu_registry.FALLBACKS["coord_flip"]) == before


def test_empty_batches_and_all_empty_samples(batch_ctx, cp):
    from stoker.tensors_gpu import TensorListGPU

    for name in ("bb_flip", "coord_flip"):
        (out,) = _op(name)[0].run_gpu(batch_ctx, [TensorListGPU([], "")], {})
        assert len(out) == 0
    empty = [np.zeros((0, 4), np.float32), np.zeros((0, 4), np.float32)]
    _direct("bb_flip", dict(horizontal=1), empty, _stored(cp, empty, "list"), batch_ctx)
    _direct("coord_flip", dict(layout="xyz"), [e[:, :3] for e in empty], _stored(cp, [e[:, :3] for e in empty],
                                                                                 "list"), batch_ctx)


def test_a_host_batch_takes_the_host_fallback(rng, batch_ctx):
    """A host batch (only in a direct call: a pipeline uploads it) runs the CPU operator, counted."""
    from stoker.operators.base import BatchContext
    from stoker.tensors import TensorListCPU

    boxes = _boxes(rng, RAGGED, False)
    for name, kw in (("bb_flip", dict(vertical=1)), ("coord_flip", dict(flip_y=1, center_y=0.1))):
        samples = boxes if name == "bb_flip" else [b[:, :2].copy() for b in boxes]
        gpu_op, cpu_op = _op(name, **kw)
        before = gpu_registry.FALLBACKS[name]
        (got,) = gpu_op.run_gpu(batch_ctx, [TensorListCPU(samples, "")], {})
        assert gpu_registry.FALLBACKS[name] == before + 1
        (want,) = cpu_op.run_cpu(BatchContext(batch_size=len(samples)), [TensorListCPU(samples, "")], {})
        for a, b in zip(got.as_cpu().samples(), want.samples()):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
