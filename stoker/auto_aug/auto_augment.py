"""AutoAugment (Cubuk et al., https://arxiv.org/abs/1805.09501) with its published policies
(as ``nvidia.dali.auto_aug.auto_augment``).

For each sample one sub-policy is drawn uniformly; each of its steps runs with its
probability, at its magnitude bin (randomly negated for symmetric augmentations).
The batch is split among the augmentations with per-sample conditionals, so every
augmentation runs only on the samples that use it.
"""

from __future__ import annotations

import numpy as np

from stoker import fn, types
from stoker.auto_aug import augmentations as a
from stoker.auto_aug._common import aug_kwargs, forbid_unused, seeds, translations
from stoker.auto_aug.core import Policy, select, signed_bin
from stoker.pipeline import conditionals
from stoker.pipeline.data_node import constant_node

_DEFAULT_ABS, _DEFAULT_REL = 250, 1.0  # translation limits of the paper's policies (pixels / fraction)


def auto_augment(data, policy_name: str = "image_net", shape=None, fill_value: int | None = 128,
                 interp_type=None, max_translate_abs=None, max_translate_rel=None, seed: int | None = None):
    """Apply one of the paper's policies: ``image_net`` (default), ``reduced_image_net``, ``svhn`` or
    ``reduced_cifar10``, to uint8 ``HWC`` images (``FHWC`` videos).

    ``shape`` (per-sample HWC shapes, e.g. ``fn.peek_image_shape``, or an (H, W) tuple) makes
    translations relative to the image size (up to ``max_translate_rel``, default 1.0); without it
    they are in pixels (up to ``max_translate_abs``, default 250). ``fill_value`` fills the area
    uncovered by shear/translate/rotate (None: repeat the border); ``interp_type`` is their
    interpolation. ``seed`` seeds the random choices.
    """
    policies = {"image_net": get_image_net_policy, "reduced_image_net": get_reduced_image_net_policy,
                "svhn": get_svhn_policy, "reduced_cifar10": get_reduced_cifar10_policy}
    if not isinstance(policy_name, str) or policy_name not in policies:
        raise ValueError(f"auto_augment: policy_name must be one of {sorted(policies)}, got {policy_name!r}")
    if policy_name == "reduced_image_net":
        for value, arg in ((shape, "shape"), (max_translate_abs, "max_translate_abs"),
                           (max_translate_rel, "max_translate_rel")):
            if value is not None:
                raise ValueError(f"auto_augment: policy reduced_image_net has no translations; do not pass {arg}")
        policy = get_reduced_image_net_policy()
    else:
        policy = policies[policy_name](use_shape=shape is not None, max_translate_abs=max_translate_abs,
                                       max_translate_rel=max_translate_rel)
    augs = policy.augmentations.values()
    return apply_auto_augment(policy, data, seed, **aug_kwargs(augs, shape, fill_value, interp_type))


def auto_augment_image_net(data, shape=None, fill_value: int | None = 128, interp_type=None,
                           max_translate_abs=None, max_translate_rel=None, seed: int | None = None):
    """:func:`auto_augment` with the ImageNet policy."""
    return auto_augment(data, "image_net", shape, fill_value, interp_type, max_translate_abs, max_translate_rel,
                        seed)


