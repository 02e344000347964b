"""Soak test: run a pipeline for many iterations and watch memory and threads.

    python benchmarks/soak.py [--data DIR] [--iterations 3000] [--every 100] [--batch 8] [--threads 2]
                              [--bad 2] [--max-growth-mb 16] [--gpu]

The data is ``stoker.sample_data`` JPEGs (written to a temporary folder unless
``--data`` is given), plus ``--bad`` corrupt files so that the
``on_error="skip"`` path runs all along. Pipeline: readers.file (shuffled) ->
decoders.image_random_crop -> resize 96x96 -> crop_mirror_normalize (random
mirror, float CHW).

Every ``--every`` iterations one JSON line: iteration, seconds, images/s since
the last line, host RSS and its peak (``/proc/self/status``), thread count,
skipped samples so far, and GPU memory (CuPy's pool and the device's used
memory) when CuPy and a GPU are present. At the end a ``verdict`` line: RSS
growth between the end of the warm-up (``--warmup`` fraction of the run) and
the end, the least-squares slope over the same span, and ``"stable"`` when the
growth stays under ``--max-growth-mb`` (exit status 0) or ``"growing"``
(exit status 1). ``--trim`` returns glibc's free pages to the OS before each
reading, which separates live memory from the allocator's cache.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import threading
import time

import numpy as np


def proc_status_mb(key: str) -> float:
    """A memory line of /proc/self/status (VmRSS, VmHWM...) in MiB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def malloc_trim() -> bool:
    """Give glibc's free heap pages back to the OS (so RSS shows live memory, not the allocator's
    cache); False where there is no glibc."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
        return True
    except (OSError, AttributeError):
        return False


def gpu_memory_mb() -> dict:
    """CuPy pool and device memory in MiB; empty when CuPy or a GPU is missing."""
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() < 1:
            return {}
        from stoker.backend.cuda import memory_pool

        pool = memory_pool()
        free, total = cupy.cuda.runtime.memGetInfo()
        return {"gpu_pool_used_mb": round(pool.used_bytes() / 2**20, 1),
                "gpu_pool_total_mb": round(pool.total_bytes() / 2**20, 1),
                "gpu_device_used_mb": round((total - free) / 2**20, 1)}
    except Exception:  # noqa: BLE001 - no CuPy, no driver, no device: host figures only
        return {}


def make_data(root: str, n: int, bad: int) -> None:
    from stoker.sample_data import write_dataset

    write_dataset(root, n, classes=4, seed=0, workers=2)
    for k in range(bad):  # a truncated copy of a real file and an empty one, alternately
        path = os.path.join(root, f"class_{k % 4:03d}", f"zz_bad_{k}.jpg")
        src = os.path.join(root, "class_000", "img_000000.jpg")
        with open(src, "rb") as f:
            data = f.read()[: 200] if k % 2 == 0 else b""
        with open(path, "wb") as f:
            f.write(data)


def build(root: str, batch: int, threads: int, gpu: bool = False):
    import stoker.fn as fn
    import stoker.types as types
    from stoker import pipeline_def

    @pipeline_def(batch_size=batch, num_threads=threads, device_id=0 if gpu else None, seed=1, on_error="skip")
    def soak():
        jpegs, labels = fn.readers.file(file_root=root, random_shuffle=True, name="Reader")
        images = fn.decoders.image_random_crop(jpegs, device="mixed" if gpu else "cpu", output_type=types.RGB)
        images = fn.resize(images, resize_x=96, resize_y=96)
        images = fn.crop_mirror_normalize(images, dtype=types.FLOAT, output_layout="CHW",
                                          mean=[128.0] * 3, std=[64.0] * 3, mirror=fn.random.coin_flip())
        return images, labels

    pipe = soak()
    pipe.build()
    return pipe


def verdict(points: list[tuple[int, float]], warmup_iters: int, max_growth_mb: float) -> dict:
    after = [(i, r) for i, r in points if i >= warmup_iters]
    if len(after) < 2:
        return {"verdict": "too short", "hint": "raise --iterations or lower --every/--warmup"}
    its = np.array([i for i, _ in after], np.float64)
    rss = np.array([r for _, r in after], np.float64)
    slope = float(np.polyfit(its, rss, 1)[0]) * 1000.0
    growth = float(rss[-1] - rss[0])
    return {"verdict": "stable" if growth < max_growth_mb else "growing",
            "rss_after_warmup_mb": round(float(rss[0]), 1), "rss_end_mb": round(float(rss[-1]), 1),
            "growth_after_warmup_mb": round(growth, 2), "slope_mb_per_1000_iters": round(slope, 3),
            "max_growth_mb": max_growth_mb, "warmup_iterations": warmup_iters}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", help="folder of class sub-folders (default: sample data in a temp folder)")
    ap.add_argument("--images", type=int, default=64, help="sample images to write when --data is not given")
    ap.add_argument("--bad", type=int, default=2, help="corrupt files added to the generated data")
    ap.add_argument("--iterations", type=int, default=3000)
    ap.add_argument("--every", type=int, default=100)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--warmup", type=float, default=0.2, help="fraction of the run before growth is measured")
    ap.add_argument("--max-growth-mb", type=float, default=16.0)
    ap.add_argument("--trim", action="store_true",
                    help="call glibc malloc_trim(0) before each reading: growth that remains is live memory")
    ap.add_argument("--verbose", action="store_true", help="keep the per-sample 'skipped' warnings")
    ap.add_argument("--gpu", action="store_true",
                    help="the same pipeline on GPU 0 (mixed decoder, GPU resize and crop_mirror_normalize)")
    a = ap.parse_args(argv)
    if not a.verbose:  # the corrupt files are skipped on purpose: one warning each time is noise here
        logging.getLogger("stoker").setLevel(logging.ERROR)

    tmp = None
    root = a.data
    if root is None:
        tmp = tempfile.TemporaryDirectory(prefix="stoker_soak_")
        root = tmp.name
        make_data(root, a.images, a.bad)
    pipe = build(root, a.batch, a.threads, a.gpu)
    print(json.dumps({"config": {"data": root, "iterations": a.iterations, "batch": a.batch,
                                 "threads": a.threads, "cpus": os.cpu_count(), "trim": a.trim, "gpu": a.gpu,
                                 "python": sys.version.split()[0]}}), flush=True)
    points: list[tuple[int, float]] = []
    t0 = last_t = time.perf_counter()
    last_i = 0
    for i in range(1, a.iterations + 1):
        images, _ = pipe.run()
        if len(images) != a.batch:
            raise SystemExit(f"iteration {i}: batch of {len(images)} samples, expected {a.batch}")
        if i % a.every == 0 or i == a.iterations:
            now = time.perf_counter()
            if a.trim:
                malloc_trim()
            rss = proc_status_mb("VmRSS")
            points.append((i, rss))
            line = {"iteration": i, "seconds": round(now - t0, 1),
                    "img_per_s": round((i - last_i) * a.batch / (now - last_t), 1),
                    "rss_mb": round(rss, 1), "rss_peak_mb": round(proc_status_mb("VmHWM"), 1),
                    "threads": threading.active_count(), "skipped": len(pipe.error_report())}
            line.update(gpu_memory_mb())
            print(json.dumps(line), flush=True)
            last_t, last_i = now, i
    pipe.close()
    result = verdict(points, int(a.iterations * a.warmup), a.max_growth_mb)
    result["threads_after_close"] = threading.active_count()
    print(json.dumps(result), flush=True)
    if tmp is not None:
        tmp.cleanup()
    return 0 if result["verdict"] == "stable" else 1


if __name__ == "__main__":
    raise SystemExit(main())
