"""Fixtures of the reliability tests: encoded images made on the fly, and a thread-leak guard."""

from __future__ import annotations

import io
import threading
import time

import cv2
import numpy as np
import pytest
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


@pytest.fixture(autouse=True)
def no_thread_leak():
    """Every reliability test must leave no stoker thread running once its pipelines are closed."""
    before = {t.ident for t in threading.enumerate()}
    yield
    deadline = time.monotonic() + 5
    while True:
        extra = [t for t in threading.enumerate() if t.ident not in before and t.is_alive()]
        if not extra or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert not extra, f"threads left running: {[t.name for t in extra]}"
