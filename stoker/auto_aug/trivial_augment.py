"""TrivialAugment Wide (Müller and Hutter, https://arxiv.org/abs/2103.10158), as
``nvidia.dali.auto_aug.trivial_augment``: one augmentation per sample, drawn uniformly from
the suite, at a magnitude bin drawn uniformly (with a random sign where symmetric)."""

from __future__ import annotations

from stoker import fn, types
from stoker.auto_aug import augmentations as a
from stoker.auto_aug._common import aug_kwargs, forbid_unused, seeds, translations
from stoker.auto_aug.core import Augmentation, select, signed_bin

_DEFAULT_ABS, _DEFAULT_REL = 32, 1.0  # translation limits: pixels, or a fraction of the size with shape


def trivial_augment_wide(data, num_magnitude_bins: int = 31, shape=None, fill_value: int | None = 128,
                         interp_type=None, max_translate_abs=None, max_translate_rel=None,
                         seed: int | None = None, excluded: list[str] | None = None):
    """Apply one random augmentation of the wide suite at a random magnitude to uint8 ``HWC`` images
    (``FHWC`` videos). Arguments as :func:`stoker.auto_aug.rand_augment.rand_augment` (translation
    defaults: 32 pixels, or the whole size with ``shape``)."""
    augs = get_trivial_augment_wide_suite(shape is not None, max_translate_abs, max_translate_rel)
    if excluded:
        names = {aug.name for aug in augs}
        unknown = sorted(set(excluded) - names)
        if unknown:
            raise ValueError(f"trivial_augment_wide: excluded names {unknown} are not in the suite {sorted(names)}")
        augs = [aug for aug in augs if aug.name not in excluded]
        if not augs:
            raise ValueError("trivial_augment_wide: every augmentation is excluded")
    return apply_trivial_augment(augs, data, num_magnitude_bins, seed,
                                 **aug_kwargs(augs, shape, fill_value, interp_type))


def apply_trivial_augment(augmentations: list[Augmentation], data, num_magnitude_bins: int = 31,
                          seed: int | None = None, **kwargs):
    """TrivialAugment over a custom list of augmentations; ``kwargs`` go to those that take them."""
    if isinstance(num_magnitude_bins, bool) or not isinstance(num_magnitude_bins, int) or num_magnitude_bins < 1:
        raise ValueError(f"trivial_augment: num_magnitude_bins must be a positive int, got {num_magnitude_bins!r}")
    if not augmentations:
        raise ValueError("trivial_augment: the list of augmentations is empty")
    forbid_unused(augmentations, kwargs, "apply_trivial_augment")
    seed_op, seed_bin, seed_sign = seeds(seed, 3)

    def seeded(s):
        return {} if s is None else {"seed": s}

    op_id = fn.random.uniform(values=list(range(len(augmentations))), dtype=types.INT32, **seeded(seed_op))
    mag = fn.random.uniform(values=list(range(num_magnitude_bins)), dtype=types.INT32, **seeded(seed_bin))
    if any(aug.randomly_negate for aug in augmentations):
        mag = signed_bin(mag, seed=seed_sign)
    return select(augmentations, op_id, data, magnitude_bin=mag, num_magnitude_bins=num_magnitude_bins, **kwargs)


def get_trivial_augment_wide_suite(use_shape: bool = False, max_translate_abs=None, max_translate_rel=None) -> list:
    """The wide suite: shear 0..0.99, rotate 0..135 degrees, enhancements 1 +- 0.99, posterize 8 -> 2
    bits, solarize 256 -> 0, translations (32 pixels by default), equalize, auto contrast, identity."""
    return [*translations(use_shape, _DEFAULT_ABS, _DEFAULT_REL, max_translate_abs, max_translate_rel),
            a.shear_x.augmentation(mag_range=(0, 0.99), randomly_negate=True),
            a.shear_y.augmentation(mag_range=(0, 0.99), randomly_negate=True),
            a.rotate.augmentation(mag_range=(0, 135), randomly_negate=True),
            a.brightness.augmentation(mag_range=(0.01, 0.99), randomly_negate=True),
            a.contrast.augmentation(mag_range=(0.01, 0.99), randomly_negate=True),
            a.color.augmentation(mag_range=(0.01, 0.99), randomly_negate=True),
            a.sharpness.augmentation(mag_range=(0.01, 0.99), randomly_negate=True),
            a.posterize.augmentation(mag_range=(8, 2), randomly_negate=False),
            a.solarize.augmentation(mag_range=(256, 0), randomly_negate=False),
            a.equalize, a.auto_contrast, a.identity]
