"""The augmentation suite (stoker.auto_aug.augmentations) and the Augmentation API: each op
against DALI's at fixed magnitudes, against NumPy where the op is simple, and its parameters."""

import warnings

import numpy as np
import pytest
from oracle import pipeline, run_pipeline, submodule, to_dali

import stoker
from stoker import types
from stoker.auto_aug import augmentations as sa
from stoker.auto_aug.core import Augmentation, MissingArgError, augmentation, signed_bin

BS = 4
NAMES = ["shear_x", "shear_y", "translate_x", "translate_y", "translate_x_no_shape", "translate_y_no_shape",
         "rotate", "brightness", "contrast", "color", "sharpness", "posterize", "solarize", "solarize_add",
         "invert", "equalize", "auto_contrast", "identity"]
GEOMETRIC = {"shear_x", "shear_y", "translate_x", "translate_y", "translate_x_no_shape", "translate_y_no_shape",
             "rotate"}


def _images():
    rng = np.random.default_rng(0)
    imgs = [rng.integers(0, 256, (18 + 3 * i, 22 + i, 3), dtype=np.uint8) for i in range(BS)]
    imgs[1] = np.clip(imgs[1], 40, 200).astype(np.uint8)  # a low-contrast image for auto_contrast/equalize
    imgs[2][..., 1] = 77  # a flat channel
    return imgs


def _apply(lib, name, magnitude_bin, sign, num_bins=11, **extra):
    """Run ``auto_aug.augmentations.<name>`` of ``lib`` ("stoker" or "dali") on the test images at
    one magnitude; ``extra`` takes stoker's enums (converted for DALI)."""
    module = submodule(lib, "auto_aug.augmentations")
    core = submodule(lib, "auto_aug.core")
    images = _images()
    if lib == "dali":
        extra = {k: to_dali(v) for k, v in extra.items()}

    def body(f, t):
        x = f.external_source(source=lambda: images, batch=True, layout="HWC")
        aug = getattr(module, name)
        kw = dict(extra)
        if aug.mag_range is not None:
            kw.update(magnitude_bin=magnitude_bin, num_magnitude_bins=num_bins)
            if aug.randomly_negate:
                s = f.external_source(source=lambda: [np.array(sign, np.int32)] * BS, batch=True)
                kw["magnitude_bin"] = core.signed_bin(magnitude_bin, random_sign=s)
        if name in ("translate_x", "translate_y"):
            kw["shape"] = x.shape()
        return aug(x, **kw)

    p = pipeline(lib, body, BS, num_threads=2, seed=1, enable_conditionals=True)
    ((out,),) = run_pipeline(p)
    if hasattr(p, "close"):
        p.close()
    return out


@pytest.mark.oracle
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("magnitude_bin,sign", [(2, 0), (7, 1), (10, 0)])
def test_matches_dali(name, magnitude_bin, sign):
    extra = {"interp_type": types.INTERP_NN} if name in GEOMETRIC else {}
    got = _apply("stoker", name, magnitude_bin, sign, **extra)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # DALI's deprecation notes (experimental.filter/equalize)
        want = _apply("dali", name, magnitude_bin, sign, **extra)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype == np.uint8 and g.shape == w.shape
        if name == "rotate":
            # fn.rotate itself (not the augmentation) rounds a few nearest-neighbour ties
            # differently from DALI at some angles: the same few pixels as a bare fn.rotate.
            assert (g != w).any(axis=-1).mean() < 0.05
        else:
            np.testing.assert_array_equal(g, w)


@pytest.mark.oracle
@pytest.mark.parametrize("name", ["shear_x", "translate_y", "rotate"])
def test_linear_warps_within_one_level_of_dali(name):
    got = _apply("stoker", name, 6, 1)
    want = _apply("dali", name, 6, 1)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        diff = np.abs(g.astype(int) - w.astype(int))
        assert diff.max() <= 1 and (diff > 0).mean() < 0.05


def test_pointwise_ops_match_numpy():
    imgs = _images()
    bins = 11
    solar_thr = np.linspace(256, 0, bins, dtype=np.float32)[4]
    checks = {
        "invert": lambda x: 255 - x,
        "identity": lambda x: x,
        "posterize": lambda x: x & np.uint8(0xF0),  # bin 10 of (0, 4): 4 bits kept
        "solarize": lambda x: np.where(x < solar_thr, x, 255 - x),
        "solarize_add": lambda x: np.where(x < 128, x + np.uint8(44), x),  # bin 4 of (0, 110)
    }
    for name, ref in checks.items():
        mag = 10 if name == "posterize" else 4
        got = _apply("stoker", name, mag, 0, num_bins=bins)
        for g, x in zip(got, imgs):
            np.testing.assert_array_equal(g, ref(x).astype(np.uint8), err_msg=name)


