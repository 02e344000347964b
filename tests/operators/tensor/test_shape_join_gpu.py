"""GPU squeeze, expand_dims, reinterpret, cast_like, cat and stack (stoker/operators/tensor/
gpu_shape_join.py) against the CPU operators: the same pipelines on both devices, batches of one
sample shape (dense) and of several (ragged), several inputs for cat/stack and cast_like.

All exact: the first three only view the input's bytes (their outputs must also be views of the
input's device memory), cat and stack only copy, and cast_like is the GPU cast, whose rounding
and saturation are the CPU's."""

import numpy as np
import pytest
from gpu_pipelines import load_gpu_module, run_pipeline

import stoker.fn as fn
import stoker.types as types
from stoker.errors import StokerError
from stoker.operators import gpu_registry
from stoker.operators.base import BatchContext
from stoker.operators.schema import get_operator
from stoker.tensors import TensorListCPU

pytestmark = pytest.mark.gpu

MODULE = "stoker.operators.tensor.gpu_shape_join"


@pytest.fixture(autouse=True, scope="module")
def _load_module():
    load_gpu_module(MODULE)


def _compare(build, batches, name: str, layout: str = "HWC", kernel: bool = True) -> list:
    """``build`` over ``batches`` (one external source each) on both devices: the same samples to
    the bit, the same layout; with ``kernel``, operator ``name``'s GPU code ran (no host fallback).
    Returns the GPU samples."""
    before = gpu_registry.FALLBACKS[name]
    (got, got_layout), = run_pipeline(build, batches, True, layout)
    if kernel:
        assert gpu_registry.FALLBACKS[name] == before, "the host fallback ran instead of the GPU code"
    (want, want_layout), = run_pipeline(build, batches, False, layout)
    assert got_layout == want_layout
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)
    return got


def _fails_alike(build, batches, match: str, layout: str = "HWC") -> None:
    for gpu in (True, False):
        with pytest.raises(StokerError, match=match):
            run_pipeline(build, batches, gpu, layout)


def _per_sample(values, dtype=np.int32):
    """A per-sample input: one array per sample."""
    return fn.external_source(source=[[np.asarray(v, dtype) for v in values]], cycle=True)


def _batch(rng, shapes, dtype=np.uint8):
    if np.dtype(dtype).kind == "f":
        return [rng.normal(0, 100, s).astype(dtype) for s in shapes]
    return [rng.integers(0, 200, s).astype(dtype) for s in shapes]


SAME = [(1, 6, 1)] * 3
RAGGED = [(1, 6, 1), (1, 2, 1), (1, 9, 1), (1, 0, 1)]  # the last sample holds no element


# --- squeeze, expand_dims --------------------------------------------------------------------

@pytest.mark.parametrize("shapes", [SAME, RAGGED], ids=["dense", "ragged"])
@pytest.mark.parametrize("kw", [dict(axes=[0]), dict(axes=[0, 2]), dict(axes=[-1]), dict(axis_names="C"),
                                dict(axis_names="HC")], ids=str)
@pytest.mark.parametrize("dtype", [np.uint8, np.float32], ids=["u8", "f32"])
def test_squeeze_matches_cpu(kw, shapes, dtype, rng):
    _compare(lambda x: fn.squeeze(x, **kw), [_batch(rng, shapes, dtype)], "squeeze")


def test_squeeze_per_sample_axes(rng):
    axes = [[0], [2], [0], [-1]]  # every output 2-D: a batch holds one rank

    def build(x):
        return fn.squeeze(x, axes=_per_sample(axes))

    _compare(build, [_batch(rng, RAGGED)], "squeeze")


@pytest.mark.parametrize("shapes", [SAME, RAGGED], ids=["dense", "ragged"])
@pytest.mark.parametrize("kw", [dict(axes=[0, 3], new_axis_names="FX"), dict(axes=[3, 0], new_axis_names="FX"),
                                dict(axes=[1]), dict(axes=[3], new_axis_names="Z")], ids=str)
def test_expand_dims_matches_cpu(kw, shapes, rng):
    _compare(lambda x: fn.expand_dims(x, **kw), [_batch(rng, shapes, np.int16)], "expand_dims")


# --- reinterpret -------------------------------------------------------------------------------

X32_SAME = [(2, 3)] * 3
X32_RAGGED = [(2, 3), (4, 3), (0, 3), (1, 3)]


@pytest.mark.parametrize("shapes", [X32_SAME, X32_RAGGED], ids=["dense", "ragged"])
@pytest.mark.parametrize("kw", [
    dict(dtype=types.UINT8), dict(dtype=types.UINT8, rel_shape=[1, 4], layout="AB"), dict(dtype=types.FLOAT),
    dict(shape=[-1]), dict(src_dims=[1, -1, 0], layout="WXH"), dict(dtype=types.INT16, rel_shape=[2, 1]),
    dict(dtype=types.INT64), dict(dtype=types.INT16, shape=[-1])], ids=str)
