"""GPU jpeg_compression_distortion (stoker/operators/filters/gpu_jpeg_distortion.py,
kernels/jpeg_distortion.cu) against the CPU operator (cv2's libjpeg-turbo): bit for bit.

The kernel transcribes jpeg_distortion_model, which equals the codec exactly on every image its
tests measured (tests/operators/filters/test_jpeg_distortion_model.py, which also runs the kernel's
source compiled for the host); so the tolerance here is zero.
"""

import numpy as np
import pytest
from gpu_pipelines import compare_exact, load_gpu_module, run_pipeline

import stoker.fn as fn
from stoker.errors import OperatorError
from stoker.operators import gpu_registry

pytestmark = pytest.mark.gpu

NAME = "jpeg_compression_distortion"


@pytest.fixture(autouse=True, scope="module")
def _pending():
    load_gpu_module("stoker.operators.filters.gpu_jpeg_distortion")


def _per_sample(values):
    """A per-sample argument input: one int32 array per sample."""
    return fn.external_source(source=[[np.asarray(v, np.int32) for v in values]], cycle=True)


def _batch(make_images, rng):
    """Images of many sizes in one batch: odd, tiny, 1x1, 1xN, Nx1, chroma 1 and 2 wide, 500x375,
    and noise (the largest DCT terms)."""
    images = make_images(4, 9, 70)
    images += [rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
               for h, w in [(1, 1), (1, 9), (13, 1), (3, 4), (5, 3), (17, 33)]]
    yy, xx = np.mgrid[0:375, 0:500]
    photo = np.stack([(np.sin(xx / (9 + k) + yy / (13 + k)) + 1) * 110 for k in range(3)], -1)
    images.append(np.clip(photo + rng.normal(0, 12, photo.shape), 0, 255).astype(np.uint8))  # 500x375
    return [np.ascontiguousarray(im) for im in images]


@pytest.mark.parametrize("quality", [1, 2, 10, 49, 50, 51, 90, 99, 100])
def test_constant_quality_matches_cpu(quality, make_images, rng):
    batch = _batch(make_images, rng)
    compare_exact(lambda x: fn.jpeg_compression_distortion(x, quality=quality), batch, NAME)


def test_per_sample_quality_matches_cpu(make_images, rng):
    batch = _batch(make_images, rng)
    qualities = [1, 100, 0, 150, 50, 2, 99, 75, 10, 51, 95, 49, 90, 25][:len(batch)]  # (0, 150: clamped)
    assert len(qualities) == len(batch)
    compare_exact(lambda x: fn.jpeg_compression_distortion(x, quality=_per_sample(qualities)), batch, NAME)


def test_default_quality_and_empty_samples(make_images):
    batch = make_images(3, 20, 40)
    batch.insert(1, np.zeros((0, 9, 3), np.uint8))
    batch.append(np.zeros((6, 0, 3), np.uint8))
    got = compare_exact(lambda x: fn.jpeg_compression_distortion(x), batch, NAME)
    assert got[1].shape == (0, 9, 3) and got[-1].shape == (6, 0, 3)


def test_only_empty_samples(make_images):
    batch = [np.zeros((0, 9, 3), np.uint8), np.zeros((4, 0, 3), np.uint8)]
    compare_exact(lambda x: fn.jpeg_compression_distortion(x, quality=30), batch, NAME)


def test_frames_match_cpu(make_images, rng):
    """FHWC: every frame coded on its own; frames of different samples differ in size."""
    a = np.stack([im[:27, :27] for im in make_images(3, 30, 40)])
    b = rng.integers(0, 256, (2, 9, 14, 3), dtype=np.uint8)
    c = np.zeros((0, 8, 8, 3), np.uint8)
    compare_exact(lambda x: fn.jpeg_compression_distortion(x, quality=_per_sample([30, 1, 80])), [a, b, c], NAME,
                  layout="FHWC")


def test_many_samples(make_images):
    batch = make_images(64, 1, 40)
    compare_exact(lambda x: fn.jpeg_compression_distortion(x, quality=_per_sample(list(range(1, 65)))), batch, NAME)


@pytest.mark.parametrize("bad, match", [
    (lambda im: im.astype(np.float32), "uint8"),
    (lambda im: im[..., :1], "3 channels"),
    (lambda im: np.concatenate([im, im[..., :1]], -1), "3 channels"),
], ids=["float32", "one_channel", "four_channels"])
def test_bad_input_fails_as_on_the_cpu(bad, match, make_images):
    images = make_images(3)
    images[1] = np.ascontiguousarray(bad(images[1]))
    if match == "uint8":
        images = [np.ascontiguousarray(bad(im)) for im in images]
    before = gpu_registry.FALLBACKS[NAME]
    for gpu in (True, False):
        with pytest.raises(OperatorError, match=f"(?s){NAME}.*{match}"):
            run_pipeline(lambda x: fn.jpeg_compression_distortion(x, quality=50), [images], gpu)
    assert gpu_registry.FALLBACKS[NAME] == before
