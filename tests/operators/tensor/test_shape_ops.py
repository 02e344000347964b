"""squeeze, expand_dims, reinterpret and cast_like against DALI's CPU operators."""

import numpy as np
import pytest
from oracle import check, run_graph

from stoker.errors import StokerError

RNG = np.random.default_rng(0)
B = [RNG.integers(0, 100, (1, 4, 1)).astype(np.int16), RNG.integers(0, 100, (1, 2, 1)).astype(np.int16)]


@pytest.mark.oracle
@pytest.mark.parametrize("kw", [dict(axes=[0]), dict(axes=[0, 2]), dict(axis_names="C"),
                                dict(axis_names="HC")], ids=str)
def test_squeeze_matches_dali(kw):
    check(lambda fn, t, x: fn.squeeze(x, **kw), B, layouts=["HWC"], what=str(kw))


def test_squeeze_negative_axis_counts_from_the_end():
    # DALI 2.4 silently ignores negative squeeze axes; stoker counts them from the end, as NumPy does.
    (out, lay), = run_graph("stoker", lambda fn, t, x: fn.squeeze(x, axes=[-1]), B, layouts=["HWC"])
    assert lay == "HW" and all(np.array_equal(o, np.squeeze(b, -1)) for o, b in zip(out, B))


def test_squeeze_of_a_long_axis_names_the_argument():
    with pytest.raises(StokerError, match="squeeze.*'axes'.*extent 4"):
        run_graph("stoker", lambda fn, t, x: fn.squeeze(x, axes=[1]), B, layouts=["HWC"])


@pytest.mark.oracle
@pytest.mark.parametrize("kw", [dict(axes=[0, 3], new_axis_names="FX"), dict(axes=[3, 0], new_axis_names="FX"),
                                dict(axes=[1]), dict(axes=[3], new_axis_names="Z")], ids=str)
def test_expand_dims_matches_dali(kw):
    check(lambda fn, t, x: fn.expand_dims(x, **kw), B, layouts=["HWC"], what=str(kw))


def test_expand_dims_out_of_range_names_the_argument():
    with pytest.raises(StokerError, match="expand_dims.*'axes'"):
        run_graph("stoker", lambda fn, t, x: fn.expand_dims(x, axes=[7]), B, layouts=["HWC"])


X32 = [np.arange(6, dtype=np.int32).reshape(2, 3), np.arange(12, dtype=np.int32).reshape(4, 3) * 1000]


@pytest.mark.oracle
@pytest.mark.parametrize("kw", [
    lambda t: dict(dtype=t.UINT8), lambda t: dict(dtype=t.UINT8, rel_shape=[1, 4], layout="AB"),
    lambda t: dict(dtype=t.FLOAT), lambda t: dict(shape=[-1]), lambda t: dict(src_dims=[1, -1, 0], layout="WXH"),
    lambda t: dict(dtype=t.INT16, rel_shape=[2, 1])], ids=range(6))
def test_reinterpret_matches_dali(kw):
    check(lambda fn, t, x: fn.reinterpret(x, **kw(t)), X32, layouts=["HW"])


@pytest.mark.oracle
def test_reinterpret_shape_as_input():
    shapes = [np.array([3, 2], np.int32), np.array([6, 2], np.int32)]
    check(lambda fn, t, x, s: fn.reinterpret(x, s), X32, shapes, layouts=["HW", None])


def test_reinterpret_bad_shape_names_the_argument():
    with pytest.raises(StokerError, match="reinterpret.*'shape'"):
        run_graph("stoker", lambda fn, t, x: fn.reinterpret(x, shape=[5]), X32, layouts=["HW"])


@pytest.mark.oracle
@pytest.mark.parametrize("ref_dtype", [np.uint8, np.int8, np.float32, np.int64])
def test_cast_like_matches_dali(ref_dtype):
    data = [np.array([-300.7, -1.5, -0.4, 0.5, 1.5, 2.5, 254.6, 900.0], np.float32),
            np.linspace(-3, 3, 5).astype(np.float32)]
    refs = [np.zeros(1, ref_dtype)] * 2
    check(lambda fn, t, x, r: fn.cast_like(x, r), data, refs, layouts=["W", None])


def test_squeeze_per_sample_axes():
    # DALI 2.4 lists squeeze's axes as a tensor argument but refuses one at build; stoker takes it.
    data = [np.arange(4, dtype=np.uint8).reshape(1, 4, 1), np.arange(2, dtype=np.uint8).reshape(1, 2, 1)]
    axes = [np.array([0], np.int32), np.array([2], np.int32)]
    (out, _), = run_graph("stoker", lambda fn, t, x, a: fn.squeeze(x, axes=a), data, axes)
    for o, x, a in zip(out, data, axes):
        np.testing.assert_array_equal(o, np.squeeze(x, tuple(a)))


@pytest.mark.oracle
def test_reinterpret_per_sample_shape_matches_dali():
    shapes = [np.array([3, 2], np.int32), np.array([2, 6], np.int32)]
    check(lambda fn, t, x, s: fn.reinterpret(x, shape=s), X32, shapes, layouts=["HW", None])


@pytest.mark.oracle
def test_reshape_per_sample_src_dims():
    # DALI 2.4 lists src_dims as a tensor argument but ignores a per-sample one (its output keeps the
    # input's shape); stoker applies it. Each sample must equal DALI's reshape with that sample's
    # src_dims given as a constant.
    data = [np.arange(6, dtype=np.int16).reshape(2, 3, 1), np.arange(20, dtype=np.int16).reshape(4, 5, 1)]
    dims = [np.array([1, 0, 2], np.int32), np.array([0, -1, 1], np.int32)]
    (out, layout), = run_graph("stoker", lambda fn, t, x, d: fn.reshape(x, src_dims=d, layout="ABC"), data, dims)
    assert layout == "ABC"
    for o, x, d in zip(out, data, dims):
        (want, _), = run_graph("dali", lambda fn, t, x, d=d: fn.reshape(x, src_dims=d.tolist()), [x])
        assert o.shape == want[0].shape and o.dtype == want[0].dtype
        np.testing.assert_array_equal(o, want[0])
    assert [o.shape for o in out] == [(3, 2, 1), (4, 1, 5)]


def test_get_property_requires_key():
    with pytest.raises(StokerError, match="get_property.*key"):
        run_graph("stoker", lambda fn, t, x: fn.get_property(x), X32)


@pytest.mark.oracle
def test_shapes_deprecated_type_matches_dali():
    check(lambda fn, t, x: fn.shapes(x, type=t.INT32), X32)


T = [RNG.integers(0, 100, (3, 5, 2)).astype(np.uint8), RNG.integers(0, 100, (4, 1, 2)).astype(np.uint8)]


@pytest.mark.oracle
@pytest.mark.parametrize("kw", [dict(perm=[2, 0, 1]), dict(perm=[1, 0, 2]),
                                dict(perm=[2, 0, 1], transpose_layout=False),
                                dict(perm=[2, 1, 0], output_layout="XYZ")], ids=str)
def test_transpose_matches_dali(kw):
    check(lambda fn, t, x: fn.transpose(x, **kw), T, layouts=["HWC"], what=str(kw))


@pytest.mark.oracle
def test_copy_matches_dali():
    out = check(lambda fn, t, x: fn.copy(x), T, layouts=["HWC"])
    (samples, _), = out
    assert all(s is not b for s, b in zip(samples, T))  # a copy, not the fed arrays