def test_reinterpret_matches_cpu(kw, shapes, rng):
    batch = [rng.integers(-2**31, 2**31 - 1, s).astype(np.int32) for s in shapes]
    if kw.get("dtype") == types.INT64:  # rows of 3 int32 hold 12 bytes: regrouped in rows of 2 (8 bytes)
        batch = [b.reshape(-1)[:b.size // 2 * 2].reshape(-1, 2) for b in batch]
    _compare(lambda x: fn.reinterpret(x, **kw), [batch], "reinterpret", "HW")


def test_reinterpret_shape_as_input_and_argument(rng):
    """The new shape as a second input (downloaded from the device) and as a per-sample argument."""
    batch = _batch(rng, [(2, 6), (4, 6), (1, 6)], np.int32)
    as_int16 = [[3, -1], [-1, 2], [12, 1]]  # 24, 48 and 12 int16 elements
    _compare(lambda x: fn.reinterpret(x, _per_sample(as_int16), dtype=types.INT16), [batch], "reinterpret", "HW")
    as_int32 = [[3, -1], [-1, 2], [6, 1]]  # 12, 24 and 6 int32 elements
    _compare(lambda x: fn.reinterpret(x, shape=_per_sample(as_int32)), [batch], "reinterpret", "HW")


# --- cast_like ---------------------------------------------------------------------------------

@pytest.mark.parametrize("same_size", [True, False], ids=["dense", "ragged"])
@pytest.mark.parametrize("src,dst", [(np.float32, np.uint8), (np.float32, np.int8), (np.float64, np.int16),
                                     (np.int32, np.uint8), (np.int16, np.uint16), (np.uint16, np.int8),
                                     (np.uint8, np.float32), (np.float32, np.float16)], ids=str)
def test_cast_like_matches_cpu(src, dst, same_size, rng):
    shapes = [(3, 5)] * 3 if same_size else [(3, 5), (1, 7), (0, 2), (4, 4)]
    if np.dtype(src).kind == "f":
        data = [(rng.normal(0, 300, s)).astype(src) for s in shapes]
        data[0].reshape(-1)[:6] = [0.5, -0.5, 1.5, -2.5, 254.5, 1e9]  # ties and saturation
    else:
        info = np.iinfo(src)
        data = [rng.integers(info.min, int(info.max) + 1, s).astype(src) for s in shapes]
    refs = [np.zeros((1, 1), dst) for _ in shapes]
    _compare(lambda x, r: fn.cast_like(x, r), [data, refs], "cast_like", "HW")


# --- cat, stack -------------------------------------------------------------------------------

def _inputs(rng, k: int, shapes, grow_axis: int | None, dtype=np.float32):
    """``k`` batches of ``shapes``; input j's samples are j longer along ``grow_axis``."""
    out = []
    for j in range(k):
        sh = shapes if grow_axis is None else [tuple(e + j if a == grow_axis else e for a, e in enumerate(s))
                                               for s in shapes]
        out.append(_batch(rng, sh, dtype))
    return out


IMAGES_SAME = [(4, 5, 3)] * 3
IMAGES_RAGGED = [(4, 5, 3), (2, 7, 3), (6, 1, 3), (3, 0, 3)]


@pytest.mark.parametrize("k", [1, 2, 3])
@pytest.mark.parametrize("shapes", [IMAGES_SAME, IMAGES_RAGGED], ids=["dense", "ragged"])
@pytest.mark.parametrize("kw,grow", [(dict(axis=0), 0), (dict(axis=1), 1), (dict(axis=-1), 2),
                                     (dict(axis_name="W"), 1), (dict(axis_name="C"), None)], ids=str)
def test_cat_matches_cpu(kw, grow, shapes, k, rng):
    _compare(lambda *xs: fn.cat(*xs, **kw), _inputs(rng, k, shapes, grow), "cat")


@pytest.mark.parametrize("k", [1, 2, 3])
@pytest.mark.parametrize("shapes", [IMAGES_SAME, IMAGES_RAGGED], ids=["dense", "ragged"])
@pytest.mark.parametrize("kw", [dict(axis=0), dict(axis=1, axis_name="X"), dict(axis=3, axis_name="F"),
                                dict(axis=-1), dict(axis=2)], ids=str)
def test_stack_matches_cpu(kw, shapes, k, rng):
    _compare(lambda *xs: fn.stack(*xs, **kw), _inputs(rng, k, shapes, None, np.int16), "stack")


def test_cat_of_a_dense_and_a_ragged_input(rng):
    """One input of one shape, one ragged along the joined axis: the per-sample path."""
    first = _batch(rng, [(4, 3, 3)] * 3)
    second = _batch(rng, [(4, 1, 3), (4, 6, 3), (4, 3, 3)])
    _compare(lambda x, y: fn.cat(x, y, x, axis=1), [first, second], "cat")


def test_many_inputs(rng):
    batches = [_batch(rng, [(3, 4), (2, 5)], np.uint8) for _ in range(5)]
    _compare(lambda *xs: fn.cat(*xs, axis=0), batches, "cat", "HW")
    _compare(lambda *xs: fn.stack(*xs, axis=2, axis_name="S"), batches, "stack", "HW")


# --- errors as on the CPU ---------------------------------------------------------------------

def test_bad_arguments_fail_as_on_the_cpu(rng):
    images = _batch(rng, [(1, 4, 1), (1, 2, 1)])
    _fails_alike(lambda x: fn.squeeze(x, axes=[1]), [images], r"squeeze.*'axes'.*extent 4")
    _fails_alike(lambda x: fn.expand_dims(x, axes=[7]), [images], r"expand_dims.*'axes'")
    ints = _batch(rng, [(2, 3), (4, 3)], np.int32)
    _fails_alike(lambda x: fn.reinterpret(x, shape=[5]), [ints], r"reinterpret.*'shape'", "HW")
    odd = _batch(rng, [(1, 3), (3, 3)], np.int32)  # 12 and 36 bytes: not whole numbers of int64
    _fails_alike(lambda x: fn.reinterpret(x, dtype=types.INT64), [odd], r"reinterpret.*'dtype'.*12 bytes", "HW")
    _fails_alike(lambda x: fn.reinterpret(x, layout="ABC"), [ints], r"reinterpret.*'layout'", "HW")
    a = _batch(rng, [(2, 3, 3), (4, 1, 3)], np.float32)
    b = _batch(rng, [(2, 5, 3), (4, 2, 3)], np.float32)
    _fails_alike(lambda x, y: fn.cat(x, y, axis=0), [a, b], r"cat: the inputs' shapes")
    _fails_alike(lambda x, y: fn.stack(x, y), [a, b], r"stack: the inputs' shapes differ")
    _fails_alike(lambda x, y: fn.stack(x, y, axis=5), [a, a], r"stack: argument 'axis'")
    _fails_alike(lambda x, y: fn.cat(x, y, axis_name="Q"), [a, a], r"cat: argument 'axis_name'")
    ints3 = [s.astype(np.int16) for s in a]
    _fails_alike(lambda x, y: fn.cat(x, y, axis=1), [a, ints3], r"cat: input 1 has type int16")


# --- direct calls: views, flat batches, empty batches, the host fallback -----------------------

def _op(name: str, **kw):
    cls = get_operator(name)
    static, _ = cls.schema.bind(kw, lambda v: False)
    return cls(static, "gpu")


def _cpu(op, inputs) -> tuple[list, str]:
    (out,) = op.run_cpu(BatchContext(len(inputs[0])), [TensorListCPU(x.as_cpu().samples(), x.layout())
                                                        for x in inputs], {})
    return out.samples(), out.layout()


def _assert_same(out, want):
    samples, layout = want
    host = out.as_cpu().samples()
    assert out.layout() == layout and len(host) == len(samples)
    for g, w in zip(host, samples):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)


def _flat(cp, samples, layout: str, gap: int):
    """A flat batch (one buffer, ``gap`` unused elements before each sample)."""
    from stoker.tensors_gpu import TensorListGPU

    offsets, pos = [], 0
    for s in samples:
        pos += gap
        offsets.append(pos)
        pos += s.size
    buf = cp.zeros(pos + 1, samples[0].dtype)
    for s, o in zip(samples, offsets):
        buf[o:o + s.size] = cp.asarray(s.reshape(-1))
    shapes = np.asarray([s.shape for s in samples], np.int64)
    return TensorListGPU.from_flat(buf, offsets, shapes, layout)


def test_views_share_the_input_memory(cp, batch_ctx, rng):
    """squeeze, expand_dims and reinterpret return views of the input's device memory, for dense
    and flat batches; a flat batch stays one buffer."""
    from stoker.operators.tensor import gpu_shape_join as g
    from stoker.tensors_gpu import TensorListGPU

    same = _batch(rng, [(1, 4, 2)] * 3)
    ragged = _batch(rng, [(1, 4, 2), (1, 2, 2), (1, 6, 2)])
    batches = [TensorListGPU(cp.asarray(np.stack(same)), "HWC"), _flat(cp, ragged, "HWC", 0),
               _flat(cp, ragged, "HWC", 4), TensorListGPU([cp.asarray(s) for s in ragged], "HWC")]
    ops = [(g.gpu_squeeze, _op("squeeze", axes=[0])), (g.gpu_expand_dims, _op("expand_dims", axes=[0, 4])),
           (g.gpu_reinterpret, _op("reinterpret", dtype=types.INT16)),
           (g.gpu_reinterpret, _op("reinterpret", dtype=types.INT32, shape=[-1]))]
    for x in batches:
        for impl, op in ops:
            (out,) = impl(op, batch_ctx, [x], {})
            batch_ctx.stream.synchronize()
            _assert_same(out, _cpu(op, [x]))
            for s_in, s_out in zip(x.samples(), out.samples()):
                assert s_out.data.ptr == s_in.data.ptr, f"{op.schema.name} copied a sample"
            if x.flat_parts() is not None:
                assert out.flat_parts() is not None


def test_reinterpret_of_misaligned_samples_copies_them(cp, batch_ctx, rng):
    """uint8 samples at odd offsets of one buffer viewed as int32: such a view would be a misaligned
    pointer, so those samples are copied (to aligned memory); the values are the CPU's."""
    from stoker.operators.tensor.gpu_shape_join import gpu_reinterpret

    x = _flat(cp, _batch(rng, [(2, 8), (3, 4), (0, 4)]), "HW", 1)
    op = _op("reinterpret", dtype=types.INT32)
    (out,) = gpu_reinterpret(op, batch_ctx, [x], {})
    batch_ctx.stream.synchronize()
    _assert_same(out, _cpu(op, [x]))
    assert all(s.data.ptr % 4 == 0 for s in out.samples() if s.size)


def test_flat_batches_through_cast_like_and_cat(cp, batch_ctx, rng):
    from stoker.operators.tensor import gpu_shape_join as g
    from stoker.tensors_gpu import TensorListGPU

    data = [(rng.normal(0, 200, s)).astype(np.float32) for s in [(2, 3), (4, 3), (0, 3)]]
    x = _flat(cp, data, "HW", 3)
    like = TensorListGPU([cp.zeros(1, cp.int8)] * 3)
    op = _op("cast_like")
    (out,) = g.gpu_cast_like(op, batch_ctx, [x, like], {})
    batch_ctx.stream.synchronize()
    _assert_same(out, _cpu(op, [x, like]))
    op = _op("cat", axis=0)
    (out,) = g.gpu_cat(op, batch_ctx, [x, _flat(cp, data, "HW", 0), x], {})
    batch_ctx.stream.synchronize()
    _assert_same(out, _cpu(op, [x, x, x]))


def test_empty_batches(cp, batch_ctx):
    from stoker.operators.tensor import gpu_shape_join as g
    from stoker.tensors_gpu import TensorListGPU

    empty = TensorListGPU([], "HWC")
    for impl, op, k in [(g.gpu_squeeze, _op("squeeze", axes=[0]), 1),
                        (g.gpu_expand_dims, _op("expand_dims", axes=[0]), 1),
                        (g.gpu_reinterpret, _op("reinterpret", dtype=types.UINT8), 1),
                        (g.gpu_cast_like, _op("cast_like"), 2), (g.gpu_cat, _op("cat"), 2),
                        (g.gpu_stack, _op("stack"), 3)]:
        (out,) = impl(op, batch_ctx, [empty] * k, {})
        assert len(out) == 0


def test_a_host_input_takes_the_host_fallback(cp, batch_ctx, rng):
    """A host batch among the inputs (only in direct calls: a pipeline moves them to the GPU) and
    inputs of different lengths go through the host fallback, counted, with the CPU's result."""
    from stoker.operators.tensor.gpu_shape_join import gpu_stack
    from stoker.tensors_gpu import TensorListGPU

    host = _batch(rng, [(2, 3), (1, 3)], np.float32)
    x = TensorListGPU([cp.asarray(s) for s in host], "HW")
    op = _op("stack", axis=1)
    before = gpu_registry.FALLBACKS["stack"]
    (out,) = gpu_stack(op, batch_ctx, [x, TensorListCPU(host, "HW")], {})
    batch_ctx.stream.synchronize()
    assert gpu_registry.FALLBACKS["stack"] == before + 1
    _assert_same(out, _cpu(op, [x, x]))
    short = TensorListGPU([cp.asarray(host[0])], "HW")
    with pytest.raises(IndexError):  # the CPU operator's own failure for a shorter second input
        gpu_stack(op, batch_ctx, [x, short], {})
    assert gpu_registry.FALLBACKS["stack"] == before + 2
