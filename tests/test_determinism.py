"""Every random value is a function of (seed, operator, iteration, sample): results do not depend on
thread count, prefetch depth or execution mode, and differ when the seed differs."""

import numpy as np
import pytest

import stoker.fn as fn
import stoker.types as types
from stoker import pipeline_def


def augmenting_pipeline(root, **kwargs):
    @pipeline_def(batch_size=6, device_id=None, **kwargs)
    def p():
        jpegs, labels = fn.readers.file(file_root=root, random_shuffle=True)
        images = fn.decoders.image_random_crop(jpegs, output_type=types.RGB)
        images = fn.resize(images, resize_x=64, resize_y=48)
        images = fn.rotate(images, angle=fn.random.uniform(range=(-20, 20)), fill_value=0, keep_size=True)
        images = fn.crop_mirror_normalize(images, dtype=types.FLOAT, output_layout="CHW",
                                          mean=[128.0], std=[64.0], mirror=fn.random.coin_flip())
        return images, labels, fn.random.normal(shape=[2])

    return p()


def collect(pipe, iterations=5):
    pipe.build()
    out = []
    for _ in range(iterations):
        out.append([np.array(t.as_array()) for t in pipe.run()])
    pipe.close()
    return out


@pytest.mark.parametrize("config", [dict(num_threads=2, prefetch_queue_depth=3),
                                    dict(num_threads=4, prefetch_queue_depth=1, exec_async=False),
                                    dict(num_threads=3, exec_pipelined=False)])
def test_same_seed_same_batches_whatever_the_threads(sample_jpeg_dir, config):
    reference = collect(augmenting_pipeline(sample_jpeg_dir, num_threads=1, seed=99))
    other = collect(augmenting_pipeline(sample_jpeg_dir, seed=99, **config))
    for a, b in zip(reference, other):
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x, y)


def test_different_seed_different_batches(sample_jpeg_dir):
    a = collect(augmenting_pipeline(sample_jpeg_dir, num_threads=2, seed=1), iterations=2)
    b = collect(augmenting_pipeline(sample_jpeg_dir, num_threads=2, seed=2), iterations=2)
    assert not np.array_equal(a[0][0], b[0][0])
    assert not np.array_equal(a[0][2], b[0][2])
