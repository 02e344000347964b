"""RandAugment (Cubuk et al., https://arxiv.org/abs/1909.13719), as
``nvidia.dali.auto_aug.rand_augment``: ``n`` augmentations per sample, each drawn uniformly
from a suite, all at the same magnitude bin ``m`` (with a random sign where symmetric)."""

from __future__ import annotations

from stoker import fn, types
from stoker.auto_aug import augmentations as a
from stoker.auto_aug._common import aug_kwargs, forbid_unused, seeds, translations
from stoker.auto_aug.core import Augmentation, SignedBin, select

_DEFAULT_ABS = 100  # pixels; relative: the same share of a 224-pixel image
_DEFAULT_REL = 100 / 224


def rand_augment(data, n: int, m: int, num_magnitude_bins: int = 31, shape=None, fill_value: int | None = 128,
                 interp_type=None, max_translate_abs=None, max_translate_rel=None, seed: int | None = None,
                 monotonic_mag: bool = True, excluded: list[str] | None = None):
    """Apply ``n`` random augmentations at magnitude bin ``m`` (of ``num_magnitude_bins``) to uint8
    ``HWC`` images (``FHWC`` videos).

    ``monotonic_mag=False`` uses the original paper's suite, where a higher bin is not always a
    stronger change. ``excluded`` names augmentations to leave out. ``shape``, ``fill_value``,
    ``interp_type`` and the translation limits are as in :func:`stoker.auto_aug.auto_augment.auto_augment`
    (defaults: 100 pixels, or 100/224 of the size with ``shape``).
    """
    use_shape = shape is not None
    suite_of = get_rand_augment_suite if monotonic_mag else get_rand_augment_non_monotonic_suite
    augs = suite_of(use_shape, max_translate_abs, max_translate_rel)
    if excluded:
        names = {aug.name for aug in augs}
        unknown = sorted(set(excluded) - names)
        if unknown:
            raise ValueError(f"rand_augment: excluded names {unknown} are not in the suite {sorted(names)}")
        augs = [aug for aug in augs if aug.name not in excluded]
        if not augs:
            raise ValueError("rand_augment: every augmentation is excluded")
    return apply_rand_augment(augs, data, n, m, num_magnitude_bins, seed,
                              **aug_kwargs(augs, shape, fill_value, interp_type))


def apply_rand_augment(augmentations: list[Augmentation], data, n: int, m: int, num_magnitude_bins: int = 31,
                       seed: int | None = None, **kwargs):
    """RandAugment over a custom list of augmentations; ``kwargs`` go to those that take them."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"rand_augment: n must be an int >= 0, got {n!r}")
    if isinstance(num_magnitude_bins, bool) or not isinstance(num_magnitude_bins, int) or num_magnitude_bins < 1:
        raise ValueError(f"rand_augment: num_magnitude_bins must be a positive int, got {num_magnitude_bins!r}")
    if isinstance(m, bool) or not isinstance(m, int) or not 0 <= m < num_magnitude_bins:
        raise ValueError(f"rand_augment: m must be an int in [0, {num_magnitude_bins - 1}], got {m!r}")
    if not augmentations:
        raise ValueError("rand_augment: the list of augmentations is empty")
    forbid_unused(augmentations, kwargs, "apply_rand_augment")
    if n == 0:
        return data
    seed_op, seed_sign = seeds(seed, 2)
    op_ids = fn.random.uniform(values=list(range(len(augmentations))), dtype=types.INT32, shape=[n],
                               **({} if seed_op is None else {"seed": seed_op}))
    signs = None
    if any(aug.randomly_negate for aug in augmentations):
        signs = fn.random.uniform(values=[0, 1], dtype=types.INT32, shape=[n],
                                  **({} if seed_sign is None else {"seed": seed_sign}))
    for k in range(n):
        mag = m if signs is None else SignedBin(m, signs[k])
        data = select(augmentations, op_ids[k], data, magnitude_bin=mag, num_magnitude_bins=num_magnitude_bins,
                      **kwargs)
    return data


def get_rand_augment_suite(use_shape: bool = False, max_translate_abs=None, max_translate_rel=None) -> list:
    """The suite whose changes grow with the magnitude (enhancements 1 +- 0.9, posterize 8 -> 4
    bits, solarize threshold 256 -> 0), as DALI's default."""
    return [*translations(use_shape, _DEFAULT_ABS, _DEFAULT_REL, max_translate_abs, max_translate_rel),
            a.shear_x.augmentation(mag_range=(0, 0.3), randomly_negate=True),
            a.shear_y.augmentation(mag_range=(0, 0.3), randomly_negate=True),
            a.rotate.augmentation(mag_range=(0, 30), randomly_negate=True),
            a.brightness.augmentation(mag_range=(0, 0.9), randomly_negate=True),
            a.contrast.augmentation(mag_range=(0, 0.9), randomly_negate=True),
            a.color.augmentation(mag_range=(0, 0.9), randomly_negate=True),
            a.sharpness.augmentation(mag_range=(0, 0.9), randomly_negate=True),
            a.posterize.augmentation(mag_range=(8, 4), randomly_negate=False),
            a.solarize.augmentation(mag_range=(256, 0), randomly_negate=False),
            a.equalize, a.auto_contrast, a.identity]


def get_rand_augment_non_monotonic_suite(use_shape: bool = False, max_translate_abs=None,
                                         max_translate_rel=None) -> list:
    """The paper's original suite (enhancement factors 0.1..1.9, posterize 0..4 bits, solarize 0..256)."""
    factor = {"mag_range": (0.1, 1.9), "randomly_negate": False, "mag_to_param": None}
    return [*translations(use_shape, _DEFAULT_ABS, _DEFAULT_REL, max_translate_abs, max_translate_rel),
            a.shear_x.augmentation(mag_range=(0, 0.3), randomly_negate=True),
            a.shear_y.augmentation(mag_range=(0, 0.3), randomly_negate=True),
            a.rotate.augmentation(mag_range=(0, 30), randomly_negate=True),
            a.brightness.augmentation(**factor), a.contrast.augmentation(**factor), a.color.augmentation(**factor),
            a.sharpness.augmentation(mag_range=(0.1, 1.9), randomly_negate=False,
                                     mag_to_param=a.sharpness_kernel_shifted),
            a.posterize.augmentation(mag_range=(0, 4), randomly_negate=False),
            a.solarize.augmentation(mag_range=(0, 256), randomly_negate=False),
            a.equalize, a.auto_contrast, a.identity]
