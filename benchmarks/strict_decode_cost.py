"""What the image decoders' ``strict`` mode (issue 17) costs on good data, per image, one thread.

    python benchmarks/strict_decode_cost.py [--images 200] [--repeats 5]

Data: ImageNet-like 500x375 JPEGs made here (smooth gradients, shapes and sensor noise;
quality 85-95; mostly 4:2:0, every 8th 4:4:4, every 10th progressive, every 15th gray) and a
quarter as many PNGs of the same pictures. Each is decoded to RGB uint8 by ``decode_cpu`` with
strict=False (OpenCV, as before) and strict=True (JPEG: TurboJPEG stopping at libjpeg's first
warning; PNG: every chunk's CRC checked, then OpenCV), alternating the two modes each round; the
figure is the best round's mean ms per image. The script first checks that both modes give the
same pixels for every file.
"""

from __future__ import annotations

import argparse
import io
import os
import platform
import time

import numpy as np
from PIL import Image

from stoker.operators.decoders import turbo
from stoker.operators.decoders.cpu import decode_cpu


def photo(i: int, h: int = 375, w: int = 500) -> np.ndarray:
    rng = np.random.default_rng(i)
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    img = np.stack([128 + 100 * np.sin(x / (20 + i % 30) + i), 128 + 100 * np.cos(y / (15 + i % 20)),
                    128 + 60 * np.sin((x + y) / (30 + i % 40))], -1)
    for _ in range(12):  # hard edges, as objects give
        cy, cx, r = rng.integers(0, h), rng.integers(0, w), rng.integers(10, 90)
        img[(y - cy) ** 2 + (x - cx) ** 2 < r * r] = rng.integers(0, 256, 3)
    img += rng.normal(0, rng.uniform(4, 8), img.shape)
    return np.clip(img, 0, 255).astype(np.uint8)


def encode(i: int, fmt: str) -> bytes:
    im = Image.fromarray(photo(i))
    kw = {}
    if fmt == "JPEG":
        kw = {"quality": 85 + i % 11, "subsampling": 0 if i % 8 == 0 else 2, "progressive": i % 10 == 0}
        if i % 15 == 0:
            im = im.convert("L")
    buf = io.BytesIO()
    im.save(buf, fmt, **kw)
    return buf.getvalue()


def bench(files: list[np.ndarray], repeats: int) -> dict[bool, float]:
    best = {False: float("inf"), True: float("inf")}
    for _ in range(repeats):
        for strict in (False, True):
            t0 = time.perf_counter()
            for f in files:
                decode_cpu(f, strict=strict)
            best[strict] = min(best[strict], (time.perf_counter() - t0) / len(files) * 1e3)
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--images", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores; TurboJPEG: "
          f"{turbo.library_path() or 'not found (strict JPEG checks the end marker only)'}")
    sets = {"JPEG": [np.frombuffer(encode(i, "JPEG"), np.uint8) for i in range(a.images)],
            "PNG": [np.frombuffer(encode(i, "PNG"), np.uint8) for i in range(max(1, a.images // 4))]}
    for name, files in sets.items():
        for f in files:  # strict must not change a good file's pixels
            assert np.array_equal(decode_cpu(f, strict=True), decode_cpu(f, strict=False))
        best = bench(files, a.repeats)
        kb = np.mean([f.size for f in files]) / 1e3
        print(f"{name}: {len(files)} files, mean {kb:.0f} KB; ms/image strict=False {best[False]:.3f}, "
              f"strict=True {best[True]:.3f} ({(best[True] / best[False] - 1) * 100:+.1f} %)")


if __name__ == "__main__":
    main()
