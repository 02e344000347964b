"""crop, crop_mirror_normalize and flip against DALI's CPU operators and NumPy."""

import numpy as np
import pytest
from generated_images import geometry_images
from oracle import Case, assert_close, case_params, check_operator, run_op

from stoker import types
from stoker.operators.image.geometry import crop_anchor


@pytest.mark.oracle
@pytest.mark.parametrize("op", ["crop", "crop_mirror_normalize"])
@pytest.mark.parametrize("rounding", ["round", "truncate"])
def test_anchor_matches_dali_near_halves(op, rounding):
    """pos * (in - crop) just below a half (0.9f * 5 = 4.4999999): DALI's product is exact,
    a float32 one would round up to 4.5."""
    img = np.arange(30 * 40, dtype=np.int64).reshape(30, 40, 1).astype(np.uint8)
    for n, c, pos in [(9, 4, 0.9), (9, 4, 0.7), (13, 4, 0.75), (27, 17, 0.7), (7, 4, 0.5), (29, 2, 0.3)]:
        kw = dict(crop=(c, 10), crop_pos_y=pos, crop_pos_x=0.0, rounding=rounding)
        if op != "crop":
            kw["output_layout"] = "HWC"
        want = run_op("dali", op, [img[:n]], **kw)[0]
        assert_close([run_op("stoker", op, [img[:n]], **kw)[0]], [want], 0, 0, f"{kw} on {n} rows")
        assert np.array_equal(img[:n][crop_anchor(n, c, pos, rounding):][:c, :10].astype(want.dtype), want)


CROP_CASES = [
    dict(crop=(32, 24)), dict(crop=(31, 5), crop_pos_x=0.9, crop_pos_y=0.1), dict(crop_h=20, crop_w=7),
    dict(crop=(3.6, 4.2)), dict(crop=(200, 40), out_of_bounds_policy="pad"),
    dict(crop=(200, 150), out_of_bounds_policy="pad", fill_values=9),
    dict(crop=(200, 150), out_of_bounds_policy="trim_to_shape"),
    dict(crop=(20, 20), crop_pos_x=1.0, crop_pos_y=0.0, dtype=types.FLOAT),
    dict(crop=(0.5, 30), crop_pos_x=0.2), dict(crop_h=-4, crop_w=7),  # extents < 1 keep the axis whole
    dict(crop=(20, 20), output_dtype=types.FLOAT),  # DALI's deprecated name of dtype
]


IM = geometry_images()
VOLUME = np.random.default_rng(3).integers(0, 256, (6, 9, 11, 2), np.uint8)
CROP_BATCH = [IM["rgb_odd"], IM["noise"], IM["gray"]]
# windows larger than the image put the anchor below zero, where truncation goes towards zero
ROUNDING_POS = {"crop_pos_x": [np.float32(v) for v in (0.3, 0.7, 0.5)],
                "crop_pos_y": [np.float32(v) for v in (0.3, 0.1, 0.9)]}
CROP_CHECKS = [
    *[Case(CROP_BATCH, kw) for kw in CROP_CASES],
    Case(CROP_BATCH, dict(crop=(17, 9)), {"crop_pos_x": [np.float32(v) for v in (0.0, 0.33, 1.0)],
                                          "crop_pos_y": [np.float32(v) for v in (0.7, 0.5, 0.05)]}),
    *[Case(CROP_BATCH, dict(crop=crop, rounding=rounding, out_of_bounds_policy="pad", fill_values=3), ROUNDING_POS,
           id=f"rounding={rounding},crop={crop}")
      for rounding in ("round", "truncate") for crop in [(17, 10), (100, 140)]],
    Case([VOLUME], dict(crop=(3, 4, 5), crop_pos_z=0.8, crop_pos_x=0.3), layout="DHWC", id="DHWC"),
]


@pytest.mark.oracle
@pytest.mark.parametrize("case, check", case_params(CROP_CHECKS))
def test_crop_check_operator(case, check):
    """DALI to the bit (windows, positions, rounding, padding, volumes), 1 thread vs 4, pipeline vs eager."""
    check_operator("crop", case, [check])


def test_crop_bad_rounding_names_the_argument(images):
    from stoker.errors import StokerError

    with pytest.raises(StokerError, match="rounding"):
        run_op("stoker", "crop", [images["gray"]], crop=(5, 5), rounding="floor")


def test_crop_out_of_bounds_error_names_the_argument(images):
    from stoker.errors import StokerError

    with pytest.raises(StokerError, match="out_of_bounds_policy"):
        run_op("stoker", "crop", [images["gray"]], crop=(500, 10))