def apply_auto_augment(policy: Policy, data, seed: int | None = None, **kwargs):
    """Apply ``policy`` AutoAugment-style; ``kwargs`` (``shape``, ``fill_value``, ``interp_type``)
    go to the augmentations that take them."""
    if not policy.sub_policies:
        raise ValueError(f"apply_auto_augment: policy {policy.name} has no sub-policies")
    augs = list(policy.augmentations.values())
    forbid_unused(augs, kwargs, "apply_auto_augment")
    position = {aug: i for i, aug in enumerate(augs)}
    steps = max(len(sub) for sub in policy.sub_policies)
    count = len(policy.sub_policies)
    prob = np.zeros((count, steps), np.float32)  # missing steps never run
    aug_id = np.zeros((count, steps), np.int32)
    mag_bin = np.zeros((count, steps), np.int32)
    for i, sub in enumerate(policy.sub_policies):
        for k, (aug, p, mag) in enumerate(sub):
            prob[i, k], aug_id[i, k], mag_bin[i, k] = p, position[aug], 0 if mag is None else mag
    seed_sub, seed_run, seed_sign = seeds(seed, 3)
    sub_id = fn.random.uniform(values=list(range(count)), dtype=types.INT32, **_seed(seed_sub))
    draw = fn.random.uniform(range=[0.0, 1.0], shape=[steps], **_seed(seed_run))
    run_prob = constant_node(prob)[sub_id]
    stage_aug = constant_node(aug_id)[sub_id]
    bins = constant_node(mag_bin)[sub_id]
    if any(aug.randomly_negate for aug in augs):
        bins = signed_bin(bins, seed=seed_sign, shape=[steps])
    for k in range(steps):
        def run(value, k=k):
            return (select(augs, stage_aug[k], value, magnitude_bin=bins[k],
                           num_magnitude_bins=policy.num_magnitude_bins, **kwargs),)

        def skip(value):
            return (value,)

        data, = conditionals.if_stmt(draw[k] < run_prob[k], run, skip, (data,), ("data",),
                                     f"step {k} of policy {policy.name}")
    return data


def _seed(seed) -> dict:
    return {} if seed is None else {"seed": seed}


# --- the paper's policies --------------------------------------------------------------------
# Magnitudes here follow the paper's policies: enhancement factors 0.1..1.9 without sign, solarize
# thresholds 0..256 and posterize 0..4 bits.

def _paper_suite(use_shape, max_translate_abs, max_translate_rel) -> dict:
    tx, ty = translations(use_shape, _DEFAULT_ABS, _DEFAULT_REL, max_translate_abs, max_translate_rel)
    factor = {"mag_range": (0.1, 1.9), "randomly_negate": False, "mag_to_param": None}
    return {
        "shear_x": a.shear_x.augmentation(mag_range=(0, 0.3), randomly_negate=True),
        "shear_y": a.shear_y.augmentation(mag_range=(0, 0.3), randomly_negate=True),
        "translate_x": tx, "translate_y": ty,
        "rotate": a.rotate.augmentation(mag_range=(0, 30), randomly_negate=True),
        "color": a.color.augmentation(**factor),
        "brightness": a.brightness.augmentation(**factor),
        "contrast": a.contrast.augmentation(**factor),
        "sharpness": a.sharpness.augmentation(mag_range=(0.1, 1.9), randomly_negate=False,
                                              mag_to_param=a.sharpness_kernel_shifted),
        "posterize": a.posterize.augmentation(mag_range=(0, 4), randomly_negate=False),
        "solarize": a.solarize.augmentation(mag_range=(0, 256), randomly_negate=False),
        "solarize_add": a.solarize_add.augmentation(mag_range=(0, 110), randomly_negate=False),
        "equalize": a.equalize, "auto_contrast": a.auto_contrast, "invert": a.invert,
    }


def _policy(name: str, table: list, suite: dict) -> Policy:
    return Policy(name, 11, [[(suite[op], p, mag) for op, p, mag in sub] for sub in table])


