"""GPU reductions.* (stoker/operators/tensor/gpu_reductions.py) against the CPU operators: the same
pipelines on both devices over batches of one shape (one CuPy call over the (N, ...) array) and of
several shapes (sample by sample), every axis selection, input type and output ``dtype``, empty
samples, and the cases the host fallback takes.

Tolerances: min, max and integer sums are exact (64-bit integer sums wrap alike in any order), and
so are mean, mean_square and rms of 8- and 16-bit integers (their float64 sums are exact whatever
the order, and the division, square root and cast round the same). Everything else accumulates in
float64 in another order than NumPy's (and with fused multiply-adds in variance/std_dev), so it may
differ after the cast: float32 by rtol 1e-6 / atol 1e-6, float64 by 1e-12, float16 by 1e-3, an
integer ``dtype`` by one level where a rounding tie moves."""

import importlib

import numpy as np
import pytest
from gpu_pipelines import load_gpu_module, run_pipeline

import stoker.fn as fn
import stoker.types as types
from stoker.errors import StokerError
from stoker.operators import gpu_registry

pytestmark = pytest.mark.gpu

MODULE = "stoker.operators.tensor.gpu_reductions"
NAMES = ["sum", "mean", "mean_square", "rms", "min", "max"]
AXES = [dict(), dict(axes=[0, 1]), dict(axes=1, keep_dims=True), dict(axis_names="C"),
        dict(axis_names="HC", keep_dims=True), dict(axes=[]), dict(axes=[-1, 0]), dict(axis_names="WH"),
        dict(keep_dims=True)]


@pytest.fixture(autouse=True, scope="module")
def _gpu_reductions():
    load_gpu_module(MODULE)


def _red(name: str, **kw):
    """The pipeline body ``fn.reductions.<name>(x, **kw)``."""
    return lambda x: getattr(fn.reductions, name)(x, **kw)


def _spread(name: str, mean_keeps: bool = False, **kw):
    """``fn.reductions.<name>(x, mean, **kw)`` with the mean over the same axes (reduced axes kept
    in it with ``mean_keeps``)."""
    axes = {k: v for k, v in kw.items() if k in ("axes", "axis_names")}
    return lambda x: getattr(fn.reductions, name)(x, fn.reductions.mean(x, keep_dims=mean_keeps, **axes), **kw)


def _exact(name: str, in_dtype, out_dtype=None) -> bool:
    in_dtype = np.dtype(in_dtype)
    if name in ("min", "max"):
        return True
    if name == "sum" and in_dtype.kind in "iu":
        return True
    # (a float16 dtype may round twice on the device, through float32)
    return name in ("mean", "mean_square", "rms") and in_dtype.kind in "iu" and in_dtype.itemsize <= 2 \
        and (out_dtype is None or np.dtype(out_dtype) in (np.float32, np.float64))


def _assert_close(got, want, exact: bool):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        if exact:
            np.testing.assert_array_equal(g, w)
        elif w.dtype.kind in "iu":
            assert np.abs(g.astype(np.float64) - w.astype(np.float64)).max(initial=0) <= 1
        else:
            tol = {2: 1e-3, 4: 1e-6, 8: 1e-12}[w.dtype.itemsize]
            np.testing.assert_allclose(g, w, rtol=tol, atol=tol)


def _compare(build, batch, name: str, exact: bool, layout="HWC", fallback=False):
    """``build`` on the GPU and the CPU; checks whether reductions.<name>'s host fallback ran."""
    key = f"reductions.{name}"
    before = gpu_registry.FALLBACKS[key]
    (got, got_layout), = run_pipeline(build, [batch], True, layout)
    if fallback:
        assert gpu_registry.FALLBACKS[key] > before, "expected the host fallback"
    else:
        assert gpu_registry.FALLBACKS[key] == before, "the host fallback ran instead of the GPU path"
    (want, want_layout), = run_pipeline(build, [batch], False, layout)
    assert got_layout == want_layout
    _assert_close(got, want, exact)
    return got


def _data(make_images, kind: str, same_size: bool):
    images = make_images(5, 24, 25) if same_size else make_images(5, 6, 30)
    if kind == "u8":
        return images
    if kind == "i16":
        return [(im.astype(np.int16) - 128) * 97 for im in images]
    return [(im.astype(np.float32) - 100) / 17 for im in images]


