"""Image operators on FHWC sequences (CPU): each frame of a sample is processed as the image would be,
with one set of random values per sample (not per frame); DALI's CPU operators on the same FHWC
batches agree."""

import warnings

import numpy as np
import pytest

from stoker import fn, pipeline_def, types

OPS = {
    "resize": dict(resize_x=21, resize_y=17),
    "crop_mirror_normalize": dict(crop=(20, 24), crop_pos_x=0.3, crop_pos_y=0.6, mean=[10.0, 20.0, 30.0],
                                  std=[2.0, 3.0, 4.0], mirror=1, dtype=types.FLOAT, output_layout="FCHW"),
    "flip": dict(horizontal=1, vertical=1),
    "color_twist": dict(brightness=1.2, contrast=0.8, saturation=1.3, hue=20.0),
}


def _clips(n=3, f=4, h=30, w=40, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, (f + k, h + 2 * k, w, 3), dtype=np.uint8) for k in range(n)]


def _run(lib_fn, pipeline_def_, data, layout, op, kw):
    @pipeline_def_(batch_size=len(data), num_threads=1, device_id=None)
    def p():
        x = lib_fn.external_source(source=lambda: data, batch=True, layout=layout)
        return getattr(lib_fn, op)(x, **kw)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pipe = p()
        pipe.build()
        (out,) = pipe.run()
    return [np.array(out[i]) for i in range(len(data))], out.layout()


@pytest.mark.parametrize("op", sorted(OPS))
def test_frame_by_frame(op):
    clips = _clips()
    got, layout = _run(fn, pipeline_def, clips, "FHWC", op, OPS[op])
    hwc_kw = dict(OPS[op])
    if op == "crop_mirror_normalize":
        hwc_kw["output_layout"] = "CHW"
    for clip, g in zip(clips, got):
        frames, _ = _run(fn, pipeline_def, list(clip), "HWC", op, hwc_kw)
        # (float outputs: the FHWC path may round its multiply-adds in another order, ~1e-7)
        np.testing.assert_allclose(g, np.stack(frames), rtol=0, atol=1e-5 if g.dtype.kind == "f" else 0)
    assert layout == ("FCHW" if op == "crop_mirror_normalize" else "FHWC")


@pytest.mark.oracle
@pytest.mark.parametrize("op", sorted(OPS))
def test_matches_dali_on_sequences(op):
    dali = pytest.importorskip("nvidia.dali")
    clips = _clips(seed=1)
    got, layout = _run(fn, pipeline_def, clips, "FHWC", op, OPS[op])
    want, dlayout = _run(dali.fn, dali.pipeline_def, clips, "FHWC", op, OPS[op])
    assert layout == dlayout
    tol = {"resize": 1, "color_twist": 1, "crop_mirror_normalize": 1e-4, "flip": 0}[op]
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        assert np.abs(g.astype(np.float64) - w).max() <= tol


def test_random_values_are_per_sample_not_per_frame():
    clips = _clips()

    @pipeline_def(batch_size=3, num_threads=1, device_id=None, seed=4)
    def p():
        x = fn.external_source(source=lambda: clips, batch=True, layout="FHWC")
        return fn.flip(x, horizontal=fn.random.coin_flip())

    pipe = p()
    pipe.build()
    (out,) = pipe.run()
    for k, clip in enumerate(clips):
        o = np.array(out[k])
        flipped = np.array_equal(o, clip[:, :, ::-1])
        assert flipped or np.array_equal(o, clip)
        assert all(np.array_equal(o[j], clip[j, :, ::-1] if flipped else clip[j]) for j in range(len(clip)))