def test_auto_contrast_stretches_each_channel():
    got = _apply("stoker", "auto_contrast", 0, 0)
    for g, x in zip(got, _images()):
        for c in range(3):
            if x[..., c].min() == x[..., c].max():
                np.testing.assert_array_equal(g[..., c], x[..., c])  # flat channels stay
            else:
                assert g[..., c].min() == 0 and g[..., c].max() == 255


def test_params_of_the_magnitude_bins():
    mags = sa.shear_x.magnitudes(11)
    np.testing.assert_allclose(mags, np.linspace(0, 0.3, 11))
    np.testing.assert_allclose(sa.shear_x.param_of(-mags[3]), [-0.09, 0], rtol=1e-6)
    assert sa.posterize.param_of(0).item() == 0x80  # bin 0 maps to 1 bit, never a blank image
    assert [int(sa.poster_mask_uint8(m)) for m in (1, 4, 8, 9)] == [0x80, 0xF0, 0xFF, 0xFF]
    k = sa.sharpness_kernel(0.5)
    assert k.shape == (3, 3) and abs(k.sum() - 1) < 1e-6  # keeps the mean brightness
    np.testing.assert_allclose(sa.sharpness_kernel(0.0), np.eye(3)[1][:, None] * np.eye(3)[1][None, :])
    with pytest.raises(ValueError, match="solarize_add"):
        sa.solarize_add_shift(128)


def test_augmentation_decorator_and_copies():
    @augmentation(mag_range=(0, 10), randomly_negate=True)
    def add(data, value, bias=0):
        return data + value + bias

    assert isinstance(add, Augmentation) and add.name == "add" and add.randomly_negate
    wider = add.augmentation(mag_range=(0, 20), name="add_wide")
    assert (wider.mag_range, wider.name, add.mag_range) == ((0, 20), "add_wide", (0, 10))
    assert augmentation(add, randomly_negate=False).randomly_negate is False

    @stoker.pipeline_def(batch_size=2, num_threads=1, device_id=None, seed=2)
    def pipe():
        x = stoker.fn.constant(fdata=[1.0], shape=[])
        sign = stoker.fn.external_source(source=lambda: [np.int32(0), np.int32(1)], batch=True)
        # extra keyword arguments the op does not take are dropped
        return add(x, magnitude_bin=signed_bin(5, random_sign=sign), num_magnitude_bins=11, bias=0.5,
                   fill_value=3)

    p = pipe()
    p.build()
    out = [float(np.array(t)) for t in p.run()[0]]
    assert out == [6.5, -3.5]


def test_missing_shape_is_explained():
    @stoker.pipeline_def(batch_size=2, num_threads=1, device_id=None)
    def pipe():
        x = stoker.fn.constant(idata=[1, 2, 3], shape=[1, 1, 3], dtype=types.UINT8, layout="HWC")
        return sa.translate_x(x, magnitude_bin=signed_bin(2, random_sign=stoker.fn.constant(idata=0, shape=[])),
                              num_magnitude_bins=5)

    with pytest.raises(MissingArgError, match="shape"):
        pipe()


def test_equalize_and_sharpness_on_videos_frame_by_frame():
    imgs = _images()
    video = np.stack([imgs[0], imgs[0][::-1], 255 - imgs[0]])

    @stoker.pipeline_def(batch_size=1, num_threads=1, device_id=None)
    def pipe():
        v = stoker.fn.external_source(source=lambda: [video], batch=True, layout="FHWC")
        i = stoker.fn.external_source(source=lambda: [video[1]], batch=True, layout="HWC")
        mag = signed_bin(3, random_sign=stoker.fn.constant(idata=1, shape=[]))
        return sa.equalize(v), sa.equalize(i), sa.sharpness(v, magnitude_bin=mag, num_magnitude_bins=5), \
            sa.sharpness(i, magnitude_bin=mag, num_magnitude_bins=5)

    p = pipe()
    p.build()
    ev, ei, sv, si = (np.array(o[0]) for o in p.run())
    np.testing.assert_array_equal(ev[1], ei)
    np.testing.assert_array_equal(sv[1], si)
