"""readers.numpy throughput: stoker CPU vs DALI CPU, and device="gpu" (pinned vs kvikio) on a GPU.

    python benchmarks/numpy_reader_bench.py [FOLDER] [--files 2000] [--shape 64,64,64] [--batch 32]
        [--threads 4] [--iterations 50] [--roi] [--gpu]

Without FOLDER a data set of float32 .npy files is written to a temporary folder. Each
configuration runs a warm-up pass, then ``--iterations`` batches; samples/s and the ratio to
DALI's CPU reader are printed. ``--gpu`` adds stoker device="gpu" through pinned memory and through
kvikio (``STOKER_NUMPY_GDS=1``, when kvikio is installed) and DALI's GPU reader. Numbers depend on
the page cache: the files are read once before timing, so this measures cached reads.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np


def make_dataset(folder: str, files: int, shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng(0)
    os.makedirs(folder, exist_ok=True)
    block = rng.random(shape, dtype=np.float32)
    for i in range(files):
        np.save(os.path.join(folder, f"{i:06d}.npy"), block + i)


def build(lib: str, folder: str, batch: int, threads: int, device: str, roi: bool):
    if lib == "dali":
        from nvidia.dali import fn, pipeline_def
    else:
        from stoker import fn, pipeline_def
    extra = dict(rel_roi_start=[0.25, 0.25], rel_roi_end=[0.75, 0.75], roi_axes=[0, 1]) if roi else {}

    @pipeline_def(batch_size=batch, num_threads=threads, device_id=0 if device == "gpu" else None,
                  prefetch_queue_depth=2)
    def p():
        return fn.readers.numpy(file_root=folder, device=device, name="R", **extra)

    pipe = p()
    pipe.build()
    return pipe


def measure(pipe, iterations: int, batch: int, device: str) -> float:
    for _ in range(3):
        pipe.run()
    start = time.perf_counter()
    for _ in range(iterations):
        (out,) = pipe.run()
    if device == "gpu":  # the last batch's copy must be done
        out.as_cpu() if hasattr(out, "as_cpu") else None
    return iterations * batch / (time.perf_counter() - start)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folder", nargs="?")
    ap.add_argument("--files", type=int, default=2000)
    ap.add_argument("--shape", default="64,64,64")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--iterations", type=int, default=50)
    ap.add_argument("--roi", action="store_true", help="read the central half of the first two axes")
    ap.add_argument("--gpu", action="store_true", help="also time device='gpu' (needs CUDA)")
    args = ap.parse_args(argv)
    folder = args.folder or os.path.join(tempfile.gettempdir(), "stoker_npy_bench")
    shape = tuple(int(x) for x in args.shape.split(","))
    if not args.folder and len(os.listdir(folder) if os.path.isdir(folder) else []) < args.files:
        print(f"writing {args.files} files of shape {shape} to {folder}", flush=True)
        make_dataset(folder, args.files, shape)
    for name in os.listdir(folder):  # warm the page cache
        with open(os.path.join(folder, name), "rb") as f:
            f.read()

    configs = [("dali", "cpu", None), ("stoker", "cpu", None)]
    if args.gpu:
        configs += [("dali", "gpu", None), ("stoker", "gpu", "0"), ("stoker", "gpu", "1")]
    results = {}
    for lib, device, gds in configs:
        label = f"{lib} {device}" + ({"0": " pinned", "1": " kvikio"}[gds] if gds else "")
        if gds == "1":
            try:
                import kvikio  # noqa: F401
            except ImportError:
                print(f"{label:24s} skipped (kvikio not installed)")
                continue
        if gds is not None:
            os.environ["STOKER_NUMPY_GDS"] = gds
        try:
            pipe = build(lib, folder, args.batch, args.threads, device, args.roi)
            rate = measure(pipe, args.iterations, args.batch, device)
        except ImportError as e:
            print(f"{label:24s} skipped ({e})")
            continue
        results[label] = rate
        base = results.get(f"dali {device}")
        ratio = f"  {rate / base:5.2f}x DALI {device}" if base and lib == "stoker" else ""
        print(f"{label:24s} {rate:10.0f} samples/s{ratio}", flush=True)
        if hasattr(pipe, "close"):
            pipe.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
