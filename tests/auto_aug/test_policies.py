"""AutoAugment, RandAugment and TrivialAugment: their suites and policies against DALI's, and
properties of the random schemes (determinism, shape/dtype, the ops they may apply)."""

import warnings

import numpy as np
import pytest
from oracle import pipeline, run_pipeline, submodule

import stoker
from stoker.auto_aug import augmentations as sa
from stoker.auto_aug import auto_augment, rand_augment, trivial_augment
from stoker.auto_aug.core import Policy, select

BS = 12


def _images(n=BS):
    rng = np.random.default_rng(5)
    return [rng.integers(0, 256, (16 + i % 3, 20, 3), dtype=np.uint8) for i in range(n)]


def _run(scheme, threads=2, seed=4, conditionals=True, n=BS, images=None):
    images = _images(n) if images is None else images

    @stoker.pipeline_def(batch_size=n, num_threads=threads, device_id=None, seed=seed,
                         enable_conditionals=conditionals)
    def pipe():
        x = stoker.fn.external_source(source=lambda: images, batch=True, layout="HWC")
        return scheme(x)

    p = pipe()
    p.build()
    try:
        return [np.array(t) for t in p.run()[0]], images
    finally:
        p.close()


# --- structure, against DALI's definitions --------------------------------------------------

def _describe_aug(aug, num_bins):
    """Name, sign flag and the parameter of every (signed) magnitude bin."""
    if aug.mag_range is None:
        return aug.name, None
    mags = np.linspace(aug.mag_range[0], aug.mag_range[1], num_bins, dtype=np.float32)
    if aug.randomly_negate:
        mags = np.concatenate([mags, -mags])
    to_param = aug.mag_to_param or (lambda m: m)
    params = np.stack([np.asarray(to_param(m), dtype=np.float64) for m in mags])
    return aug.name, aug.randomly_negate, params


def _same_suites(ours, theirs, num_bins):
    assert [a.name for a in ours] == [a.name for a in theirs]
    for a, b in zip(ours, theirs):
        da, db = _describe_aug(a, num_bins), _describe_aug(b, num_bins)
        assert da[:2] == db[:2], a.name
        if len(da) > 2:
            np.testing.assert_allclose(da[2], db[2], rtol=1e-6, atol=1e-6, err_msg=a.name)


@pytest.mark.oracle
@pytest.mark.parametrize("getter", ["get_rand_augment_suite", "get_rand_augment_non_monotonic_suite",
                                    "get_trivial_augment_wide_suite"])
@pytest.mark.parametrize("use_shape", [False, True])
def test_suites_match_dali(getter, use_shape):
    dra = submodule("dali", "auto_aug.rand_augment")
    dta = submodule("dali", "auto_aug.trivial_augment")

    ours = getattr(trivial_augment if "trivial" in getter else rand_augment, getter)(use_shape)
    theirs = getattr(dta if "trivial" in getter else dra, getter)(use_shape)
    _same_suites(ours, theirs, 31)


@pytest.mark.oracle
@pytest.mark.parametrize("getter", ["get_image_net_policy", "get_reduced_image_net_policy", "get_svhn_policy",
                                    "get_reduced_cifar10_policy"])
def test_policies_match_dali(getter):
    daa = submodule("dali", "auto_aug.auto_augment")

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours, theirs = getattr(auto_augment, getter)(), getattr(daa, getter)()
    assert ours.num_magnitude_bins == theirs.num_magnitude_bins
    assert [[(a.name, p, m) for a, p, m in sub] for sub in ours.sub_policies] == \
        [[(a.name, p, m) for a, p, m in sub] for sub in theirs.sub_policies]
    _same_suites(list(ours.augmentations.values()), list(theirs.augmentations.values()),
                 ours.num_magnitude_bins)


def test_translation_limits():
    tx, ty = rand_augment.get_rand_augment_suite(use_shape=True, max_translate_rel=(0.2, 0.4))[:2]
    assert (tx.name, tx.mag_range, ty.mag_range) == ("translate_x", (0, 0.4), (0, 0.2))
    tx, _ = trivial_augment.get_trivial_augment_wide_suite(max_translate_abs=7)[:2]
    assert tx.mag_range == (0, 7) and tx.op is sa.translate_x_no_shape.op
    with pytest.raises(ValueError, match="max_translate_abs"):
        auto_augment.get_image_net_policy(use_shape=True, max_translate_abs=3)
    with pytest.raises(ValueError, match="reduced_image_net has no translations"):
        auto_augment.auto_augment(None, "reduced_image_net", shape=(3, 3))
    with pytest.raises(ValueError, match="policy_name"):
        auto_augment.auto_augment(None, "imagenet")


# --- properties of the random schemes ---------------------------------------------------------