_IMAGE_NET = [
    [("equalize", 0.8, None), ("shear_y", 0.8, 4)], [("color", 0.4, 9), ("equalize", 0.6, None)],
    [("color", 0.4, 1), ("rotate", 0.6, 8)], [("solarize", 0.8, 3), ("equalize", 0.4, None)],
    [("solarize", 0.4, 2), ("solarize", 0.6, 2)], [("color", 0.2, 0), ("equalize", 0.8, None)],
    [("equalize", 0.4, None), ("solarize_add", 0.8, 3)], [("shear_x", 0.2, 9), ("rotate", 0.6, 8)],
    [("color", 0.6, 1), ("equalize", 1.0, None)], [("invert", 0.4, None), ("rotate", 0.6, 0)],
    [("equalize", 1.0, None), ("shear_y", 0.6, 3)], [("color", 0.4, 7), ("equalize", 0.6, None)],
    [("posterize", 0.4, 6), ("auto_contrast", 0.4, None)], [("solarize", 0.6, 8), ("color", 0.6, 9)],
    [("solarize", 0.2, 4), ("rotate", 0.8, 9)], [("rotate", 1.0, 7), ("translate_y", 0.8, 9)],
    [("solarize", 0.8, 4)], [("shear_y", 0.8, 0), ("color", 0.6, 4)], [("color", 1.0, 0), ("rotate", 0.6, 2)],
    [("equalize", 0.8, None)], [("equalize", 1.0, None), ("auto_contrast", 0.6, None)],
    [("shear_y", 0.4, 7), ("solarize_add", 0.6, 7)], [("posterize", 0.8, 2), ("solarize", 0.6, 10)],
    [("solarize", 0.6, 8), ("equalize", 0.6, None)], [("color", 0.8, 6), ("rotate", 0.4, 5)],
]

_REDUCED_IMAGE_NET = [
    [("posterize", 0.4, 8), ("rotate", 0.6, 9)], [("solarize", 0.6, 5), ("auto_contrast", 0.6, None)],
    [("equalize", 0.8, None), ("equalize", 0.6, None)], [("posterize", 0.6, 7), ("posterize", 0.6, 6)],
    [("equalize", 0.4, None), ("solarize", 0.2, 4)], [("equalize", 0.4, None), ("rotate", 0.8, 8)],
    [("solarize", 0.6, 3), ("equalize", 0.6, None)], [("posterize", 0.8, 5), ("equalize", 1.0, None)],
    [("rotate", 0.2, 3), ("solarize", 0.6, 8)], [("equalize", 0.6, None), ("posterize", 0.4, 6)],
    [("rotate", 0.8, 8), ("color", 0.4, 0)], [("rotate", 0.4, 9), ("equalize", 0.6, None)],
    [("equalize", 0.8, None)], [("invert", 0.6, None), ("equalize", 1.0, None)],
    [("color", 0.6, 4), ("contrast", 1.0, 8)], [("rotate", 0.8, 8), ("color", 1.0, 2)],
    [("color", 0.8, 8), ("solarize", 0.8, 7)], [("sharpness", 0.4, 7), ("invert", 0.6, None)],
    [("shear_x", 0.6, 5), ("equalize", 1.0, None)], [("color", 0.4, 0), ("equalize", 0.6, None)],
    [("equalize", 0.4, None), ("solarize", 0.2, 4)], [("solarize", 0.6, 5), ("auto_contrast", 0.6, None)],
    [("invert", 0.6, None), ("equalize", 1.0, None)], [("color", 0.6, 4), ("contrast", 1.0, 8)],
    [("equalize", 0.8, None), ("equalize", 0.6, None)],
]

_SVHN = [
    [("shear_x", 0.9, 4), ("invert", 0.2, None)], [("shear_y", 0.9, 8), ("invert", 0.7, None)],
    [("equalize", 0.6, None), ("solarize", 0.6, 6)], [("invert", 0.9, None), ("equalize", 0.6, None)],
    [("equalize", 0.6, None), ("rotate", 0.9, 3)], [("shear_x", 0.9, 4), ("auto_contrast", 0.8, None)],
    [("shear_y", 0.9, 8), ("invert", 0.4, None)], [("shear_y", 0.9, 5), ("solarize", 0.2, 6)],
    [("invert", 0.9, None), ("auto_contrast", 0.8, None)], [("equalize", 0.6, None), ("rotate", 0.9, 3)],
    [("shear_x", 0.9, 4), ("solarize", 0.3, 3)], [("shear_y", 0.8, 8), ("invert", 0.7, None)],
    [("equalize", 0.9, None), ("translate_y", 0.6, 6)], [("invert", 0.9, None), ("equalize", 0.6, None)],
    [("contrast", 0.3, 3), ("rotate", 0.8, 4)], [("invert", 0.8, None)],
    [("shear_y", 0.7, 6), ("solarize", 0.4, 8)], [("invert", 0.6, None), ("rotate", 0.8, 4)],
    [("shear_y", 0.3, 7), ("translate_x", 0.9, 3)], [("shear_x", 0.1, 6), ("invert", 0.6, None)],
    [("solarize", 0.7, 2), ("translate_y", 0.6, 7)], [("shear_y", 0.8, 4), ("invert", 0.8, None)],
    [("shear_x", 0.7, 9), ("translate_y", 0.8, 3)], [("shear_y", 0.8, 5), ("auto_contrast", 0.7, None)],
    [("shear_x", 0.7, 2), ("invert", 0.1, None)],
]

