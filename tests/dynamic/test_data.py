"""stoker.dynamic Tensor / Batch: construction from many sources, conversions, arithmetic."""

import numpy as np
import pytest

import stoker.dynamic as ndd
from stoker import types
from stoker.tensors import TensorCPU, TensorListCPU

torch = pytest.importorskip("torch")


def test_tensor_from_numpy_shares_memory_and_keeps_layout():
    arr = np.arange(24, dtype=np.int16).reshape(2, 3, 4)
    t = ndd.as_tensor(arr, layout="HWC")
    assert t.shape == (2, 3, 4) and t.ndim == 3 and t.layout == "HWC" and t.dtype == types.INT16
    assert np.shares_memory(np.asarray(t), arr)
    assert np.shares_memory(t.torch().numpy(), arr)
    copied = ndd.tensor(arr)
    assert not np.shares_memory(np.asarray(copied), arr)
    np.testing.assert_array_equal(np.asarray(copied), arr)


@pytest.mark.parametrize("make", [
    lambda a: torch.from_numpy(a),
    lambda a: TensorCPU(a, "HW"),
    lambda a: a.tolist(),
    lambda a: ndd.as_tensor(a),
])
def test_tensor_from_other_sources(make):
    arr = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = ndd.as_tensor(make(arr))
    np.testing.assert_array_equal(np.asarray(t), arr)


def test_dlpack_round_trip_through_torch():
    arr = np.random.default_rng(0).random((4, 5)).astype(np.float32)
    t = ndd.as_tensor(arr)
    back = torch.from_dlpack(t)
    np.testing.assert_array_equal(back.numpy(), arr)
    again = ndd.as_tensor(torch.ones(3, dtype=torch.int64) * 7)
    assert again.dtype == types.INT64 and again.numpy().tolist() == [7, 7, 7]


def test_as_tensor_dtype_conversion():
    t = ndd.as_tensor([1.7, 2.2], dtype=types.INT32)
    assert t.dtype == types.INT32


def test_layout_must_fit_dimensions():
    with pytest.raises(ValueError, match="layout 'HWC'"):
        ndd.as_tensor(np.zeros((2, 2)), layout="HWC")


def test_batch_from_list_of_different_shapes():
    samples = [np.zeros((2, 3), np.uint8), np.ones((4, 1), np.uint8)]
    b = ndd.as_batch(samples, layout="HW")
    assert len(b) == b.batch_size == 2 and b.shape == [(2, 3), (4, 1)] and b.layout == "HW"
    assert b.dtype == types.UINT8
    assert [t.shape for t in b.tensors] == [(2, 3), (4, 1)]
    with pytest.raises(ValueError, match="pad=True"):
        b.torch()
    padded = b.torch(pad=True)
    assert tuple(padded.shape) == (2, 4, 3)
    np.testing.assert_array_equal(padded[1].numpy(), np.pad(samples[1], ((0, 0), (0, 2))))
    assert padded[0, 2:].sum() == 0


def test_batch_from_dense_array_and_tensor_list():
    dense = np.arange(12, dtype=np.float32).reshape(3, 4)
    b = ndd.as_batch(dense)
    assert b.shape == [(4,)] * 3
    np.testing.assert_array_equal(np.asarray(b), dense)
    np.testing.assert_array_equal(b.torch().numpy(), dense)
    tl = TensorListCPU([dense[0], dense[1]], "", ["a.jpg", "b.jpg"])
    b2 = ndd.as_batch(tl)
    assert b2.source_info() == ["a.jpg", "b.jpg"]
    assert b2.to_tensor_list() is tl
    assert isinstance(b.select(1), ndd.Tensor) and b.select(slice(0, 2)).batch_size == 2


def test_batch_rejects_mixed_dtypes():
    with pytest.raises(TypeError, match="dtype"):
        ndd.as_batch([np.zeros(2, np.uint8), np.zeros(2, np.float32)])


def test_arithmetic_matches_numpy_with_dali_type_rules():
    a = np.arange(1, 7, dtype=np.uint8).reshape(2, 3)
    t = ndd.as_tensor(a)
    np.testing.assert_array_equal(np.asarray(t + t), a + a)
    np.testing.assert_array_equal(np.asarray(2 * t), (2 * a.astype(np.int32)))
    half = t / 2
    assert half.dtype == types.FLOAT
    np.testing.assert_allclose(np.asarray(half), a / 2)
    assert np.asarray(t > 3).tolist() == (a > 3).tolist()
    b = ndd.as_batch([a, a[:1]])
    s = b - 1
    assert isinstance(s, ndd.Batch) and s.shape == [(2, 3), (1, 3)]
    np.testing.assert_array_equal(np.asarray(s.tensors[1]), a[:1].astype(np.int32) - 1)


def test_gpu_without_a_gpu_is_a_clear_error():
    from stoker.backend.cuda import cuda_available

    if cuda_available():
        pytest.skip("a GPU is present")
    with pytest.raises(RuntimeError, match="no GPU"):
        ndd.as_tensor(np.zeros(3)).gpu()
    with pytest.raises(RuntimeError, match="no GPU"):
        ndd.as_batch([np.zeros(3)]).gpu()


def test_scalar_conversions():
    t = ndd.as_tensor(np.float32(2.5))
    assert t.item() == 2.5 and float(t) == 2.5 and t.shape == ()
    assert ndd.float32 == types.FLOAT and ndd.uint8 == types.UINT8
