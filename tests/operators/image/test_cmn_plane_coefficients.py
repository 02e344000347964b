"""crop_mirror_normalize's plane path caches its per-channel multiplier and offset per argument
values (CropMirrorNormalize._plane_coefs): one instance fed different mean/std values, constant
or per sample, must give each sample its own normalization, bit for bit what the uncached
formula gives."""

import cv2
import numpy as np

import stoker.types as types
from stoker.operators.base import SampleContext
from stoker.operators.image.crop_mirror_normalize import CropMirrorNormalize


def make(**kw):
    static, _ = CropMirrorNormalize.schema.bind(dict(dtype=types.FLOAT, output_layout="CHW", **kw), lambda v: False)
    return CropMirrorNormalize(static, "cpu", op_seed=1)


def reference(img, mean, std, scale=1.0, shift=0.0, mirror=0):
    """What the plane path computed before the cache: float32 ``scale / std`` and ``shift - mean *
    mul`` per sample, then OpenCV's multiply-add per plane."""
    mean = np.asarray(mean, np.float32).reshape(-1)
    std = np.asarray(std, np.float32).reshape(-1)
    mul = np.broadcast_to(np.float32(scale) / std, (3,))
    add = np.broadcast_to(np.float32(shift) - mean * mul, (3,))
    planes = cv2.split(cv2.flip(img, 1) if mirror else img)
    return np.stack([cv2.addWeighted(planes[c], float(mul[c]), planes[c], 0.0, float(add[c]), dtype=cv2.CV_32F)
                     for c in range(3)])


def test_each_sample_gets_its_own_mean_and_std():
    rng = np.random.default_rng(0)
    op = make(scale=1.5, shift=3.0)
    img = rng.integers(0, 256, (17, 23, 3), np.uint8)
    cases = [([0.0], [1.0]), ([10.0, 20.0, 30.0], [2.0, 3.0, 4.0]), (np.float32([1.5, 2.5, 3.5]), np.float32([9.0])),
             ([10, 20, 30], [2, 3, 4]), ([10.0, 20.0, 31.0], [2.0, 3.0, 4.0]), ([0.0], [1.0])]
    for mirror in (0, 1):
        for mean, std in cases:
            args = dict(op.args, mean=mean, std=std, mirror=mirror)
            got = op.run_sample((img,), args, SampleContext(0, 0, 1))
            want = reference(img, mean, std, 1.5, 3.0, mirror)
            assert got.dtype == np.float32 and np.array_equal(got, want), (mean, std, mirror)
    assert len(op._coef_cache) == 4  # ([10, 20, 30] and [10.0, 20.0, 30.0] are the same values)


def test_channel_counts_that_do_not_fit_still_fail():
    op = make()
    img = np.zeros((4, 5, 3), np.uint8)
    args = dict(op.args, mean=[1.0, 2.0], std=[1.0])
    assert op._fast_hwc_to_chw(img, args, "HWC", 3, None) is None
    try:
        op.run_sample((img,), args, SampleContext(0, 0, 1))
    except Exception as e:  # noqa: BLE001 - the generic path reports the mismatch
        assert "mean" in str(e)
    else:
        raise AssertionError("a 2-value mean for 3 channels was accepted")


def test_samples_without_per_sample_arguments_share_one_plan_per_shape_and_layout():
    """With only the input's layout given per sample, every sample gets the same arguments object
    (sample_args), and its window and coefficients are taken from per-shape caches: same values
    as computing them for each sample, for samples of several shapes in turn; a bad window
    position still fails every sample it is given to."""
    import pytest

    rng = np.random.default_rng(2)
    mean, std = [10.0, 20.0, 30.0], [2.0, 3.0, 4.0]
    op = make(crop=(5, 7), crop_pos_x=0.25, mean=mean, std=std)
    shapes = [(17, 23, 3), (9, 11, 3), (17, 23, 3), (30, 8, 3)]
    imgs = [rng.integers(0, 256, s, np.uint8) for s in shapes]
    arg_inputs = {"__layout": ["HWC"] * len(imgs)}
    firsts = [op.sample_args(arg_inputs, i) for i in range(len(imgs))]
    assert all(a is firsts[0] for a in firsts) and firsts[0]["__layout"] == "HWC"
    for i, img in enumerate(imgs):
        got = op.run_sample((img,), op.sample_args(arg_inputs, i), SampleContext(i, 0, 1))
        fresh = make(crop=(5, 7), crop_pos_x=0.25, mean=mean, std=std)
        want = fresh.run_sample((img,), dict(fresh.args, __layout="HWC"), SampleContext(i, 0, 1))
        assert got.shape == want.shape == (3, 5, 7 if img.shape[1] >= 7 else img.shape[1])
        np.testing.assert_array_equal(got, want)
    assert len(op._window_plans) == 3  # (one plan per shape and layout)
    bad = make(crop=(5, 7), crop_pos_x=1.5)
    for i in range(2):
        with pytest.raises(ValueError, match="crop_pos_x"):
            bad.run_sample((imgs[0],), bad.sample_args(arg_inputs, i), SampleContext(i, 0, 1))


def test_the_window_plan_is_shared_only_while_its_arguments_are_the_operators_own():
    rng = np.random.default_rng(3)
    op = make(crop=(5, 7), mean=[1.0, 2.0, 3.0], std=[2.0, 2.0, 2.0])
    img = rng.integers(0, 256, (17, 23, 3), np.uint8)
    # mirror varies by sample, the window does not: one plan for the shape
    inputs = {"__layout": ["HWC"] * 2, "mirror": [np.int32(0), np.int32(1)]}
    outs = [op.run_sample((img,), op.sample_args(inputs, i), SampleContext(i, 0, 1)) for i in range(2)]
    np.testing.assert_array_equal(outs[1], outs[0][:, :, ::-1])
    assert len(op._window_plans) == 1
    # the window's position varies by sample: each sample its own window, nothing cached for it
    inputs = {"__layout": ["HWC"] * 2, "crop_pos_x": [np.float32(0.0), np.float32(1.0)]}
    left, right = [op.run_sample((img,), op.sample_args(inputs, i), SampleContext(i, 0, 1)) for i in range(2)]
    fresh = make(crop=(5, 7), mean=[1.0, 2.0, 3.0], std=[2.0, 2.0, 2.0])
    for pos, got in ((0.0, left), (1.0, right)):
        want = fresh.run_sample((img,), dict(fresh.args, crop_pos_x=pos, __layout="HWC"), SampleContext(0, 0, 1))
        np.testing.assert_array_equal(got, want)
    assert not np.array_equal(left, right) and len(op._window_plans) == 1