CMN_CASES = [
    dict(crop=(24, 32), mean=[0.485 * 255, 0.456 * 255, 0.406 * 255], std=[0.229 * 255, 0.224 * 255, 0.225 * 255]),
    dict(crop=(24, 32), mirror=1, mean=[128.0], std=[64.0], output_layout="HWC"),
    dict(mean=[10.0, 20.0, 30.0], std=[2.0, 3.0, 4.0], scale=0.5, shift=3.0, dtype=types.FLOAT16),
    dict(crop=(30, 30), mean=[100.0], std=[40.0], scale=64, shift=128, dtype=types.UINT8),
    dict(crop=(20, 20), mean=[100.0], std=[50.0], scale=64, dtype=types.INT8, mirror=1),
    dict(crop=(24, 32), pad_output=True, mean=[1.0, 2.0, 3.0], std=[1.0, 1.0, 1.0]),
    dict(crop=(100, 120), out_of_bounds_policy="pad", fill_values=7.0, mean=[5.0], std=[2.0]),
    dict(crop=(17, 10), crop_pos_x=0.3, crop_pos_y=0.7, rounding="truncate", output_layout="HWC"),
    dict(crop=(100, 140), crop_pos_x=0.3, crop_pos_y=0.1, rounding="truncate", out_of_bounds_policy="pad"),
    dict(crop=(100, 140), crop_pos_x=0.3, crop_pos_y=0.1, rounding="round", out_of_bounds_policy="pad"),
    dict(crop=(0.5, 10), crop_pos_x=0.2), dict(crop_h=-4, crop_w=7),  # extents < 1 keep the axis whole
]


CMN_CHECKS = [
    *[Case([IM["rgb_odd"], IM["noise"]], kw, tol=(1, 1) if kw.get("dtype") in (types.UINT8, types.INT8) else
           (1e-2, 1e-2)) for kw in CMN_CASES],
    Case([np.ascontiguousarray(IM["rgb_odd"].transpose(2, 0, 1)), np.ascontiguousarray(IM["noise"].transpose(2, 0, 1))],
         dict(crop=(16, 20), crop_pos_x=0.2, mean=[50.0, 60.0, 70.0], std=[5.0, 6.0, 7.0], output_layout="HWC"),
         {"mirror": [np.int32(1), np.int32(0)]}, layout="CHW", tol=(1e-3, 1e-3), id="CHW,per-sample mirror"),
    Case([IM["rgb_odd"], IM["noise"]], per_sample={
        "mean": [np.float32([10, 20, 30]), np.float32([1, 2, 3])],
        "std": [np.float32([2, 3, 4]), np.float32([5, 5, 5])],
        "crop_h": [np.float32(20), np.float32(11)], "crop_w": [np.float32(9), np.float32(30)]}, tol=(1e-4, 1e-4)),
]


@pytest.mark.oracle
@pytest.mark.parametrize("case, check", case_params(CMN_CHECKS))
def test_crop_mirror_normalize_check_operator(case, check):
    """DALI (dtypes, layouts, padding, per-sample mirror, mean and std), 1 thread vs 4, pipeline vs eager."""
    check_operator("crop_mirror_normalize", case, [check])


def test_cmn_bad_rounding_names_the_argument(images):
    from stoker.errors import StokerError

    with pytest.raises(StokerError, match="rounding"):
        run_op("stoker", "crop_mirror_normalize", [images["gray"]], crop=(5, 5), rounding="floor")


def test_cmn_against_numpy(images):
    img = images["rgb_odd"]
    mean, std = np.array([1.0, 2.0, 3.0]), np.array([2.0, 4.0, 8.0])
    out = run_op("stoker", "crop_mirror_normalize", [img], crop=(10, 12), crop_pos_x=0.0, crop_pos_y=0.0, mirror=1,
                     mean=mean.tolist(), std=std.tolist())[0]
    want = ((img[:10, :12][:, ::-1] - mean) / std).transpose(2, 0, 1).astype(np.float32)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


def test_cmn_pads_with_per_channel_output_values():
    """fill_values are output values (after normalization). (DALI 2.4's CPU operator zeroes channels 1..
    of the image inside the window when fill_values has one value per channel, so no oracle here.)"""
    img = np.full((4, 4, 3), 100, np.uint8)
    out = run_op("stoker", "crop_mirror_normalize", [img], crop=(6, 6), out_of_bounds_policy="pad",
                     fill_values=[7.0, 8.0, 9.0], mean=[5.0], std=[2.0], output_layout="HWC")[0]
    assert out.shape == (6, 6, 3)
    np.testing.assert_array_equal(out[0], np.tile([7.0, 8.0, 9.0], (6, 1)))
    np.testing.assert_array_equal(out[1:5, 1:5], np.full((4, 4, 3), 47.5, np.float32))


FLIP_CASES = [dict(), dict(horizontal=0, vertical=1), dict(horizontal=1, vertical=1), dict(horizontal=0)]


FLIP_CHECKS = [
    *[Case([IM["rgb_odd"], IM["gray"]], kw) for kw in FLIP_CASES],
    Case([np.ascontiguousarray(IM["noise"].transpose(2, 0, 1))] * 3, per_sample={
        "horizontal": [np.int32(v) for v in (0, 1, 1)], "vertical": [np.int32(v) for v in (1, 0, 1)]}, layout="CHW"),
    Case([VOLUME], dict(horizontal=0, depthwise=1, vertical=1), layout="DHWC", id="DHWC"),
]


@pytest.mark.oracle
@pytest.mark.parametrize("case, check", case_params(FLIP_CHECKS))
def test_flip_check_operator(case, check):
    """DALI to the bit (axes, per-sample flags, CHW, volumes), 1 thread vs 4, pipeline vs eager."""
    check_operator("flip", case, [check])


