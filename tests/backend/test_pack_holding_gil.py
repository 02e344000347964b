"""stoker.tensors.pack_holding_gil (the pinned staging of ragged uploads): every array's bytes
land at its offset, whatever its dtype, shape or strides, and nothing else is written; and
PinnedRing.upload_many on the null device gives back the samples it was given."""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import null_device  # noqa: E402

from stoker.backend import cuda  # noqa: E402
from stoker.tensors import pack_holding_gil  # noqa: E402


def _arrays():
    rng = np.random.default_rng(2)
    return [
        rng.random((3, 5)).astype(np.float32),
        np.arange(24, dtype=np.int16).reshape(4, 6)[:, ::2],  # not contiguous
        np.array(7.5, np.float64),  # 0-d
        np.zeros((0, 3), np.uint8),  # empty
        rng.integers(0, 2, 9).astype(bool),
        (rng.random(4) + 1j * rng.random(4)).astype(np.complex64),
        np.asfortranarray(rng.integers(0, 255, (4, 3), dtype=np.uint8)),
    ]


def test_each_array_lands_at_its_offset_and_nothing_else_is_written():
    arrays = _arrays()
    offsets, total = [], 0
    for a in arrays:
        offsets.append(total)
        total += -(-a.nbytes // 256) * 256
    buf = np.full(total + 64, 0xAB, np.uint8)
    pack_holding_gil(buf, arrays, offsets)
    for a, off in zip(arrays, offsets):
        want = np.ascontiguousarray(a).reshape(-1).view(np.uint8)
        np.testing.assert_array_equal(buf[off:off + a.nbytes], want)
        gap_end = off + (-(-a.nbytes // 256) * 256)
        assert (buf[off + a.nbytes:gap_end] == 0xAB).all()
    assert (buf[total:] == 0xAB).all()


def test_upload_many_on_the_null_device_gives_back_the_samples():
    arrays = _arrays()
    with null_device.installed() as cp:
        ring = cuda.PinnedRing(0, slots=2)
        dev, offsets = ring.upload_many(arrays, cp.cuda.get_current_stream())
        host = np.asarray(dev).view(np.ndarray)
        for a, off in zip(arrays, offsets):
            got = host[off:off + a.nbytes].view(a.dtype).reshape(a.shape)
            np.testing.assert_array_equal(got, a)


def test_a_host_batch_of_one_shape_goes_up_as_one_dense_array():
    from stoker.operators.base import BatchContext
    from stoker.operators.transfer import upload_batch
    from stoker.tensors import TensorListCPU

    rng = np.random.default_rng(5)
    samples = [rng.integers(0, 255, (6, 5, 3), dtype=np.uint8) for _ in range(7)]
    samples[3] = np.asfortranarray(samples[3])  # (a sample in another memory order)
    with null_device.installed():
        ctx = BatchContext(7, 0)
        out = upload_batch(TensorListCPU(samples, "HWC"), ctx)
        dense = np.asarray(out.dense()).view(np.ndarray)
    assert dense.shape == (7, 6, 5, 3)
    for i, s in enumerate(samples):
        np.testing.assert_array_equal(dense[i], s)
