"""Two GPU pipelines in one process (a training and a validation pipeline, as users run them), at
the same time from two threads: each gives the batches it gives alone. On the device. (Without a
GPU: tests/operators/decoders/test_mixed_fake_engines.py.) The decode share is fixed, so that the
same images go to the same decoder either way."""

import cv2
import numpy as np
import pytest

pytestmark = pytest.mark.gpu


def test_train_and_val_pipelines_at_once_give_their_own_batches(cp, tmp_path):
    from gpu_pipelines import assert_alone_equals_together

    import stoker.fn as fn
    import stoker.types as types
    from stoker import pipeline_def, settings

    rng = np.random.default_rng(21)
    for k in range(48):
        folder = tmp_path / f"c{k % 3}"
        folder.mkdir(exist_ok=True)
        h, w = (int(v) for v in rng.integers(60, 220, 2))
        small = rng.integers(0, 255, (max(2, h // 6), max(2, w // 6), 3), np.uint8)
        cv2.imwrite(str(folder / f"{k}.jpg"), cv2.resize(small, (w, h), interpolation=cv2.INTER_CUBIC))

    def make(kind):
        @pipeline_def(batch_size=8, num_threads=4, device_id=0, seed=9 if kind == "train" else 4)
        def pipe():
            jpegs, labels = fn.readers.file(file_root=str(tmp_path), random_shuffle=kind == "train")
            if kind == "train":
                x = fn.resize(fn.decoders.image_random_crop(jpegs, device="mixed"), resize_x=64, resize_y=64)
                return fn.crop_mirror_normalize(x, dtype=types.FLOAT, mirror=fn.random.coin_flip()), labels
            x = fn.resize(fn.decoders.image(jpegs, device="mixed"), resize_shorter=72)
            return fn.crop_mirror_normalize(x, crop=(64, 64), dtype=types.FLOAT), labels

        p = pipe()
        p.build()
        return p

    def batches(p, count=8):
        out = []
        for _ in range(count):
            images, labels = p.run()
            out.append([cp.asnumpy(images.as_tensor())] + [np.array(x) for x in labels.samples()])
        return out

    with settings.override(cpu_decode_share=0.0):
        assert_alone_equals_together(make, batches)