def test_flip_against_numpy(images):
    img = images["noise"]
    out = run_op("stoker", "flip", [img], horizontal=1, vertical=1)[0]
    np.testing.assert_array_equal(out, img[::-1, ::-1])


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.uint16, np.int16, np.int32, np.float32, np.float64,
                                   np.uint32, np.float16])
@pytest.mark.parametrize("shape, layout", [((7, 9, 3), "HWC"), ((7, 9, 1), "HWC"), ((5, 6, 4), "HWC"),
                                           ((7, 9), "HW"), ((4, 5, 6), "HWC"), ((3, 7, 9), "CHW")])
@pytest.mark.parametrize("horizontal, vertical", [(1, 0), (0, 1), (1, 1)])
def test_flip_moves_elements_as_numpy_does_on_every_path(dtype, shape, layout, horizontal, vertical):
    """The OpenCV path (HW / HWC with up to 4 channels, its types) and the NumPy one (others:
    6 channels, CHW, uint32, float16) give NumPy's flip, element for element, in a new array."""
    img = (np.random.default_rng(3).integers(-100, 100, shape) * 1.5).astype(dtype)
    out = run_op("stoker", "flip", [img], horizontal=horizontal, vertical=vertical, layout=layout)[0]
    w, h = layout.index("W"), layout.index("H")
    want = np.flip(img, axis=[a for a, on in ((w, horizontal), (h, vertical)) if on])
    assert out.dtype == img.dtype and out.shape == img.shape
    np.testing.assert_array_equal(out, want)
    assert not np.shares_memory(out, img)


def test_crop_position_out_of_range_names_the_argument(images):
    from stoker.errors import StokerError

    with pytest.raises(StokerError, match="crop_pos_y"):
        run_op("stoker", "crop", [images["gray"]], crop=(5, 5), crop_pos_y=1.2, out_of_bounds_policy="pad")


def test_crop_shares_its_window_plan_across_samples_of_one_shape():
    """crop's window per (shape, layout) while its window arguments are its own: a batch of
    mixed shapes gives each sample the window NumPy's slicing gives it; a per-sample position is
    never taken from the shared plans."""
    import stoker.fn as fn
    from stoker import pipeline_def

    rng = np.random.default_rng(4)
    shapes = [(40, 50, 3), (30, 20, 3), (40, 50, 3), (25, 60, 3)]
    batch = [rng.integers(0, 256, s, np.uint8) for s in shapes]
    pos = [np.float32(p) for p in (0.0, 0.5, 1.0, 0.25)]

    @pipeline_def(batch_size=4, num_threads=2, device_id=None)
    def pipe():
        x = fn.external_source(source=lambda: batch, batch=True, layout="HWC")
        px = fn.external_source(source=lambda: pos, batch=True)
        return fn.crop(x, crop=(10, 12)), fn.crop(x, crop=(10, 12), crop_pos_x=px)

    p = pipe()
    p.build()
    for _ in range(2):
        fixed, moving = p.run()
        for k, img in enumerate(batch):
            h, w = img.shape[:2]
            y, x = crop_anchor(h, 10, 0.5, "round"), crop_anchor(w, 12, 0.5, "round")
            np.testing.assert_array_equal(np.asarray(fixed.at(k)), img[y:y + 10, x:x + 12])
            x = crop_anchor(w, 12, float(pos[k]), "round")
            np.testing.assert_array_equal(np.asarray(moving.at(k)), img[y:y + 10, x:x + 12])
    p.close()


@pytest.mark.parametrize("dtype", [np.uint8, np.float32, np.int16])
@pytest.mark.parametrize("shape, layout", [((40, 37, 3), "HWC"), ((40, 37), "HW"), ((40, 37, 5), "HWC")])
def test_cmn_mirror_in_the_general_path_equals_flipping_after_the_arithmetic(dtype, shape, layout):
    """HWC / HW output (not the CHW plane path): the input is mirrored before the arithmetic (through
    OpenCV where it can), which must give the values of mirroring the normalized window after it."""
    img = (np.random.default_rng(5).integers(0, 255, shape) * 1.0).astype(dtype)
    nch = shape[2] if len(shape) == 3 else 1
    mean, std = [float(10 + 3 * c) for c in range(nch)], [float(2 + c) for c in range(nch)]
    outs = run_op("stoker", "crop_mirror_normalize", [img], crop=(30, 20), crop_pos_x=0.3, crop_pos_y=0.6,
                  mirror=1, mean=mean, std=std, output_layout=layout, layout=layout)
    y0, x0 = round(0.6 * (40 - 30)), round(0.3 * (37 - 20))
    window = img[y0:y0 + 30, x0:x0 + 20].astype(np.float32)
    m, s = np.float32(mean), np.float32(1.0) / np.float32(std)
    if len(shape) == 2:
        m, s = m[0], s[0]
    want = ((window - m) * s + np.float32(0.0))[:, ::-1]
    np.testing.assert_array_equal(outs[0], want)
