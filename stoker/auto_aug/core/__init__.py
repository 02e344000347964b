"""Building blocks of automatic augmentation schemes (as ``nvidia.dali.auto_aug.core``):
the :func:`augmentation` decorator, :class:`Policy`, :func:`select` and :func:`signed_bin`."""

from stoker.auto_aug.core.augmentation import Augmentation, MissingArgError, SignedBin, augmentation, signed_bin
from stoker.auto_aug.core.policy import Policy
from stoker.auto_aug.core.select import select

__all__ = ["Augmentation", "MissingArgError", "Policy", "SignedBin", "augmentation", "select", "signed_bin"]
