"""The standard augmentations of AutoAugment, RandAugment and TrivialAugment, written with
stoker operators and the lookup-table kernels of ``stoker.auto_aug._ops`` (as
``nvidia.dali.auto_aug.augmentations``; results equal DALI's).

Each is an :class:`~stoker.auto_aug.core.Augmentation`: call it with a batch of uint8 images
(``HWC``; videos ``FHWC``) and ``magnitude_bin`` / ``num_magnitude_bins``; the magnitude is
mapped to the op's parameter by ``mag_to_param``. The ranges below are the usual defaults;
change one with ``shear_x.augmentation(mag_range=(0, 0.5))``.
"""

from __future__ import annotations

import numpy as np

from stoker import fn
from stoker.auto_aug._ops import Equalize  # noqa: F401 - importing _ops registers the _auto_aug.* kernels
from stoker.auto_aug.core import augmentation
from stoker.pipeline.data_node import constant_node, invoke

_U8_255 = np.uint8(255)


def _warp_kwargs(fill_value, interp_type) -> dict:
    kw = {"fill_value": fill_value} if fill_value is not None else {}
    if interp_type is not None:
        kw["interp_type"] = interp_type
    return kw


def warp_x_param(magnitude):
    """A horizontal (x) shear or shift: ``[magnitude, 0]``."""
    return [magnitude, 0]


def warp_y_param(magnitude):
    """A vertical (y) shear or shift: ``[0, magnitude]``."""
    return [0, magnitude]


def _warp(data, matrix, fill_value, interp_type):
    # The matrices map input to output coordinates (PIL's and the papers' convention is the inverse).
    return fn.warp_affine(data, matrix=matrix, inverse_map=False, **_warp_kwargs(fill_value, interp_type))


@augmentation(mag_range=(0, 0.3), randomly_negate=True, mag_to_param=warp_x_param)
def shear_x(data, shear, fill_value=128, interp_type=None):
    """Shears along x by ``shear`` (a factor; the magnitude)."""
    return _warp(data, fn.transforms.shear(shear=shear), fill_value, interp_type)


@augmentation(mag_range=(0, 0.3), randomly_negate=True, mag_to_param=warp_y_param)
def shear_y(data, shear, fill_value=128, interp_type=None):
    """Shears along y by ``shear`` (a factor; the magnitude)."""
    return _warp(data, fn.transforms.shear(shear=shear), fill_value, interp_type)


@augmentation(mag_range=(0.0, 1.0), randomly_negate=True, mag_to_param=warp_x_param)
def translate_x(data, rel_offset, shape, fill_value=128, interp_type=None):
    """Shifts along x by a fraction of the width (``shape`` is the HWC shape of each image)."""
    return _warp(data, fn.transforms.translation(offset=rel_offset * shape[1]), fill_value, interp_type)


@augmentation(mag_range=(0, 250), randomly_negate=True, mag_to_param=warp_x_param, name="translate_x")
def translate_x_no_shape(data, offset, fill_value=128, interp_type=None):
    """Shifts along x by ``offset`` pixels."""
    return _warp(data, fn.transforms.translation(offset=offset), fill_value, interp_type)


@augmentation(mag_range=(0.0, 1.0), randomly_negate=True, mag_to_param=warp_y_param)
def translate_y(data, rel_offset, shape, fill_value=128, interp_type=None):
    """Shifts along y by a fraction of the height (``shape`` is the HWC shape of each image)."""
    return _warp(data, fn.transforms.translation(offset=rel_offset * shape[0]), fill_value, interp_type)


@augmentation(mag_range=(0, 250), randomly_negate=True, mag_to_param=warp_y_param, name="translate_y")
def translate_y_no_shape(data, offset, fill_value=128, interp_type=None):
    """Shifts along y by ``offset`` pixels."""
    return _warp(data, fn.transforms.translation(offset=offset), fill_value, interp_type)


@augmentation(mag_range=(0, 30), randomly_negate=True)
def rotate(data, angle, fill_value=128, interp_type=None, rotate_keep_size=True):
    """Rotates by ``angle`` degrees (keeping the size unless ``rotate_keep_size=False``)."""
    return fn.rotate(data, angle=angle, keep_size=rotate_keep_size, **_warp_kwargs(fill_value, interp_type))


def shift_enhance_range(magnitude):
    """Enhancement factors are neutral at 1: a signed magnitude m becomes the factor 1 + m."""
    return 1 + magnitude