@pytest.mark.parametrize("kind", ["u8", "i16", "f32"])
@pytest.mark.parametrize("same_size", [True, False], ids=["dense", "ragged"])
@pytest.mark.parametrize("name", NAMES)
def test_reduction_matches_cpu(name, same_size, kind, make_images):
    data = _data(make_images, kind, same_size)
    for kw in AXES:
        _compare(_red(name, **kw), data, name, _exact(name, data[0].dtype))


@pytest.mark.parametrize("dtype", [np.int8, np.uint16, np.int32, np.uint32, np.int64, np.uint64, np.float16,
                                   np.float64], ids=str)
@pytest.mark.parametrize("name", NAMES)
def test_other_input_types(name, dtype, rng):
    """Each type's accumulator and default output type (int64 / uint64 sums, float64 kept)."""
    if np.dtype(dtype).kind == "f":
        data = [rng.normal(0, 50, s).astype(dtype) for s in ((3, 4, 2), (5, 1, 2), (2, 7, 2))]
    else:
        info = np.iinfo(dtype)
        data = [rng.integers(max(info.min, -1000), min(info.max, 1000), s, dtype=dtype)
                for s in ((3, 4, 2), (5, 1, 2), (2, 7, 2))]
    for kw in (dict(), dict(axis_names="HW"), dict(axes=[0], keep_dims=True)):
        _compare(_red(name, **kw), data, name, _exact(name, dtype))


def test_wide_integer_sums_are_exact_and_wrap_like_the_cpu():
    big = [np.array([[2**62, 2**62], [2**62, -5]], np.int64), np.array([[2**63 - 1, 1], [7, 9]], np.int64)]
    ubig = [np.array([[2**63, 2**63 + 9], [3, 2**64 - 1]], np.uint64)]
    for data in (big, ubig):
        for kw in (dict(), dict(axes=[0])):
            _compare(lambda x, kw=kw: fn.reductions.sum(x, **kw), data, "sum", True, "HW")
            _compare(lambda x, kw=kw: fn.reductions.max(x, **kw), data, "max", True, "HW")


def test_nan_propagates_through_min_and_max():
    data = [np.array([[1.0, np.nan, 3.0], [4.0, 5.0, -6.0]], np.float32), np.array([[2.0, 1.0, 0.0]], np.float32)]
    for name in ("min", "max"):
        for kw in (dict(), dict(axes=[1]), dict(axes=[0])):
            _compare(_red(name, **kw), data, name, True, "HW")


DTYPES = [("sum", types.FLOAT, "u8"), ("sum", types.INT8, "u8"), ("sum", types.UINT8, "i16"),
          ("sum", types.INT32, "f32"), ("sum", types.FLOAT64, "f32"), ("mean", types.INT16, "f32"),
          ("mean", types.FLOAT16, "u8"), ("mean", types.FLOAT64, "i16"), ("mean", types.UINT8, "u8"),
          ("mean_square", types.FLOAT64, "u8"), ("rms", types.UINT8, "f32"), ("rms", types.INT32, "i16")]


@pytest.mark.parametrize("same_size", [True, False], ids=["dense", "ragged"])
@pytest.mark.parametrize("name,dtype,kind", DTYPES, ids=[f"{n}-{d}-{k}" for n, d, k in DTYPES])
def test_output_dtype(name, dtype, kind, same_size, make_images):
    data = _data(make_images, kind, same_size)
    out_type = np.dtype(types.to_numpy_type(dtype))
    for kw in (dict(), dict(axis_names="HW"), dict(axes=[])):
        _compare(_red(name, dtype=dtype, **kw), data, name, _exact(name, data[0].dtype, out_type))


SPREADS = [dict(), dict(axes=[0, 1], ddof=1), dict(axis_names="W", keep_dims=True), dict(axis_names="HW", ddof=2),
           dict(axes=[]), dict(axes=[2], ddof=5)]  # ddof past the count: zeros, as on the CPU


@pytest.mark.parametrize("kind", ["u8", "f32"])
@pytest.mark.parametrize("same_size", [True, False], ids=["dense", "ragged"])
@pytest.mark.parametrize("name", ["variance", "std_dev"])
def test_spread_matches_cpu(name, same_size, kind, make_images):
    """The mean input as reductions.mean gives it, with and without the reduced axes kept."""
    data = _data(make_images, kind, same_size)
    for kw in SPREADS:
        for mean_keeps in (False, True):
            _compare(_spread(name, mean_keeps, **kw), data, name, False)


