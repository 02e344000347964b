"""``Policy``: the sub-policies of an AutoAugment-style scheme."""

from __future__ import annotations

import warnings
from collections.abc import Sequence

from stoker.auto_aug.core.augmentation import Augmentation


class Policy:
    """An AutoAugment policy (https://arxiv.org/abs/1805.09501).

    ``sub_policies`` is a list of sequences of ``(augmentation, probability, magnitude_bin)``.
    For each sample one sub-policy is picked uniformly at random; its steps run in order, each
    with its probability, at its magnitude bin (None for augmentations without magnitudes).
    """

    def __init__(self, name: str, num_magnitude_bins: int, sub_policies: Sequence[Sequence[tuple]]):
        self.name = name
        if isinstance(num_magnitude_bins, bool) or not isinstance(num_magnitude_bins, int) or num_magnitude_bins < 1:
            raise ValueError(f"Policy {name}: num_magnitude_bins must be a positive int, got {num_magnitude_bins!r}")
        self.num_magnitude_bins = num_magnitude_bins
        if not isinstance(sub_policies, (list, tuple)):
            raise TypeError(f"Policy {name}: sub_policies must be a list of sub-policies, got {type(sub_policies)}")
        for sub in sub_policies:
            if not isinstance(sub, (list, tuple)):
                raise TypeError(f"Policy {name}: each sub-policy must be a list or tuple, got {sub!r}")
            for step in sub:
                self._check_step(step)
        self.sub_policies = _unique_names(sub_policies)

    def _check_step(self, step) -> None:
        if not isinstance(step, (list, tuple)) or len(step) != 3:
            raise TypeError(f"Policy {self.name}: each step is (augmentation, probability, magnitude_bin), "
                            f"got {step!r}")
        aug, p, mag = step
        if not isinstance(aug, Augmentation):
            raise TypeError(f"Policy {self.name}: {aug!r} is not an Augmentation (decorate it with @augmentation)")
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 <= p <= 1:
            raise ValueError(f"Policy {self.name}: probability of {aug.name} must be in [0, 1], got {p!r}")
        if p == 0:
            warnings.warn(f"Policy {self.name}: {aug.name} has probability 0 in a sub-policy", stacklevel=3)
        if mag is None:
            if aug.mag_range is not None:
                raise ValueError(f"Policy {self.name}: {aug.name} has a magnitude range, so its step needs a "
                                 "magnitude bin, got None")
        else:
            if aug.mag_range is None:
                warnings.warn(f"Policy {self.name}: {aug.name} takes no magnitude; bin {mag} is ignored (use None)",
                              stacklevel=3)
            if isinstance(mag, bool) or not isinstance(mag, int) or not 0 <= mag < self.num_magnitude_bins:
                raise ValueError(f"Policy {self.name}: magnitude bin of {aug.name} must be an int in "
                                 f"[0, {self.num_magnitude_bins - 1}], got {mag!r}")

    @property
    def augmentations(self) -> dict[str, Augmentation]:
        """The distinct augmentations of the policy, by name (sorted)."""
        augs = {aug for sub in self.sub_policies for aug, _, _ in sub}
        return {a.name: a for a in sorted(augs, key=lambda a: a.name)}

    def __repr__(self) -> str:
        subs = ",\n\t".join(repr([(a.name, p, m) for a, p, m in sub]) for sub in self.sub_policies)
        return (f"Policy(name={self.name!r}, num_magnitude_bins={self.num_magnitude_bins}, "
                f"sub_policies=[\n\t{subs}], augmentations={list(self.augmentations)})")


def _unique_names(sub_policies) -> tuple:
    """Distinct augmentations that share a name are renamed name_0, name_1, ... (for clear reports)."""
    augs = []
    for sub in sub_policies:
        for aug, _, _ in sub:
            if aug not in augs:
                augs.append(aug)
    by_name: dict[str, list] = {}
    for a in augs:
        by_name.setdefault(a.name, []).append(a)
    rename = {}
    for name, group in by_name.items():
        if len(group) > 1:
            for k, a in enumerate(group):
                rename[a] = a.augmentation(name=f"{name}_{k}")
    return tuple(tuple((rename.get(a, a), p, m) for a, p, m in sub) for sub in sub_policies)