@augmentation(mag_range=(0, 0.9), randomly_negate=True, mag_to_param=shift_enhance_range)
def brightness(data, parameter):
    """Multiplies the pixel values by ``parameter`` (PIL's ImageEnhance.Brightness)."""
    return fn.brightness(data, brightness=parameter)


@augmentation(mag_range=(0, 0.9), randomly_negate=True, mag_to_param=shift_enhance_range)
def contrast(data, parameter):
    """Scales the distance of each pixel from the image's mean grey level by ``parameter``
    (PIL's ImageEnhance.Contrast: the centre is the luma-weighted channel mean)."""
    return invoke("_auto_aug.contrast", [data, parameter], {})


@augmentation(mag_range=(0, 0.9), randomly_negate=True, mag_to_param=shift_enhance_range)
def color(data, parameter):
    """Scales the saturation by ``parameter`` (PIL's ImageEnhance.Color)."""
    return fn.saturation(data, saturation=parameter)


def sharpness_kernel(magnitude):
    """The 3x3 kernel that blends an image with PIL's smoothing filter: identity at 0,
    sharper for positive and blurrier for negative magnitudes (in [-1, 1])."""
    smooth = np.array([[1, 1, 1], [1, 5, 1], [1, 1, 1]], dtype=np.float32) / 13
    identity_k = np.zeros((3, 3), np.float32)
    identity_k[1, 1] = 1
    return (1 + magnitude) * identity_k - magnitude * smooth


def sharpness_kernel_shifted(magnitude):
    """:func:`sharpness_kernel` for enhancement factors in [0, 2] (neutral at 1)."""
    return sharpness_kernel(magnitude - 1)


@augmentation(mag_range=(0, 0.9), randomly_negate=True, mag_to_param=sharpness_kernel, param_device="auto")
def sharpness(data, kernel):
    """Filters with the 3x3 ``kernel`` (PIL's ImageEnhance.Sharpness; the 1-pixel border is
    filtered too, with reflected edges, where PIL copies the input)."""
    return invoke("_auto_aug.filter", [data, kernel], {})


def poster_mask_uint8(magnitude):
    """The bit mask that keeps the ``magnitude`` (rounded, clamped to 1..8) high bits of a uint8."""
    bits = int(min(max(np.round(magnitude), 1), 8))
    return np.array(0xFF & ~((1 << (8 - bits)) - 1), dtype=np.uint8)


@augmentation(mag_range=(0, 4), mag_to_param=poster_mask_uint8, param_device="auto")
def posterize(data, mask):
    """Keeps only the high bits of each value (``mask`` from :func:`poster_mask_uint8`)."""
    return data & mask


@augmentation(mag_range=(256, 0), param_device="auto")
def solarize(data, threshold):
    """Inverts the values at or above ``threshold`` (256: nothing is inverted)."""
    return invoke("_auto_aug.solarize", [data, threshold], {})


def solarize_add_shift(shift):
    """The uint8 amount added by :func:`solarize_add` (below 128, so that values below 128 stay in range)."""
    if not 0 <= shift < 128:
        raise ValueError(f"solarize_add: the shift must be in [0, 128), got {shift}")
    return np.uint8(shift)


@augmentation(mag_range=(0, 110), param_device="auto", mag_to_param=solarize_add_shift)
def solarize_add(data, shift):
    """Adds ``shift`` to the values below 128."""
    return invoke("_auto_aug.solarize_add", [data, shift], {})


@augmentation
def invert(data, _):
    """255 - value."""
    return constant_node(_U8_255) - data


@augmentation
def equalize(data, _):
    """Equalizes the histogram of each channel (OpenCV's equalizeHist, as DALI)."""
    return invoke("_auto_aug.equalize", [data], {})


@augmentation
def auto_contrast(data, _):
    """Stretches each channel to the full [0, 255] range (channels with one value are kept)."""
    return invoke("_auto_aug.auto_contrast", [data], {})


@augmentation
def identity(data, _):
    """The data unchanged."""
    return data


__all__ = ["auto_contrast", "brightness", "color", "contrast", "equalize", "identity", "invert", "posterize",
           "rotate", "sharpness", "shear_x", "shear_y", "solarize", "solarize_add", "translate_x",
           "translate_x_no_shape", "translate_y", "translate_y_no_shape"]