_REDUCED_CIFAR10 = [
    [("invert", 0.1, None), ("contrast", 0.2, 6)], [("rotate", 0.7, 2), ("translate_x", 0.3, 9)],
    [("sharpness", 0.8, 1), ("sharpness", 0.9, 3)], [("shear_y", 0.5, 8), ("translate_y", 0.7, 9)],
    [("auto_contrast", 0.5, None), ("equalize", 0.9, None)], [("shear_y", 0.2, 7), ("posterize", 0.3, 7)],
    [("color", 0.4, 3), ("brightness", 0.6, 7)], [("sharpness", 0.3, 9), ("brightness", 0.7, 9)],
    [("equalize", 0.6, None), ("equalize", 0.5, None)], [("contrast", 0.6, 7), ("sharpness", 0.6, 5)],
    [("color", 0.7, 7), ("translate_x", 0.5, 8)], [("equalize", 0.3, None), ("auto_contrast", 0.4, None)],
    [("translate_y", 0.4, 3), ("sharpness", 0.2, 6)], [("brightness", 0.9, 6), ("color", 0.2, 8)],
    [("solarize", 0.5, 2)], [("equalize", 0.2, None), ("auto_contrast", 0.6, None)],
    [("equalize", 0.2, None), ("equalize", 0.6, None)], [("color", 0.9, 9), ("equalize", 0.6, None)],
    [("auto_contrast", 0.8, None), ("solarize", 0.2, 8)], [("brightness", 0.1, 3), ("color", 0.7, 0)],
    [("solarize", 0.4, 5), ("auto_contrast", 0.9, None)], [("translate_y", 0.9, 9), ("translate_y", 0.7, 9)],
    [("auto_contrast", 0.9, None), ("solarize", 0.8, 3)], [("equalize", 0.8, None), ("invert", 0.1, None)],
    [("translate_y", 0.7, 9), ("auto_contrast", 0.9, None)],
]


def get_image_net_policy(use_shape: bool = False, max_translate_abs=None, max_translate_rel=None) -> Policy:
    """The paper's ImageNet policy (25 sub-policies of up to 2 steps, 11 magnitude bins)."""
    return _policy("ImageNetPolicy", _IMAGE_NET, _paper_suite(use_shape, max_translate_abs, max_translate_rel))


def get_reduced_image_net_policy() -> Policy:
    """The paper's policy found on reduced ImageNet (no translations)."""
    return _policy("ReducedImageNetPolicy", _REDUCED_IMAGE_NET, _paper_suite(False, None, None))


def get_svhn_policy(use_shape: bool = False, max_translate_abs=None, max_translate_rel=None) -> Policy:
    """The paper's SVHN policy."""
    return _policy("SvhnPolicy", _SVHN, _paper_suite(use_shape, max_translate_abs, max_translate_rel))


def get_reduced_cifar10_policy(use_shape: bool = False, max_translate_abs=None, max_translate_rel=None) -> Policy:
    """The paper's policy found on reduced CIFAR-10."""
    return _policy("ReducedCifar10Policy", _REDUCED_CIFAR10,
                   _paper_suite(use_shape, max_translate_abs, max_translate_rel))
