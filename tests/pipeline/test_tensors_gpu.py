"""TensorListGPU: dense and ragged batches, host copies, zero-copy hand-off, stream ordering."""

import numpy as np
import pytest

pytestmark = pytest.mark.gpu


def test_dense_batch_is_one_array_with_views(cp):
    from stoker.tensors_gpu import TensorListGPU

    data = cp.arange(2 * 3 * 4, dtype=cp.float32).reshape(2, 3, 4)
    tl = TensorListGPU(data, "HW")
    assert len(tl) == 2 and tl.shape() == [(3, 4), (3, 4)]
    t = tl.as_tensor()
    assert t.data_ptr() == data.data.ptr  # no copy
    assert t.layout() == "NHW"
    assert tl.at(1).data.ptr == data.data.ptr + 12 * 4
    np.testing.assert_array_equal(tl.as_cpu().as_array(), data.get())


def test_ragged_batch_copies_each_sample(cp, rng):
    from stoker.tensors_gpu import TensorListGPU

    host = [rng.integers(0, 255, (h, 5, 3), dtype=np.uint8) for h in (3, 7, 2)]
    tl = TensorListGPU([cp.asarray(h) for h in host], "HWC", ["a", "b", "c"])
    assert not tl.is_dense_tensor()
    with pytest.raises(ValueError, match="differ in shape"):
        tl.as_tensor()
    back = tl.as_cpu()
    assert back.source_info() == ["a", "b", "c"]
    for a, b in zip(back.samples(), host):
        np.testing.assert_array_equal(a, b)


def test_dlpack_makes_the_consumer_stream_wait(cp):
    """A long producer kernel on one stream; torch reads via DLPack on another and must see the result."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch without CUDA")
    from stoker.tensors_gpu import TensorListGPU

    prod = cp.cuda.Stream(non_blocking=True)
    with prod:
        x = cp.zeros((4, 1 << 20), cp.float32)
        for _ in range(50):  # enough queued work that a missing wait would read zeros
            x += 1
        ev = cp.cuda.Event(disable_timing=True)
        ev.record(prod)
    tl = TensorListGPU(x)
    tl.set_ready_event(ev)
    consumer = torch.cuda.Stream()
    with torch.cuda.stream(consumer):
        t = torch.from_dlpack(tl)
        s = t.sum()
    consumer.synchronize()
    assert float(s) == 50.0 * 4 * (1 << 20)


def test_flat_batch_makes_no_views_until_asked(cp, rng):
    from stoker.tensors_gpu import TensorListGPU

    host = [rng.integers(0, 255, (h, w, 3), dtype=np.uint8) for h, w in ((3, 4), (5, 2), (1, 7))]
    offsets = np.cumsum([0] + [a.size for a in host[:-1]])
    buf = cp.asarray(np.concatenate([a.reshape(-1) for a in host]))
    tl = TensorListGPU.from_flat(buf, offsets, [a.shape for a in host], "HWC", ["a", "b", "c"])
    assert tl._sample_list is None
    assert len(tl) == 3 and tl.shape() == [(3, 4, 3), (5, 2, 3), (1, 7, 3)] and tl.ndim == 3
    assert not tl.is_dense_tensor() and str(tl.dtype).endswith("UINT8")
    ptrs, rows, shapes = tl.geometry()
    assert ptrs.tolist() == [buf.data.ptr + int(o) for o in offsets]
    assert rows.tolist() == [12, 6, 21] and shapes.tolist() == [[3, 4, 3], [5, 2, 3], [1, 7, 3]]
    assert tl._sample_list is None  # geometry needed no per-sample arrays
    for a, b in zip(tl.as_cpu().samples(), host):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(tl.at(1).get(), host[1])


def test_flat_batch_of_one_shape_is_a_tensor_without_copy(cp):
    from stoker.tensors_gpu import TensorListGPU

    buf = cp.arange(2 * 6, dtype=cp.uint8)
    tl = TensorListGPU.from_flat(buf, [0, 6], [(2, 3), (2, 3)], "HW")
    t = tl.as_tensor()
    assert t.data_ptr() == buf.data.ptr and t.shape() == [2, 2, 3]
    np.testing.assert_array_equal(t.as_array().get(), np.arange(12, dtype=np.uint8).reshape(2, 2, 3))


def test_dense_geometry(cp):
    from stoker.tensors_gpu import TensorListGPU

    d = cp.zeros((4, 5, 6, 3), cp.uint8)
    ptrs, rows, shapes = TensorListGPU(d, "HWC").geometry()
    assert ptrs.tolist() == [d.data.ptr + i * 90 for i in range(4)]
    assert rows.tolist() == [18] * 4 and shapes.tolist() == [[5, 6, 3]] * 4
