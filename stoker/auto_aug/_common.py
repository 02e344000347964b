"""Helpers shared by the AutoAugment, RandAugment and TrivialAugment modules."""

from __future__ import annotations

import inspect

from stoker.auto_aug import augmentations as a
from stoker.auto_aug.core import Augmentation


def _pair(value) -> tuple:
    if isinstance(value, (tuple, list)):
        if len(value) != 2:
            raise ValueError(f"expected one value or a (height, width) pair, got {value!r}")
        return tuple(value)
    return value, value


def translations(use_shape: bool, default_abs: float, default_rel: float, max_translate_abs=None,
                 max_translate_rel=None) -> list[Augmentation]:
    """translate_x and translate_y for a suite: relative to the image shape (``use_shape``, limits
    ``max_translate_rel``) or in pixels (``max_translate_abs``). Either limit may be one value or a
    (height, width) pair."""
    if not isinstance(use_shape, bool):
        raise TypeError(f"use_shape must be True or False, got {use_shape!r}")
    if use_shape:
        if max_translate_abs is not None:
            raise ValueError("max_translate_abs cannot be used with image shapes; use max_translate_rel")
        h, w = _pair(default_rel if max_translate_rel is None else max_translate_rel)
        return [a.translate_x.augmentation(mag_range=(0, w), randomly_negate=True),
                a.translate_y.augmentation(mag_range=(0, h), randomly_negate=True)]
    if max_translate_rel is not None:
        raise ValueError("max_translate_rel needs the image shapes (pass shape=...); use max_translate_abs")
    h, w = _pair(default_abs if max_translate_abs is None else max_translate_abs)
    return [a.translate_x_no_shape.augmentation(mag_range=(0, w), randomly_negate=True),
            a.translate_y_no_shape.augmentation(mag_range=(0, h), randomly_negate=True)]


def aug_kwargs(augs, shape, fill_value, interp_type) -> dict:
    """The keyword arguments the high-level schemes pass on: those some augmentation of the suite
    takes (DALI rejects fill_value/interp_type when ``excluded`` removed every warp; stoker drops them)."""
    kwargs = {"fill_value": fill_value, "interp_type": interp_type}
    if shape is not None:
        kwargs["shape"] = shape
    accepted = set()
    for aug in augs:
        accepted.update(list(inspect.signature(aug.op).parameters)[2:])
    return {k: v for k, v in kwargs.items() if k in accepted or k == "shape"}


def forbid_unused(augs, kwargs: dict, call: str) -> None:
    """Keyword arguments that no augmentation of the suite takes are a mistake, not a no-op."""
    accepted = set()
    for aug in augs:
        params = list(inspect.signature(aug.op).parameters.values())[2:]
        if any(p.kind == p.VAR_KEYWORD for p in params):
            return
        accepted.update(p.name for p in params)
    unused = sorted(set(kwargs) - accepted)
    if unused:
        raise TypeError(f"{call}: no augmentation takes the argument(s) {unused}")


def seeds(seed, count: int) -> list:
    """Distinct seeds for the random operators of one scheme (None: derived from the pipeline's)."""
    return [None] * count if seed is None else [seed + k for k in range(count)]
