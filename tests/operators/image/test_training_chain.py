"""The usual training chain (random_resized_crop -> crop_mirror_normalize with a random mirror,
rotate with a random angle) as a pipeline: deterministic for a seed whatever num_threads,
shapes and dtypes as DALI's."""

import numpy as np
import pytest
from oracle import pipeline, run_pipeline

from stoker import fn, pipeline_def, types


def _chain(f, batch):
    x = f.external_source(source=lambda: batch, batch=True, layout="HWC")
    x = f.random_resized_crop(x, size=(56, 48))
    x = f.rotate(x, angle=f.random.uniform(range=(-10, 10)), fill_value=0, keep_size=True)
    flip = f.random.coin_flip(probability=0.5)
    return f.crop_mirror_normalize(x, mirror=flip, crop=(48, 40), dtype=types.FLOAT16,
                                   mean=[0.485 * 255, 0.456 * 255, 0.406 * 255],
                                   std=[0.229 * 255, 0.224 * 255, 0.225 * 255]), flip


def _run(batch, num_threads, seed=21):
    @pipeline_def(batch_size=len(batch), num_threads=num_threads, device_id=None, seed=seed)
    def pipe():
        return _chain(fn, batch)

    p = pipe()
    p.build()
    return [[np.asarray(t.at(i)) for i in range(len(t))] for _ in range(2) for t in p.run()]


def test_chain_deterministic_across_threads(images):
    batch = [images["rgb"], images["rgb_odd"], images["noise"], images["tall"]] * 2
    one = _run(batch, 1)
    for n in (2, 4):
        other = _run(batch, n)
        assert all(np.array_equal(a, b) for ta, tb in zip(one, other) for a, b in zip(ta, tb))
    assert not all(np.array_equal(a, b) for a, b in zip(one[0], _run(batch, 1, seed=22)[0]))


def test_mirror_follows_coin_flip(images):
    img = images["noise"]

    @pipeline_def(batch_size=8, num_threads=2, device_id=None, seed=4)
    def pipe():
        x = fn.external_source(source=lambda: [img] * 8, batch=True, layout="HWC")
        flip = fn.random.coin_flip()
        return fn.crop_mirror_normalize(x, mirror=flip, output_layout="HWC"), flip

    p = pipe()
    p.build()
    out, flip = p.run()
    for i in range(8):
        want = img[:, ::-1] if int(np.asarray(flip.at(i))) else img
        np.testing.assert_array_equal(np.asarray(out.at(i)), want.astype(np.float32))


@pytest.mark.oracle
def test_chain_shapes_and_dtypes_match_dali(images):
    batch = [images["rgb"], images["rgb_odd"], images["noise"]]

    def body(f, t):
        x = f.external_source(source=lambda: batch, batch=True, layout="HWC")
        x = f.random_resized_crop(x, size=(56, 48))
        x = f.rotate(x, angle=f.random.uniform(range=(-10, 10)), fill_value=0, keep_size=True)
        return f.crop_mirror_normalize(x, mirror=f.random.coin_flip(), crop=(48, 40), dtype=t.FLOAT16)

    ((theirs,),) = run_pipeline(pipeline("dali", body, 3, num_threads=1, seed=1))
    ours = _run(batch, 2)[0]
    for i in range(3):
        t = theirs[i]
        assert ours[i].shape == t.shape and ours[i].dtype == t.dtype
