"""Eager mode on the GPU: placement round trips and GPU operators against their CPU versions."""

import numpy as np
import pytest

import stoker.dynamic as ndd

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def image():
    return (np.random.default_rng(2).random((33, 41, 3)) * 255).astype(np.uint8)


def test_tensor_and_batch_round_trip(image):
    t = ndd.as_tensor(image, layout="HWC").gpu()
    assert t.device == "gpu" and t.shape == image.shape and t.layout == "HWC"
    np.testing.assert_array_equal(np.asarray(t.cpu()), image)
    b = ndd.as_batch([image, image[:10]], layout="HWC").gpu()
    assert b.device == "gpu" and b.shape == [image.shape, (10, 41, 3)]
    np.testing.assert_array_equal(np.asarray(b.cpu().tensors[1]), image[:10])


def test_flip_on_gpu_matches_cpu(image):
    b = ndd.as_batch([image, image[5:]], layout="HWC")
    cpu = ndd.flip(b, horizontal=1)
    gpu = ndd.flip(b, horizontal=1, device="gpu")
    assert gpu.device == "gpu"
    for a, c in zip(cpu.tensors, gpu.cpu().tensors):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(c))


def test_gpu_batch_to_torch_stays_on_device(image):
    torch = pytest.importorskip("torch")
    t = ndd.as_batch([image, image]).gpu().torch()
    assert t.is_cuda and tuple(t.shape) == (2, *image.shape)
    assert torch.equal(t.cpu()[0], torch.from_numpy(image))
