"""The GPU resize kernel alone: a batch of full-size images (ImageNet-like sizes, 300-500 x
375-600) resized to a shorter side of 256 and 320, kernel time from CUDA events.

    python benchmarks/gpu_resize_micro.py [--cu OTHER_RESIZE.cu] [--batch 256]

``--cu`` loads another version of ``kernels/resize.cu`` (e.g. ``git show OLD:stoker/kernels/resize.cu``)
in place of the library's, to compare two kernels on one machine in one run.
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cu", default=None)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--reps", type=int, default=20)
    a = ap.parse_args()
    import cupy as cp

    from stoker.backend import cuda
    from stoker.operators.base import BatchContext
    from stoker.operators.image import gpu_resize
    from stoker.tensors_gpu import TensorListGPU

    if a.cu:
        module = cp.RawModule(code=open(a.cu).read(), options=("-std=c++17",))
        library = cuda.load_kernel
        cuda.load_kernel = lambda src, name, options=("-std=c++17",): (
            module.get_function(name) if src == "resize" else library(src, name, options))
    rng = np.random.default_rng(0)
    n = a.batch
    shapes = np.array([(int(rng.integers(300, 500)), int(rng.integers(375, 600)), 3) for _ in range(n)], np.int64)
    sizes = shapes.prod(1)
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    x = TensorListGPU.from_flat(cp.asarray(rng.integers(0, 255, int(sizes.sum()), dtype=np.uint8)), offsets,
                                shapes, "HWC")
    stream = cp.cuda.Stream(non_blocking=True)
    ctx = BatchContext(n, 0, stream=stream, device_id=0)
    print(f"kernel: {a.cu or 'the library'}; batch {n}")
    for target in (256, 320):
        plans = np.array([gpu_resize.plan({"resize_shorter": target}, int(h), int(w)) for h, w, _ in shapes])
        with stream:
            for _ in range(3):
                gpu_resize.resize_batch(x, plans, ctx)
            stream.synchronize()
            start, end = cp.cuda.Event(), cp.cuda.Event()
            start.record(stream)
            t = time.perf_counter()
            for _ in range(a.reps):
                gpu_resize.resize_batch(x, plans, ctx)
            end.record(stream)
            end.synchronize()
            wall = (time.perf_counter() - t) / a.reps * 1e3
        print(f"resize shorter {target}: {cp.cuda.get_elapsed_time(start, end) / a.reps:.2f} ms per batch on the GPU "
              f"({wall:.2f} ms wall)")


if __name__ == "__main__":
    main()
