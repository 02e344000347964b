"""Writes an ImageNet-like folder of JPEGs with photo-like content, for demos, tests and benchmarks.

Layout: ``OUT/class_000/img_000000.jpg`` ... (one sub-folder per class, as
``fn.readers.file`` expects). Each image is synthesised, not downloaded:
a 1/f ("pink") noise field, which has the power spectrum of natural photos,
coloured by a per-class palette, with blurred shapes, shading and sensor
noise, sized like ImageNet (short side 300-600, long side at most 800) and
encoded at JPEG quality 85-96, mostly 4:2:0, some 4:4:4, a few progressive
and grayscale. Usage::

    python -m stoker.sample_data OUT N [--classes 10] [--seed 0]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import cv2
import numpy as np


def _pink_noise(rng: np.random.Generator, h: int, w: int, channels: int) -> np.ndarray:
    """Noise with a 1/f amplitude spectrum, normalised to [0, 1] per channel."""
    fy = np.fft.fftfreq(h)[:, None]
    fx = np.fft.rfftfreq(w)[None, :]
    f = np.sqrt(fx * fx + fy * fy)
    f[0, 0] = 1.0
    amp = 1.0 / f ** rng.uniform(1.0, 1.4)
    out = np.empty((h, w, channels), np.float32)
    for c in range(channels):
        phase = rng.uniform(0, 2 * np.pi, amp.shape)
        field = np.fft.irfft2(amp * np.exp(1j * phase), s=(h, w))
        lo, hi = np.percentile(field, (1, 99))
        out[..., c] = np.clip((field - lo) / (hi - lo + 1e-9), 0, 1)
    return out


def make_image(index: int, label: int, seed: int = 0) -> tuple[np.ndarray, dict]:
    """One synthetic photo (RGB uint8 HxWx3) and the JPEG options to encode it with."""
    rng = np.random.default_rng([seed, index])
    short = int(rng.choice([rng.integers(300, 400), rng.integers(375, 500), rng.integers(450, 600)]))
    aspect = rng.uniform(0.75, 1.5)
    h, w = (short, int(short * aspect)) if rng.random() < 0.7 else (int(short * aspect), short)
    scale = min(1.0, 800 / max(h, w))
    h, w = max(32, int(h * scale)), max(32, int(w * scale))

    # Render at half size (cheap), upsample: photos are smooth at the pixel scale anyway.
    sh, sw = (h + 1) // 2, (w + 1) // 2
    base = _pink_noise(rng, sh, sw, 3)
    class_rng = np.random.default_rng([seed, 7919, label])
    palette = class_rng.uniform(0.15, 0.95, (2, 3)).astype(np.float32)
    t = base.mean(axis=2, keepdims=True)
    # Mostly luminance texture with a little colour variation, as in photos.
    img = palette[0] * (1 - t) + palette[1] * t + 0.3 * (t - 0.5) + 0.12 * (base - t)

    n_shapes = int(rng.integers(2, 7))
    for _ in range(n_shapes):
        colour = np.clip(palette[int(rng.integers(0, 2))] + rng.normal(0, 0.2, 3), 0, 1).tolist()
        mask = np.zeros((sh, sw), np.float32)
        centre = (int(rng.integers(0, sw)), int(rng.integers(0, sh)))
        axes = (int(rng.integers(sw // 12 + 1, sw // 3 + 2)), int(rng.integers(sh // 12 + 1, sh // 3 + 2)))
        cv2.ellipse(mask, centre, axes, float(rng.uniform(0, 180)), 0, 360, 1.0, -1)
        mask = cv2.GaussianBlur(mask, (0, 0), float(rng.uniform(1.0, 6.0)))[..., None]
        img = img * (1 - 0.8 * mask) + np.asarray(colour, np.float32) * 0.8 * mask

    yy = np.linspace(-1, 1, sh, dtype=np.float32)[:, None, None]
    xx = np.linspace(-1, 1, sw, dtype=np.float32)[None, :, None]
    gx, gy = rng.uniform(-0.25, 0.25, 2)
    img = img * (1 + gx * xx + gy * yy)  # directional lighting
    img = cv2.resize(img, (w, h), interpolation=cv2.INTER_CUBIC)
    img = img * 255.0 + rng.normal(0, rng.uniform(3.0, 7.0), img.shape).astype(np.float32)
    rgb = np.clip(img, 0, 255).astype(np.uint8)

    r = rng.random()
    options = {"quality": int(rng.integers(85, 97)), "gray": r < 0.03,
               "subsampling": "444" if r < 0.13 else "420", "progressive": bool(rng.random() < 0.05)}
    return rgb, options


def encode_jpeg(rgb: np.ndarray, quality: int, subsampling: str = "420", progressive: bool = False,
                gray: bool = False) -> bytes:
    """JPEG bytes of an RGB image with OpenCV's libjpeg-turbo."""
    bgr = cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY if gray else cv2.COLOR_RGB2BGR)
    params = [cv2.IMWRITE_JPEG_QUALITY, quality, cv2.IMWRITE_JPEG_PROGRESSIVE, int(progressive)]
    if not gray:
        factor = cv2.IMWRITE_JPEG_SAMPLING_FACTOR_444 if subsampling == "444" else \
            cv2.IMWRITE_JPEG_SAMPLING_FACTOR_420
        params += [cv2.IMWRITE_JPEG_SAMPLING_FACTOR, factor]
    ok, buf = cv2.imencode(".jpg", bgr, params)
    if not ok:
        raise RuntimeError("OpenCV failed to encode a JPEG")
    return buf.tobytes()


