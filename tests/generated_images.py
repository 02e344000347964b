"""Generated test images (never downloaded), shared by the operator test folders.

Importable from every test folder as ``generated_images`` (``tests/`` is on ``sys.path``).
"""

from __future__ import annotations

import cv2
import numpy as np


def smooth(rng, h, w, c, dtype=np.uint8):
    """Photo-like content: upsampled noise (edges and gradients, no constant areas); float
    dtypes are scaled to [0, 1]."""
    small = rng.integers(0, 256, (max(2, h // 8), max(2, w // 8), c)).astype(np.uint8)
    big = cv2.resize(small, (w, h), interpolation=cv2.INTER_CUBIC).reshape(h, w, c)
    return big if dtype == np.uint8 else (big / 255.0).astype(dtype)


def small_images():
    """Small images for the colour and filter tests: odd sizes, 1 and 3 channels, smooth and
    noisy content, uint8 and float."""
    rng = np.random.default_rng(11)
    return {
        "rgb": smooth(rng, 67, 91, 3),
        "noise": rng.integers(0, 256, (41, 53, 3), np.uint8),
        "gray": smooth(rng, 33, 27, 1),
        "rgb_f": rng.random((29, 45, 3), dtype=np.float32),
        "gray_f": smooth(rng, 31, 23, 1, np.float32),
    }


def geometry_images():
    """Images for the geometry tests: a photo-sized one, odd sizes, 1 and 3 channels, a tall one."""
    rng = np.random.default_rng(7)
    return {
        "rgb": smooth(rng, 375, 500, 3),
        "rgb_odd": smooth(rng, 77, 131, 3),
        "noise": rng.integers(0, 256, (61, 83, 3), np.uint8),
        "gray": smooth(rng, 53, 37, 1),
        "tall": rng.integers(0, 256, (101, 9, 3), np.uint8),
    }


def write_class_folders(root, per_class: int, encode, classes: int = 2, broken=None):
    """Class folders ``c0``, ``c1``, ... under ``root`` (a ``pathlib.Path``), as ``readers.file``
    reads them, of ``per_class`` files ``{i}.jpg`` each with the bytes ``encode(c, i)``;
    ``broken=(c, data)`` adds ``broken.jpg`` holding ``data`` to class ``c``. Returns ``root``."""
    for c in range(classes):
        (root / f"c{c}").mkdir()
        for i in range(per_class):
            (root / f"c{c}" / f"{i}.jpg").write_bytes(encode(c, i))
    if broken is not None:
        (root / f"c{broken[0]}" / "broken.jpg").write_bytes(broken[1])
    return root
