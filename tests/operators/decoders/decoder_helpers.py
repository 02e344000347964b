"""Generated test images of every supported format (written with Pillow / OpenCV), and pipeline runners."""

from __future__ import annotations

import io

import cv2
import numpy as np
from oracle import pipeline
from PIL import Image

H, W = 37, 53


def smooth_image(h: int, w: int, c: int, seed: int = 0) -> np.ndarray:
    """A photo-like uint8 image: smooth waves plus a little noise (JPEG-friendly, not constant)."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    chans = [(np.sin(x / 7.0 + k) + np.cos(y / 5.0 + 2 * k)) * 60 + 128 + rng.normal(0, 8, (h, w))
             for k in range(c)]
    return np.clip(np.stack(chans, -1), 0, 255).astype(np.uint8)


def pil_bytes(arr_or_img, fmt: str, **kw) -> bytes:
    im = arr_or_img if isinstance(arr_or_img, Image.Image) else Image.fromarray(arr_or_img)
    buf = io.BytesIO()
    im.save(buf, fmt, **kw)
    return buf.getvalue()


def exif_with_orientation(o: int) -> bytes:
    ex = Image.Exif()
    ex[0x0112] = o
    return ex.tobytes()


def stored16(rgb: np.ndarray) -> np.ndarray:
    """The 16-bit PNG fixtures' pixels: 8-bit values * 257 plus an offset (saturating)."""
    return np.minimum(rgb.astype(np.uint32) * 257 + 100, 65535).astype(np.uint16)


def make_images() -> dict[str, bytes]:
    """name -> encoded bytes; the names hint at content, the decoders never look at them."""
    rgb = smooth_image(H, W, 3)
    gray = rgb[..., 0]
    rgba = np.concatenate([rgb, rgb[..., 1:2]], -1)
    files = {
        "rgb.jpg": pil_bytes(rgb, "JPEG", quality=90),
        "rgb444.jpg": pil_bytes(rgb, "JPEG", quality=95, subsampling=0),
        "gray.jpg": pil_bytes(gray, "JPEG", quality=90),
        "cmyk.jpg": pil_bytes(Image.fromarray(rgb).convert("CMYK"), "JPEG", quality=95),
        "rgb.png": pil_bytes(rgb, "PNG"),
        "gray.png": pil_bytes(gray, "PNG"),
        "rgba.png": pil_bytes(rgba, "PNG"),
        "la.png": pil_bytes(Image.fromarray(rgba[..., [0, 3]], "LA"), "PNG"),
        "palette.png": pil_bytes(Image.fromarray(rgb).convert("P"), "PNG"),
        "rgb.bmp": pil_bytes(rgb, "BMP"),
        "rgb.tiff": pil_bytes(rgb, "TIFF"),
        "rgb.webp": pil_bytes(rgb, "WEBP", lossless=True),
        "rgb.jp2": pil_bytes(rgb, "JPEG2000", irreversible=False),
        "rgb.ppm": pil_bytes(rgb, "PPM"),
        "gray.pgm": pil_bytes(gray, "PPM"),
    }
    # 16-bit PNGs: not multiples of 257, so 16 -> 8 bit rounding is exercised.
    rgb16 = stored16(rgb)
    files["rgb16.png"] = cv2.imencode(".png", np.ascontiguousarray(rgb16[..., ::-1]))[1].tobytes()
    files["gray16.png"] = cv2.imencode(".png", rgb16[..., 0])[1].tobytes()
    for o in range(1, 9):
        files[f"exif{o}.jpg"] = pil_bytes(rgb, "JPEG", quality=95, exif=exif_with_orientation(o))
    files["exif6.png"] = pil_bytes(rgb, "PNG", exif=exif_with_orientation(6))
    files["exif8.webp"] = pil_bytes(rgb, "WEBP", lossless=True, exif=exif_with_orientation(8))
    files["exif6.tiff"] = pil_bytes(rgb, "TIFF", tiffinfo={274: 6})
    return files


def as_u8(b: bytes) -> np.ndarray:
    return np.frombuffer(b, np.uint8)


def _run(lib, datas, build, batch_size=None, num_threads=1, seed=7, iterations=1):
    def body(fn, types):
        out = build(fn.external_source(source=lambda: list(datas), batch=True), fn, types)
        return out if isinstance(out, tuple) else (out,)

    p = pipeline(lib, body, batch_size or len(datas), num_threads=num_threads, seed=seed)
    results = []
    for _ in range(iterations):
        results.append([[np.array(o.at(i)) for i in range(len(o))] for o in p.run()])
    return results if iterations > 1 else results[0]


def run_stoker(datas, build, batch_size=None, num_threads=1, seed=7, iterations=1):
    """Run ``build(encoded, fn, types) -> outputs`` in a stoker pipeline over ``datas``; returns lists of arrays
    (a list of them per iteration when ``iterations`` > 1)."""
    return _run("stoker", datas, build, batch_size, num_threads, seed, iterations)


def run_dali(datas, build):
    """The same with DALI's CPU operators (the oracle, tests/oracle.py; one thread); ``build(encoded, fn, types)``."""
    return _run("dali", datas, build)
