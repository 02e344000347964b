"""Serving twins of the standard training-time preprocessing: the same numbers, one image at a time.

Models trained on DALI (or stoker) pipelines are often served with PIL or torchvision
preprocessing, whose resize filters and rounding differ from DALI's; the model then sees slightly
different inputs in production than in training. These functions run stoker's own CPU operators
(the ones a pipeline runs, which match DALI's CPU operators) eagerly through
:mod:`stoker.dynamic`, with no pipeline, GPU or DALI installed, so a serving process gets the
validation pipeline's exact output::

    from stoker.presets import imagenet_eval
    x = imagenet_eval(open("cat.jpg", "rb").read())   # (3, 224, 224) float32, as the pipeline gives

They are equal, bit for bit, to a stoker pipeline with the same operators and arguments (tested).
Against DALI 2.4's CPU pipeline they are within one level (of 255) before normalization: on the
test images about a fifth of the values differ by that level, as stoker's resize does from
DALI's (see the resize tests).
"""

from __future__ import annotations

import numpy as np

from stoker import types

IMAGENET_MEAN = (0.485 * 255, 0.456 * 255, 0.406 * 255)
IMAGENET_STD = (0.229 * 255, 0.224 * 255, 0.225 * 255)


def _decoded(image):
    import stoker.dynamic as ndd

    if isinstance(image, (bytes, bytearray, memoryview)):
        image = np.frombuffer(image, np.uint8)
    if hasattr(image, "convert") and hasattr(image, "mode"):  # a PIL image
        image = np.asarray(image.convert("RGB"))
    arr = np.asarray(image)
    if arr.ndim == 1 and arr.dtype == np.uint8:  # encoded bytes
        return ndd.decoders.image(ndd.as_tensor(arr), output_type=types.RGB)
    if arr.ndim != 3 or arr.shape[2] != 3 or arr.dtype != np.uint8:
        raise TypeError(f"presets: expected encoded image bytes, a PIL image or an HWC uint8 RGB array, "
                        f"got {arr.dtype} array of shape {arr.shape}")
    return ndd.as_tensor(np.ascontiguousarray(arr), layout="HWC")


def imagenet_eval(image, *, resize_shorter: float = 256, crop: int = 224, mean=IMAGENET_MEAN, std=IMAGENET_STD,
                  output_layout: str = "CHW") -> np.ndarray:
    """The standard validation preprocessing of one image: decode (RGB), ``resize(resize_shorter=...)``,
    ``crop_mirror_normalize(crop=(crop, crop), mean, std, dtype=FLOAT, output_layout)``.

    ``image``: encoded bytes (JPEG, PNG, ...; a 1-D uint8 array too), a PIL image, or a decoded HWC
    uint8 RGB array. Returns a float32 NumPy array."""
    import stoker.dynamic as ndd

    img = ndd.resize(_decoded(image), resize_shorter=float(resize_shorter))
    out = ndd.crop_mirror_normalize(img, crop=(int(crop), int(crop)), dtype=types.FLOAT,
                                    output_layout=output_layout, mean=list(mean), std=list(std))
    return np.asarray(out)
