"""Automatic augmentation (as ``nvidia.dali.auto_aug``): AutoAugment, RandAugment and
TrivialAugment built on per-sample conditionals.

Modules: :mod:`~stoker.auto_aug.augmentations` (the standard suite),
:mod:`~stoker.auto_aug.auto_augment`, :mod:`~stoker.auto_aug.rand_augment`,
:mod:`~stoker.auto_aug.trivial_augment`, and :mod:`~stoker.auto_aug.core`
(``@augmentation``, ``Policy``, ``select``, ``signed_bin``). As in DALI, use them inside
``@pipeline_def(enable_conditionals=True)`` on uint8 ``HWC`` images (``FHWC`` videos); they
call the conditionals directly, so they also work without it.
"""

from stoker.auto_aug import augmentations, auto_augment, core, rand_augment, trivial_augment

__all__ = ["augmentations", "auto_augment", "core", "rand_augment", "trivial_augment"]
