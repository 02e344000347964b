"""hue, saturation, hsv and color_twist against DALI's CPU operators and colour properties."""

import numpy as np
import pytest
from oracle import compare_op, run_op

from stoker import types

HSV_CASES = [
    ("hsv", dict(hue=30.0)),
    ("hsv", dict(hue=-50.0, saturation=1.5, value=0.7)),
    ("hsv", dict(saturation=0.0, value=1.2, dtype=types.FLOAT)),
    ("hsv", dict(hue=400.0, saturation=0.5)),
    ("hue", dict(hue=90.0)),
    ("hue", dict(hue=-17.5, dtype=types.FLOAT)),
    ("saturation", dict(saturation=0.3)),
    ("saturation", dict(saturation=2.5)),
    ("color_twist", dict(brightness=1.2, contrast=0.8, hue=20.0, saturation=1.3)),
    ("color_twist", dict(contrast=0.5)),
    ("color_twist", dict(brightness=0.6, hue=-120.0, dtype=types.FLOAT)),
]


@pytest.mark.oracle
@pytest.mark.parametrize("name,kwargs", HSV_CASES, ids=lambda c: str(c))
def test_uint8_matches_dali(name, kwargs, images):
    # same matrix, float32; a rounding tie may land one apart
    tol = (1e-3, 1e-3) if kwargs.get("dtype") == types.FLOAT else (0.01, 1)
    compare_op(name, [images["rgb"], images["noise"]], *tol, **kwargs)


@pytest.mark.oracle
@pytest.mark.parametrize("name,kwargs", [("hue", dict(hue=45.0)), ("saturation", dict(saturation=0.2)),
                                         ("hsv", dict(hue=10.0, value=0.9, dtype=types.FLOAT)),
                                         ("hsv", dict(hue=10.0)),  # float in, uint8 out: no rescaling
                                         ("color_twist", dict(brightness=1.1, contrast=1.4, hue=5.0))])
def test_float_matches_dali(name, kwargs, images):
    tol = (0.01, 1) if name == "hsv" and "dtype" not in kwargs else (1e-6, 1e-5)
    compare_op(name, [images["rgb_f"]], *tol, **kwargs)


@pytest.mark.oracle
def test_per_sample_arguments_match_dali(images):
    batch = [images["rgb"], images["noise"], images["rgb"]]
    per_sample = {"hue": [np.float32(v) for v in (0.0, 33.0, -170.0)],
                  "saturation": [np.float32(v) for v in (1.0, 0.2, 1.8)],
                  "value": [np.float32(v) for v in (1.0, 1.1, 0.5)]}
    compare_op("hsv", batch, 0.01, 1, per_sample=per_sample)
    ct = {"brightness": per_sample["value"], "contrast": [np.float32(v) for v in (1.0, 0.4, 1.5)]}
    compare_op("color_twist", batch, 0.01, 1, per_sample=ct, hue=12.0)


def test_neutral_arguments_are_identity(images):
    x = images["rgb"]
    for name in ("hsv", "hue", "saturation", "color_twist"):
        np.testing.assert_array_equal(run_op("stoker", name, [x])[0], x, err_msg=name)


def test_zero_saturation_gives_grey_and_keeps_luma(images):
    x = images["rgb_f"]
    out = run_op("stoker", "saturation", [x], saturation=0.0)[0]
    luma = x @ np.float32([0.299, 0.587, 0.114])
    # the way back from YIQ is the inverse of the 3-decimal NTSC matrix, whose luma column is
    # 1 +- 0.4%: grey up to that (as DALI)
    np.testing.assert_allclose(out, np.repeat(luma[..., None], 3, axis=-1), rtol=5e-3, atol=1e-6)


def test_hue_full_turn_is_identity(images):
    x = images["rgb_f"]
    out = run_op("stoker", "hue", [x], hue=360.0)[0]
    np.testing.assert_allclose(out, x, atol=1e-5)


def test_bgr_image_type_is_rgb_with_channels_swapped(images):
    """On purpose unlike DALI 2.4, whose CPU hue/saturation/color_twist ignore image_type and
    weigh BGR pixels as if they were RGB: stoker honours the argument."""
    x = images["rgb"]
    rgb = run_op("stoker", "hue", [x], hue=40.0)[0]
    bgr = run_op("stoker", "hue", [np.ascontiguousarray(x[..., ::-1])], hue=40.0, image_type=types.BGR)[0]
    np.testing.assert_array_equal(bgr[..., ::-1], rgb)


def test_errors_name_operator_and_argument(images):
    from stoker.errors import OperatorError, PipelineBuildError

    with pytest.raises(OperatorError, match="(?s)saturation.*must not be negative"):
        run_op("stoker", "saturation", [images["rgb"]], saturation=-1.0)
    with pytest.raises(OperatorError, match="(?s)hsv.*3 channels"):
        run_op("stoker", "hsv", [images["gray"]])
    with pytest.raises(PipelineBuildError, match="hue.*'image_type'"):
        run_op("stoker", "hue", [images["rgb"]], image_type=types.YCbCr)


@pytest.mark.oracle
def test_random_hue_from_random_uniform_matches_dali(images):
    """The augmentation pattern: per-sample arguments drawn by fn.random.uniform."""
    from stoker import fn, pipeline_def

    batch = [images["rgb"], images["noise"], images["rgb"], images["noise"]]

    @pipeline_def(batch_size=4, num_threads=2, device_id=None, seed=9)
    def pipe():
        x = fn.external_source(source=lambda: batch, batch=True, layout="HWC")
        hue = fn.random.uniform(range=(-45.0, 45.0))
        sat = fn.random.uniform(range=(0.5, 1.5))
        return fn.hsv(x, hue=hue, saturation=sat), hue, sat

    p = pipe()
    p.build()
    out, hue, sat = p.run()
    hues = [np.float32(np.asarray(hue.at(i))) for i in range(4)]
    sats = [np.float32(np.asarray(sat.at(i))) for i in range(4)]
    assert len(set(hues)) == 4 and all(-45 <= h < 45 for h in hues)
    theirs = run_op("dali", "hsv", batch, per_sample={"hue": hues, "saturation": sats})
    for i in range(4):
        d = np.abs(np.asarray(out.at(i)).astype(int) - theirs[i])
        assert d.max() <= 1 and d.mean() < 0.01
