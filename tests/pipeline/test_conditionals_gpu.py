"""Per-sample conditionals on GPU batches against the same pipeline on the CPU."""

import numpy as np
import pytest

import stoker
import stoker.fn as fn
from stoker.auto_aug import rand_augment, trivial_augment

pytestmark = pytest.mark.gpu


def _run(build, images, gpu: bool, seed: int = 3):
    @stoker.pipeline_def(batch_size=len(images), num_threads=2, device_id=0, seed=seed, enable_conditionals=True)
    def pipe():
        x = fn.external_source(source=lambda: images, batch=True, layout="HWC")
        return build(x.gpu() if gpu else x)

    p = pipe()
    p.build()
    outs = []
    for _ in range(2):
        (out,) = p.run()
        outs.append([np.asarray(s) for s in (out.as_cpu() if gpu else out).samples()])
    p.close()
    return outs


def _if_else(x):
    if fn.random.coin_flip(probability=0.4):
        x = fn.flip(x, horizontal=1)
        x = fn.brightness_contrast(x, brightness=1.25, contrast=0.75)
    else:
        x = fn.crop(x, crop=(20, 24), out_of_bounds_policy="pad")
    return x


def test_if_else_on_gpu_batches_matches_cpu(make_images):
    images = make_images(24)
    got, want = _run(_if_else, images, True), _run(_if_else, images, False)
    for g_it, w_it in zip(got, want):
        for g, w in zip(g_it, w_it):
            assert g.shape == w.shape
            assert np.abs(g.astype(int) - w.astype(int)).max() <= 1


@pytest.mark.parametrize("scheme", [lambda x: rand_augment.rand_augment(x, n=2, m=9),
                                    lambda x: trivial_augment.trivial_augment_wide(x)], ids=["ra", "ta"])
def test_auto_aug_on_gpu_batches_matches_cpu(make_images, scheme):
    images = make_images(32, 40, 60)
    got, want = _run(scheme, images, True), _run(scheme, images, False)
    for g_it, w_it in zip(got, want):
        for g, w in zip(g_it, w_it):
            assert g.shape == w.shape and g.dtype == w.dtype
            # the GPU's bilinear warps differ from OpenCV's by a level or two at edges
            assert np.abs(g.astype(float) - w.astype(float)).mean() < 1.0
