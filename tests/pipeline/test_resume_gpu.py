"""Exact resume with GPU placement: a checkpoint taken mid-run, restored into a fresh pipeline, gives
bit-identical later batches (mixed decoder with random crop windows, GPU resize and
crop_mirror_normalize driven by random per-sample arguments, a random tensor moved with .gpu())."""

import numpy as np
import pytest

import stoker.fn as fn
import stoker.types as types
from stoker import pipeline_def

pytestmark = pytest.mark.gpu


def _pipe(root, checkpoint=None):
    @pipeline_def(batch_size=4, num_threads=2, device_id=0, seed=21, enable_checkpointing=True,
                  checkpoint=checkpoint)
    def train():
        jpegs, labels = fn.readers.file(file_root=root, random_shuffle=True, name="Reader")
        images = fn.decoders.image_random_crop(jpegs, device="mixed", output_type=types.RGB)
        images = fn.resize(images, resize_x=48, resize_y=40)
        images = fn.crop_mirror_normalize(images, dtype=types.FLOAT, output_layout="CHW", crop=(32, 32),
                                          crop_pos_x=fn.random.uniform(range=(0.0, 1.0)),
                                          crop_pos_y=fn.random.uniform(range=(0.0, 1.0)),
                                          mirror=fn.random.coin_flip(), mean=[120.0, 115.0, 100.0],
                                          std=[60.0, 60.0, 60.0])
        noise = fn.random.uniform(range=(-1.0, 1.0), shape=(3,))
        return images, labels, noise.gpu()

    return train()


def _host(batch):
    return np.asarray((batch.as_cpu() if hasattr(batch, "as_cpu") else batch).as_array())


def test_checkpoint_mid_run_restores_gpu_batches_exactly(sample_jpeg_dir):
    pytest.importorskip("nvidia.nvimgcodec")
    stop, total = 4, 9  # 24 files / batch 4: the run crosses into a reshuffled second epoch
    ref = _pipe(sample_jpeg_dir)
    expected = [[_host(x) for x in ref.run()] for _ in range(total)]
    ref.close()

    first = _pipe(sample_jpeg_dir)
    for k in range(stop):
        assert all(np.array_equal(_host(x), e) for x, e in zip(first.run(), expected[k]))
    state = first.checkpoint()
    first.close()

    resumed = _pipe(sample_jpeg_dir, checkpoint=state)
    for k in range(stop, total):
        got = [_host(x) for x in resumed.run()]
        for g, e in zip(got, expected[k]):
            assert g.dtype == e.dtype and g.shape == e.shape
            np.testing.assert_array_equal(g, e, err_msg=f"iteration {k}")
    resumed.close()
    assert expected[stop][0].shape == (4, 3, 32, 32)
    # the random values really vary, so an unrestored RNG would be caught
    assert not np.array_equal(expected[stop][2], expected[stop + 1][2])