def test_float64_spread():
    rng = np.random.default_rng(5)
    data = [rng.normal(0, 1, (3, 4)), rng.normal(0, 1, (2, 4))]
    _compare(lambda x: fn.reductions.std_dev(x, fn.reductions.mean(x, axes=1), axes=1, ddof=1), data,
             "std_dev", False, "HW")


def test_empty_samples(rng):
    """A sample of no elements: sums 0, mean-like NaN, variance 0 (N - ddof <= 0), min/max over
    the other axes; mean/mean_square/rms and a float dtype also on a reduced empty axis."""
    data = [rng.integers(0, 255, (4, 5, 3), dtype=np.uint8), np.zeros((0, 5, 3), np.uint8),
            rng.integers(0, 255, (2, 5, 3), dtype=np.uint8)]
    with np.errstate(invalid="ignore", divide="ignore"):
        for name in ("sum", "mean", "mean_square", "rms"):
            for kw in (dict(), dict(axes=[0]), dict(axes=[1], keep_dims=True)):
                _compare(_red(name, **kw), data, name, True)
        for name in ("min", "max"):
            _compare(_red(name, axis_names="W"), data, name, True)
            _compare(_red(name, axes=[]), data, name, True)
        for name in ("variance", "std_dev"):
            _compare(_spread(name), data, name, False)
            _compare(_spread(name, axes=[0]), data, name, False)


def test_integer_mean_of_an_empty_sample_takes_the_host_fallback(rng):
    """NaN cast to an integer type is the processor's choice on the CPU: such batches go there."""
    data = [rng.integers(0, 255, (4, 5, 3), dtype=np.uint8), np.zeros((0, 5, 3), np.uint8)]
    with np.errstate(invalid="ignore", divide="ignore"):
        _compare(lambda x: fn.reductions.mean(x, dtype=types.INT16), data, "mean", True, fallback=True)


def test_min_over_an_empty_axis_fails_like_the_cpu_through_the_fallback(rng):
    data = [rng.integers(0, 255, (4, 5, 3), dtype=np.uint8), np.zeros((0, 5, 3), np.uint8)]
    before = gpu_registry.FALLBACKS["reductions.min"]
    for gpu in (True, False):
        with pytest.raises(StokerError, match="cannot take the min over an empty axis"):
            run_pipeline(lambda x: fn.reductions.min(x, axes=[0]), [data], gpu)
    assert gpu_registry.FALLBACKS["reductions.min"] > before


def test_boolean_input_fails_like_the_cpu_through_the_fallback():
    data = [np.array([[True, False]]), np.array([[False, False]])]
    before = gpu_registry.FALLBACKS["reductions.sum"]
    for gpu in (True, False):
        with pytest.raises(StokerError, match="boolean input is not supported"):
            run_pipeline(lambda x: fn.reductions.sum(x), [data], gpu, "HW")
    assert gpu_registry.FALLBACKS["reductions.sum"] > before


def test_mean_of_the_wrong_shape_fails_like_the_cpu_through_the_fallback(make_images):
    images = make_images(3, 10, 20)
    before = gpu_registry.FALLBACKS["reductions.variance"]
    build = lambda x: fn.reductions.variance(x, fn.reductions.mean(x, axis_names="HW"), axis_names="C")  # noqa: E731
    for gpu in (True, False):
        with pytest.raises(StokerError, match="the mean input has shape"):
            run_pipeline(build, [images], gpu)
    assert gpu_registry.FALLBACKS["reductions.variance"] > before


@pytest.mark.parametrize("build,message", [
    (lambda x: fn.reductions.sum(x, axis_names="D"), "reductions.sum.*'axis_names'"),
    (lambda x: fn.reductions.max(x, axes=[3]), "reductions.max.*'axes': axis 3 is out of range"),
    (lambda x: fn.reductions.std_dev(x, fn.reductions.mean(x), ddof=-1), "reductions.std_dev.*'ddof'"),
    (lambda x: fn.reductions.mean(x, axes=[0, 0]), "duplicate value in 'axis'"),
], ids=["axis_names", "axes", "ddof", "repeated axes"])
def test_bad_arguments_fail_like_the_cpu(build, message, make_images):
    images = make_images(3, 10, 20)
    for gpu in (True, False):
        with pytest.raises(StokerError, match=message):
            run_pipeline(build, [images], gpu)


