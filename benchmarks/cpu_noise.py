"""CPU cost of the noise operators' element-wise generator, against the bulk generator it replaced.

    python benchmarks/cpu_noise.py [--size 224] [--repeat 50]

noise.gaussian and noise.salt_and_pepper draw from ``element_rng`` (NumPy's Philox4x64 words,
Box-Muller in float64) so that their GPU kernels can compute the same values; before, they drew
from an SFC64 Generator seeded from the sample's stream (float32 ziggurat normals, float32
uniforms), which no kernel can reproduce. Both draws run side by side here on the same element
counts; prints one JSON line per kind with milliseconds per image and the ratio.

noise.shot likewise: its Poisson counts come from ``element_poisson`` (a CDF search below lambda 16,
a table look-up for 8-bit images; PTRS with fixed draws above) instead of SFC64's ``poisson``;
timed on a random 224x224x3 uint8 image at factor 20 (lambdas up to 12.75) and 1 (up to 255),
the operator's whole per-sample step (lambda, counts, back to uint8).
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from stoker.operators.color._common import to_dtype
from stoker.operators.filters import element_poisson, element_rng


def _ms(fn, repeat: int) -> float:
    fn()  # warm-up
    t = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - t) / repeat * 1e3


def _shot_before(img, factor: float):
    lam = np.maximum(img.astype(np.float64) / factor, 0.0)
    counts = np.random.Generator(np.random.SFC64(7)).poisson(lam)
    return to_dtype((counts * factor).astype(np.float32), img.dtype)


def _shot_now(img, factor: float, key):
    """noise.shot's run_sample, less its argument checks."""
    lam = np.maximum(img.astype(np.float64) / factor, 0.0)
    table = np.maximum(np.arange(256).astype(np.float64) / factor, 0.0)
    counts = element_poisson.poisson(key, lam, (table, img.reshape(-1).astype(np.intp))).reshape(img.shape)
    return to_dtype((counts * factor).astype(np.float32), img.dtype)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", type=int, default=224, help="image side (HWC, 3 channels)")
    ap.add_argument("--repeat", type=int, default=50)
    a = ap.parse_args()
    n = a.size * a.size * 3
    key = (123456789, 987654321)
    cases = {
        "gaussian (n normals)": (
            lambda: np.random.Generator(np.random.SFC64(7)).standard_normal(n, dtype=np.float32),
            lambda: element_rng.normals(key, n).astype(np.float32)),
        "salt_and_pepper (one draw per pixel)": (
            lambda: np.random.Generator(np.random.SFC64(7)).random(n // 3, dtype=np.float32),
            lambda: element_rng.words(key, n // 3) >> np.uint64(32)),
    }
    img = np.random.default_rng(0).integers(0, 256, (a.size, a.size, 3), dtype=np.uint8)
    for factor in (20.0, 1.0):
        cases[f"shot (factor {factor:g})"] = (lambda f=factor: _shot_before(img, f),
                                              lambda f=factor: _shot_now(img, f, key))
    for name, (before, now) in cases.items():
        old_ms, new_ms = _ms(before, a.repeat), _ms(now, a.repeat)
        print(json.dumps({"draw": name, "image": f"{a.size}x{a.size}x3", "sfc64_ms": round(old_ms, 2),
                          "element_rng_ms": round(new_ms, 2), "ratio": round(new_ms / old_ms, 2)}), flush=True)


if __name__ == "__main__":
    main()
