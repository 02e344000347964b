"""Image operators on FHWC sequences (CPU): each frame of a sample is processed as the image would be,
with one set of random values per sample (not per frame); DALI's CPU operators on the same FHWC
batches agree."""

import numpy as np
import pytest
from oracle import CPU_CHECKS, Case, check_operator, run_case

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


def _run(data, layout, op, kw):
    (samples, out_layout), = run_case("stoker", op, Case(data, kw, layout=layout))
    return samples, out_layout


@pytest.mark.parametrize("op", sorted(OPS))
def test_frame_by_frame(op):
    clips = _clips()
    got, layout = _run(clips, "FHWC", op, OPS[op])
    hwc_kw = dict(OPS[op])
    if op == "crop_mirror_normalize":
        hwc_kw["output_layout"] = "CHW"
    for clip, g in zip(clips, got):
        frames, _ = _run(list(clip), "HWC", op, hwc_kw)
        # (float outputs: the FHWC path may round its multiply-adds in another order, ~1e-7)
        np.testing.assert_allclose(g, np.stack(frames), rtol=0, atol=1e-5 if g.dtype.kind == "f" else 0)
    assert layout == ("FCHW" if op == "crop_mirror_normalize" else "FHWC")


# DALI on the same FHWC batches: (mean, max) absolute difference allowed
SEQUENCE_TOL = {"resize": (1, 1), "color_twist": (1, 1), "crop_mirror_normalize": (1e-4, 1e-4), "flip": 0}
SEQUENCE_CASES = [(op, Case(_clips(seed=1), OPS[op], layout="FHWC", tol=SEQUENCE_TOL[op], id=op)) for op in sorted(OPS)]


@pytest.mark.oracle
@pytest.mark.parametrize("op, case", SEQUENCE_CASES, ids=[op for op, _ in SEQUENCE_CASES])
@pytest.mark.parametrize("check", CPU_CHECKS)
def test_sequences_check_operator(op, case, check):
    """FHWC sequences: DALI, 1 thread vs 4, pipeline vs eager."""
    check_operator(op, case, [check])


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