@pytest.mark.parametrize("scheme,scheme_seeded", [
    (lambda x: auto_augment.auto_augment(x), False),
    (lambda x: auto_augment.auto_augment_image_net(x, shape=x.shape(), fill_value=None), False),
    (lambda x: auto_augment.auto_augment(x, "svhn", seed=9), True),
    (lambda x: rand_augment.rand_augment(x, n=2, m=17), False),
    (lambda x: rand_augment.rand_augment(x, n=1, m=5, monotonic_mag=False, shape=x.shape()), False),
    (lambda x: trivial_augment.trivial_augment_wide(x, seed=2), True),
], ids=["aa", "aa_shape", "aa_svhn", "ra", "ra_nonmono", "ta"])
def test_shape_dtype_determinism(scheme, scheme_seeded):
    a, images = _run(scheme, threads=1)
    b, _ = _run(scheme, threads=2)
    for x, y, img in zip(a, b, images):
        assert x.dtype == np.uint8 and x.shape == img.shape
        np.testing.assert_array_equal(x, y)
    assert sum(not np.array_equal(x, img) for x, img in zip(a, images)) >= BS // 3
    c, _ = _run(scheme, seed=5)
    if scheme_seeded:  # the scheme's own seed fixes its choices whatever the pipeline's seed
        assert all(np.array_equal(x, y) for x, y in zip(a, c))
    else:
        assert any(not np.array_equal(x, y) for x, y in zip(a, c))


def test_without_enable_conditionals_too():
    a, _ = _run(lambda x: trivial_augment.trivial_augment_wide(x), conditionals=False)
    b, _ = _run(lambda x: trivial_augment.trivial_augment_wide(x), conditionals=True)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)


