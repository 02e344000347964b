"""Encoded test images made on the fly for the reliability tests (a uniquely named module, so that
it never clashes with another folder's conftest on sys.path)."""

from __future__ import annotations

import io

import cv2
import numpy as np
from PIL import Image


def photo(h: int = 24, w: int = 32, seed: int = 0) -> np.ndarray:
    """A smooth RGB test image (gradients + noise), so JPEG artefacts stay small."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([x * 255 // max(w - 1, 1), y * 255 // max(h - 1, 1), (x + y) * 127 // max(h + w - 2, 1)], -1)
    return np.clip(base + rng.integers(-8, 8, base.shape), 0, 255).astype(np.uint8)


def jpeg_bytes(img: np.ndarray, quality: int = 90) -> bytes:
    ok, buf = cv2.imencode(".jpg", np.ascontiguousarray(img[:, :, ::-1]), [cv2.IMWRITE_JPEG_QUALITY, quality])
    assert ok
    return buf.tobytes()


def png_bytes(img: np.ndarray) -> bytes:
    """PNG of an RGB, gray (HW1) or 16-bit array, written by OpenCV."""
    src = img[:, :, ::-1] if img.ndim == 3 and img.shape[2] == 3 else img
    ok, buf = cv2.imencode(".png", np.ascontiguousarray(src))
    assert ok
    return buf.tobytes()


def pillow_bytes(img: Image.Image, fmt: str, **kw) -> bytes:
    out = io.BytesIO()
    img.save(out, fmt, **kw)
    return out.getvalue()


def pillow_rgb(data: bytes) -> np.ndarray:
    """Independent reference: Pillow's decode converted to RGB."""
    with Image.open(io.BytesIO(data)) as im:
        return np.asarray(im.convert("RGB"))
