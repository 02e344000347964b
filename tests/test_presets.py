"""stoker.presets: the serving twin of the validation pipeline gives the pipeline's numbers."""

import io

import cv2
import numpy as np
import pytest
from oracle import pipeline, run_pipeline
from PIL import Image

from stoker.presets import IMAGENET_MEAN, IMAGENET_STD, imagenet_eval


def _jpegs(n=4):
    rng = np.random.default_rng(3)
    out = []
    for _ in range(n):
        h, w = int(rng.integers(180, 420)), int(rng.integers(180, 420))
        small = rng.integers(0, 256, (h // 8, w // 8, 3), np.uint8)
        img = cv2.resize(small, (w, h), interpolation=cv2.INTER_CUBIC)
        ok, buf = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, 90])
        assert ok
        out.append(buf.reshape(-1))
    return out


def _pipeline(lib, encoded):
    def body(f, t):
        jpegs = f.external_source(source=lambda: encoded, batch=True)
        imgs = f.decoders.image(jpegs, output_type=t.RGB)
        imgs = f.resize(imgs, resize_shorter=256)
        return f.crop_mirror_normalize(imgs, crop=(224, 224), dtype=t.FLOAT, output_layout="CHW",
                                       mean=list(IMAGENET_MEAN), std=list(IMAGENET_STD))

    ((out,),) = run_pipeline(pipeline(lib, body, len(encoded), num_threads=1))
    return out


def test_imagenet_eval_equals_the_stoker_pipeline_bit_for_bit():
    encoded = _jpegs()
    want = _pipeline("stoker", encoded)
    for enc, w in zip(encoded, want):
        got = imagenet_eval(enc.tobytes())
        assert got.dtype == np.float32 and got.shape == (3, 224, 224)
        np.testing.assert_array_equal(got, w)


def test_imagenet_eval_takes_pil_images_and_arrays_like_decoded_bytes():
    enc = _jpegs(1)[0]
    rgb = np.asarray(Image.open(io.BytesIO(enc.tobytes())).convert("RGB"))
    from_bytes = imagenet_eval(enc)
    from_array = imagenet_eval(rgb)
    from_pil = imagenet_eval(Image.fromarray(rgb))
    np.testing.assert_array_equal(from_array, from_pil)
    assert np.abs(from_array - from_bytes).max() < 0.1  # PIL's and libjpeg-turbo's decodes may differ by a level
    assert imagenet_eval(rgb, output_layout="HWC", crop=128).shape == (128, 128, 3)


def test_imagenet_eval_names_a_wrong_input():
    with pytest.raises(TypeError, match="presets"):
        imagenet_eval(np.zeros((4, 4), np.float32))


@pytest.mark.oracle
def test_imagenet_eval_matches_dalis_cpu_pipeline():
    encoded = _jpegs()
    want = _pipeline("dali", encoded)
    for enc, w in zip(encoded, want):
        got = imagenet_eval(enc)
        # within one level of 255 (1 / std after normalization); about a fifth of the values differ
        d = np.abs(got - w)
        assert d.max() <= 1.0 / min(IMAGENET_STD) + 1e-5
        assert (d > 1e-3).mean() < 0.3