def progress_bar(total: int, desc: str, progress: bool | None = None):
    """A tqdm bar on stderr, or a do-nothing stand-in.

    ``progress`` None shows it only when stderr is a terminal, so logs and captured output stay
    clean; True forces it, False hides it. Without tqdm installed there is no bar.
    """
    try:
        from tqdm import tqdm
    except ImportError:
        tqdm = None
    if tqdm is None or progress is False:
        return _NoBar()
    if progress is None:
        progress = sys.stderr.isatty()
    return tqdm(total=total, desc=desc, unit="img", file=sys.stderr, disable=not progress, dynamic_ncols=True)


class _NoBar:
    def update(self, n: int = 1) -> None:
        pass

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def write_dataset(out: str, n: int, classes: int = 10, seed: int = 0, workers: int | None = None,
                  progress: bool | None = None) -> dict:
    """Write ``n`` JPEGs into ``classes`` class folders under ``out``; return size statistics.

    Images already present (same name) are kept, so repeated calls are cheap. ``progress``:
    show a progress bar on stderr (None: only when stderr is a terminal; see :func:`progress_bar`).
    Statistics: ``images``, ``classes``, ``written`` (new files), ``mean_kb``, ``total_mb``.
    """
    if n < 1 or classes < 1:
        raise ValueError(f"write_dataset: n and classes must be positive, got n={n}, classes={classes}")
    for c in range(classes):
        os.makedirs(os.path.join(out, f"class_{c:03d}"), exist_ok=True)

    def one(i: int) -> tuple[int, int]:
        path = os.path.join(out, f"class_{i % classes:03d}", f"img_{i:06d}.jpg")
        if os.path.exists(path) and os.path.getsize(path) > 0:
            return os.path.getsize(path), 0
        rgb, opts = make_image(i, i % classes, seed)
        data = encode_jpeg(rgb, **opts)
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
        return len(data), rgb.shape[0] * rgb.shape[1]

    sizes = []
    with ThreadPoolExecutor(workers or os.cpu_count() or 2) as pool, \
            progress_bar(n, f"writing {out}", progress) as bar:
        for size in pool.map(one, range(n)):
            sizes.append(size)
            bar.update(1)
    nbytes = np.array([s[0] for s in sizes])
    return {"images": n, "classes": classes, "written": sum(1 for s in sizes if s[1]),
            "mean_kb": float(nbytes.mean() / 1e3), "total_mb": float(nbytes.sum() / 1e6)}


def summary(stats: dict, out: str, seconds: float | None = None) -> str:
    """The one-line summary printed after writing a data set."""
    kept = stats["images"] - stats.get("written", stats["images"])
    line = (f"{stats['images']} images in {stats['classes']} classes under {out}: "
            f"mean {stats['mean_kb']:.1f} KB, total {stats['total_mb']:.1f} MB")
    if kept:
        line += f" ({kept} already present, kept)"
    if seconds is not None:
        line += f" [{seconds:.1f} s]"
    return line


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("n", type=int)
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                    help="progress bar on stderr (default: only when stderr is a terminal)")
    a = ap.parse_args(argv)
    t0 = time.perf_counter()
    stats = write_dataset(a.out, a.n, a.classes, a.seed, progress=a.progress)
    print(summary(stats, a.out, time.perf_counter() - t0))


if __name__ == "__main__":
    main()