def test_trivial_augment_applies_one_op_of_the_suite():
    import cv2

    keep = {"identity", "equalize", "auto_contrast"}
    excluded = [a.name for a in trivial_augment.get_trivial_augment_wide_suite() if a.name not in keep]
    low_contrast = [(img // 3 + 60).astype(np.uint8) for img in _images(24)]
    out, images = _run(lambda x: trivial_augment.trivial_augment_wide(x, excluded=excluded), n=24,
                       images=low_contrast)

    def equalized(img):
        return np.stack([cv2.equalizeHist(np.ascontiguousarray(img[..., c])) for c in range(3)], -1)

    kinds = []
    for x, img in zip(out, images):
        if np.array_equal(x, img):
            kinds.append("identity")
        elif np.array_equal(x, equalized(img)):
            kinds.append("equalize")
        else:  # auto contrast: every channel stretched to [0, 255], order of values kept
            assert all(x[..., c].min() == 0 and x[..., c].max() == 255 for c in range(3))
            order = np.argsort(img[..., 0], axis=None, kind="stable")
            assert np.all(np.diff(x[..., 0].reshape(-1)[order].astype(int)) >= 0)
            kinds.append("auto_contrast")
    assert set(kinds) == keep  # 24 samples: every op is drawn
    with pytest.raises(ValueError, match="not in the suite"):
        trivial_augment.trivial_augment_wide(None, excluded=["blur"])


def test_rand_augment_layers_compose():
    inv = [sa.invert]
    twice, images = _run(lambda x: rand_augment.apply_rand_augment(inv, x, n=2, m=0))
    once, _ = _run(lambda x: rand_augment.apply_rand_augment(inv, x, n=1, m=0))
    none, _ = _run(lambda x: rand_augment.rand_augment(x, n=0, m=3))
    for t, o, z, img in zip(twice, once, none, images):
        np.testing.assert_array_equal(t, img)
        np.testing.assert_array_equal(o, 255 - img)
        np.testing.assert_array_equal(z, img)
    with pytest.raises(ValueError, match="m must be"):
        rand_augment.rand_augment(None, n=1, m=31)


def test_auto_augment_probabilities_and_custom_policy():
    always = Policy("always", 3, [[(sa.invert, 1.0, None)]])
    out, images = _run(lambda x: auto_augment.apply_auto_augment(always, x))
    for x, img in zip(out, images):
        np.testing.assert_array_equal(x, 255 - img)
    half = Policy("half", 3, [[(sa.invert, 0.5, None), (sa.posterize, 1.0, 2)]])
    out, images = _run(lambda x: auto_augment.apply_auto_augment(half, x), n=24)
    inverted = 0
    for x, img in zip(out, images):
        # bin 2 of 3 in posterize's (0, 4) range keeps 4 bits; the first step inverts about half
        if np.array_equal(x, (255 - img) & 0xF0):
            inverted += 1
        else:
            np.testing.assert_array_equal(x, img & 0xF0)
    assert 4 <= inverted <= 20
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        never = Policy("never", 3, [[(sa.invert, 0.0, None)]])
    assert any("probability 0" in str(w.message) for w in caught)
    out, images = _run(lambda x: auto_augment.apply_auto_augment(never, x))
    for x, img in zip(out, images):
        np.testing.assert_array_equal(x, img)


def test_policy_validation():
    with pytest.raises(ValueError, match="magnitude bin"):
        Policy("p", 3, [[(sa.rotate, 0.5, None)]])
    with pytest.raises(ValueError, match=r"\[0, 2\]"):
        Policy("p", 3, [[(sa.rotate, 0.5, 3)]])
    with pytest.raises(TypeError, match="not an Augmentation"):
        Policy("p", 3, [[(lambda d, p: d, 0.5, 1)]])
    with pytest.raises(ValueError, match="probability"):
        Policy("p", 3, [[(sa.rotate, 1.5, 1)]])
    with pytest.raises(TypeError, match="no augmentation takes"):
        auto_augment.apply_auto_augment(Policy("p", 3, [[(sa.invert, 1.0, None)]]), None, fill_value=1)
    renamed = Policy("p", 3, [[(sa.rotate, 0.5, 1), (sa.rotate.augmentation(mag_range=(0, 5)), 0.5, 1)]])
    assert sorted(renamed.augmentations) == ["rotate_0", "rotate_1"]


def test_select_by_index_matches_numpy():
    idx = [0, 1, 2, 2, 1, 0, 1, 2]
    images = _images(len(idx))

    @stoker.pipeline_def(batch_size=len(idx), num_threads=2, device_id=None, enable_conditionals=True)
    def pipe():
        x = stoker.fn.external_source(source=lambda: images, batch=True, layout="HWC")
        i = stoker.fn.external_source(source=lambda: [np.int32(v) for v in idx], batch=True)
        return select([sa.identity, sa.invert, sa.posterize], i, x, magnitude_bin=0, num_magnitude_bins=5)

    p = pipe()
    p.build()
    out = [np.array(t) for t in p.run()[0]]
    refs = [lambda v: v, lambda v: 255 - v, lambda v: v & 0x80]
    for o, k, img in zip(out, idx, images):
        np.testing.assert_array_equal(o, refs[k](img))


@pytest.mark.oracle
def test_deterministic_policies_match_dali():
    """Schemes whose choices are certain (probability 1, one sub-policy or op, no random sign)
    give DALI's output exactly: the split/merge wiring and the magnitude tables agree."""
    da, daa, dra, dcore = (submodule("dali", f"auto_aug.{m}") for m in ("augmentations", "auto_augment",
                                                                         "rand_augment", "core"))

    def schemes(aug_mod, aa_mod, ra_mod, policy_cls):
        steps = [(aug_mod.solarize, 1.0, 3), (aug_mod.posterize, 1.0, 2), (aug_mod.equalize, 1.0, None)]
        policy = policy_cls("certain", 5, [steps])
        return [lambda x: aa_mod.apply_auto_augment(policy, x),
                lambda x: ra_mod.apply_rand_augment([aug_mod.auto_contrast], x, n=2, m=3),
                lambda x: ra_mod.apply_rand_augment([aug_mod.posterize], x, n=1, m=4, num_magnitude_bins=5)]

    images = _images()

    def run(lib, scheme):
        def body(f, t):
            return scheme(f.external_source(source=lambda: images, batch=True, layout="HWC"))

        ((out,),) = run_pipeline(pipeline(lib, body, BS, num_threads=2, seed=3, enable_conditionals=True))
        return out

    ours = schemes(sa, auto_augment, rand_augment, Policy)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = schemes(da, daa, dra, dcore.Policy)
        for mine, dalis in zip(ours, theirs):
            got, want = run("stoker", mine), run("dali", dalis)
            for g, w in zip(got, want):
                np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("scheme", [
    lambda x: auto_augment.auto_augment(x),
    lambda x: rand_augment.rand_augment(x, n=2, m=9),
    lambda x: trivial_augment.trivial_augment_wide(x),
], ids=["aa", "ra", "ta"])
def test_schemes_build_and_run_on_gpu_batches(scheme):
    """On the null device (CuPy's host half on NumPy, kernels skipped): GPU batches go through the
    per-sample ifs (they were refused at build) and come out with each sample's shape and type.
    Their pixels are compared with the CPU's on a GPU (tests/pipeline/test_conditionals_gpu.py)."""
    import os
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
    import null_device

    images = _images()
    with null_device.installed(), warnings.catch_warnings():
        warnings.simplefilter("ignore")

        @stoker.pipeline_def(batch_size=BS, num_threads=1, device_id=0, seed=4, enable_conditionals=True)
        def pipe():
            return scheme(stoker.fn.external_source(source=lambda: images, batch=True, layout="HWC").gpu())

        p = pipe()
        p.build()
        for _ in range(2):
            (out,) = p.run()
            assert [tuple(s) for s in out.shape()] == [img.shape for img in images]
            assert out.element_dtype() == np.uint8
        p.close()
