"""GPU operators, kernel against host fallback, side by side on the same batches.

    python benchmarks/gpu_ops.py [--batch 256] [--size 224,320] [--iters 20]
        [--ops hsv,brightness_contrast,...]

For each operator, the same pipeline (an external source of ``--batch`` random HWC uint8 images
of sizes in ``--size``, moved to the GPU, then the operator) runs ``--iters`` iterations after a
warm-up twice: with the operator's GPU kernel, then with the kernel taken out of the registry so
that the host fallback runs (copy down, the CPU operator, copy up). A pipeline with no operator
gives the baseline (upload) time, subtracted from both. Prints one JSON line per operator:
milliseconds per batch for each path and their ratio.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

CASES = {
    "hsv": lambda fn, types, x: fn.hsv(x, hue=30.0, saturation=1.2),
    "color_twist": lambda fn, types, x: fn.color_twist(x, hue=10.0, saturation=0.8, contrast=1.1, brightness=0.9),
    "brightness_contrast": lambda fn, types, x: fn.brightness_contrast(x, brightness=1.2, contrast=0.8),
    "_arithmetic": lambda fn, types, x: x / 255.0,
    "random_resized_crop": lambda fn, types, x: fn.random_resized_crop(x, size=(224, 224)),
    "rotate": lambda fn, types, x: fn.rotate(x, angle=17.0, fill_value=0),
    "warp_affine": lambda fn, types, x: fn.warp_affine(x, matrix=[1.0, 0.1, 2.0, 0.05, 1.0, -3.0], fill_value=0),
    "gaussian_blur": lambda fn, types, x: fn.gaussian_blur(x, sigma=1.5),
    "transpose": lambda fn, types, x: fn.transpose(x, perm=(2, 0, 1)),
    "resize": lambda fn, types, x: fn.resize(x, resize_x=224, resize_y=224),
    "noise.gaussian": lambda fn, types, x: fn.noise.gaussian(x, stddev=10.0),
    "noise.salt_and_pepper": lambda fn, types, x: fn.noise.salt_and_pepper(x, prob=0.05),
}


def _images(batch: int, sizes: tuple[int, int], seed: int = 0) -> list:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(batch):
        h, w = (int(v) for v in rng.integers(sizes[0], sizes[1] + 1, 2))
        out.append(rng.integers(0, 256, (h, w, 3), dtype=np.uint8))
    return out


def _time(build, images, iters: int) -> float:
    """Milliseconds per batch of a pipeline: external source -> GPU -> build(x)."""
    import stoker.fn as fn
    import stoker.types as types
    from stoker import pipeline_def

    @pipeline_def(batch_size=len(images), num_threads=4, device_id=0, seed=1)
    def pipe():
        x = fn.external_source(source=[images], cycle=True, layout="HWC").gpu()
        return build(fn, types, x) if build is not None else x

    p = pipe()
    p.build()
    for _ in range(3):
        (out,) = p.run()
    out.as_cpu()  # the warm-up done (kernels compiled, pools filled)
    t0 = time.perf_counter()
    for _ in range(iters):
        (out,) = p.run()
    out.as_cpu()  # waits for the last batch's GPU work
    dt = (time.perf_counter() - t0) / iters * 1e3
    p.close()
    return dt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--size", default="224,320", help="smallest,largest image side")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--ops", default=",".join(CASES))
    a = ap.parse_args()
    from stoker.operators import gpu_registry

    gpu_registry.load_gpu_impls()
    lo, hi = (int(v) for v in a.size.split(","))
    images = _images(a.batch, (lo, hi))
    base = _time(None, images, a.iters)
    print(json.dumps({"op": "(upload only)", "ms_per_batch": round(base, 2)}), flush=True)
    for name in a.ops.split(","):
        impl = gpu_registry.lookup(name)
        row = {"op": name}
        if impl is not None:
            row["kernel_ms"] = round(_time(CASES[name], images, a.iters) - base, 2)
            del gpu_registry._GPU_IMPLS[name]  # the host fallback, for comparison
        try:
            row["fallback_ms"] = round(_time(CASES[name], images, a.iters) - base, 2)
        finally:
            if impl is not None:
                gpu_registry._GPU_IMPLS[name] = impl
        if "kernel_ms" in row and row["kernel_ms"] > 0:
            row["fallback_over_kernel"] = round(row["fallback_ms"] / row["kernel_ms"], 1)
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