@pytest.mark.parametrize("same_size", [True, False], ids=["dense", "ragged"])
def test_one_call_for_a_dense_batch(same_size, make_images, monkeypatch):
    """A batch of one shape is reduced in one CuPy call; a ragged one in one per sample. (Calls are
    told apart by the array they get, not counted: the executor may run an iteration ahead.)"""
    mod = importlib.import_module(MODULE)
    calls = []
    real = mod.reduce_array
    monkeypatch.setattr(mod, "reduce_array",
                        lambda name, a, *rest: calls.append((name, a.shape)) or real(name, a, *rest))
    data = _data(make_images, "u8", same_size)
    _compare(lambda x: fn.reductions.std_dev(x, fn.reductions.mean(x, axis_names="HW"), axis_names="HW"), data,
             "std_dev", False)
    names = {name for name, _ in calls}
    assert len(names) == 2  # the mean's calls and std_dev's
    if same_size:  # every call took the whole batch: (N, H, W, C)
        assert {shape for _, shape in calls} == {(len(data), *data[0].shape)}
    else:  # every call took one sample, and every sample was reduced by each operator
        assert all(len(shape) == 3 for _, shape in calls)
        for name in names:
            shapes = [shape for n, shape in calls if n == name]
            assert len(shapes) % len(data) == 0 and set(shapes) == {d.shape for d in data}


@pytest.mark.parametrize("how", ["dense", "flat", "gaps", "list"])
def test_each_storage_of_the_input_batch(how, rng, batch_ctx, cp):
    """The GPU function on the ways a device batch is stored: one (N, ...) array, one buffer with
    the samples back to back (the dense path) or with gaps (per sample), one array per sample."""
    from stoker.operators.base import BatchContext
    from stoker.operators.schema import get_operator
    from stoker.tensors import TensorListCPU

    shapes = [(4, 5, 3)] * 3 if how in ("dense", "flat") else [(4, 5, 3), (2, 7, 3), (6, 1, 3)]
    data = [rng.integers(0, 255, s, dtype=np.uint8) for s in shapes]
    means = [d.mean(axis=(0, 1), dtype=np.float64).astype(np.float32) for d in data]
    x, m = _stored(cp, data, how, "HWC"), _stored(cp, means, how, "C")
    for name, kw, inputs in (("sum", dict(axis_names="HW"), [x]), ("mean", dict(axes=[1]), [x]),
                             ("max", dict(keep_dims=True), [x]),
                             ("variance", dict(axis_names="HW", ddof=1), [x, m])):
        cls = get_operator(f"reductions.{name}")
        static, _ = cls.schema.bind(kw, lambda v: False)
        got = cls(static, "gpu").run_gpu(batch_ctx, inputs, {})[0]
        host = [TensorListCPU(data, "HWC")] + ([TensorListCPU(means, "C")] if len(inputs) > 1 else [])
        want = cls(static, "cpu").run_cpu(BatchContext(batch_size=len(data)), host, {})[0]
        batch_ctx.stream.synchronize()
        assert got.layout() == want.layout()
        _assert_close([np.asarray(a) for a in got.as_cpu().samples()], [np.asarray(a) for a in want.samples()],
                      name != "variance")


def _stored(cp, samples, how: str, layout: str):
    """``samples`` as a TensorListGPU: "dense" (one array), "flat" (one buffer, back to back),
    "gaps" (one buffer, junk between samples) or "list" (one array per sample)."""
    from stoker.tensors_gpu import TensorListGPU

    if how == "dense":
        return TensorListGPU(cp.asarray(np.stack(samples)), layout)
    if how == "list":
        return TensorListGPU([cp.asarray(s) for s in samples], layout)
    gap = 3 if how == "gaps" else 0
    sizes = np.array([s.size for s in samples], np.int64)
    offsets = np.concatenate([[0], np.cumsum(sizes + gap)[:-1]]).astype(np.int64)
    buf = np.full(int(sizes.sum()) + gap * len(samples), 9, samples[0].dtype)
    for o, s in zip(offsets, samples):
        buf[o:o + s.size] = s.reshape(-1)
    shapes = np.asarray([s.shape for s in samples], np.int64).reshape(len(samples), -1)
    return TensorListGPU.from_flat(cp.asarray(buf), offsets, shapes, layout)
