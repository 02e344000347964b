"""CPU cost of the noise operators' element-wise generator, against the bulk generator it replaced.

    python benchmarks/cpu_noise.py [--size 224] [--repeat 50]

noise.gaussian and noise.salt_and_pepper draw from ``element_rng`` (NumPy's Philox4x64 words,
Box-Muller in float64) so that their GPU kernels can compute the same values; before, they drew
from an SFC64 Generator seeded from the sample's stream (float32 ziggurat normals, float32
uniforms), which no kernel can reproduce. Both draws run side by side here on the same element
counts; prints one JSON line per kind with milliseconds per image and the ratio.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from stoker.operators.filters import element_rng


def _ms(fn, repeat: int) -> float:
    fn()  # warm-up
    t = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - t) / repeat * 1e3


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
    for name, (before, now) in cases.items():
        old_ms, new_ms = _ms(before, a.repeat), _ms(now, a.repeat)
        print(json.dumps({"draw": name, "image": f"{a.size}x{a.size}x3", "sfc64_ms": round(old_ms, 2),
                          "element_rng_ms": round(new_ms, 2), "ratio": round(new_ms / old_ms, 2)}), flush=True)


if __name__ == "__main__":
    main()
