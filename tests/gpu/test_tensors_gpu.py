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
