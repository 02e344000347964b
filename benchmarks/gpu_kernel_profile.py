"""GPU time per batch of every CUDA kernel and copy that stoker's zoo pipelines launch
(``benchmarks/op_zoo.py``), from PyTorch's profiler (CUPTI traces every kernel of the process,
CuPy's and nvImageCodec's included; the hardware JPEG engines' work is not a kernel and does not
appear).

    python benchmarks/gpu_kernel_profile.py DATA_DIR train,val,rand_augment [--batches 10] [--top 12]

A name may also be "baseline" or an operator of ``op_zoo.OPS`` (decode, resize 256, the operator,
crop 224: the per-operator tables' cases).
"""

from __future__ import annotations

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("root")
    ap.add_argument("pipelines")
    ap.add_argument("--batches", type=int, default=10)
    ap.add_argument("--top", type=int, default=12)
    a = ap.parse_args()
    sys.path.insert(0, HERE)
    import cupy as cp
    import op_zoo
    import torch
    from torch.profiler import ProfilerActivity, profile

    import stoker.fn as fn
    import stoker.types as types
    from stoker import pipeline_def

    torch.zeros(1, device="cuda")
    for name in a.pipelines.split(","):
        build = op_zoo.case_builder(name)

        @pipeline_def(batch_size=256, num_threads=16, device_id=0, seed=1,
                      enable_conditionals=name in op_zoo.CONDITIONAL)
        def pipe(build=build):
            return build(fn, types, a.root)

        p = pipe()
        p.build()
        for _ in range(5):
            p.run()
        cp.cuda.runtime.deviceSynchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(a.batches):
                p.run()
            cp.cuda.runtime.deviceSynchronize()
        rows = []
        for e in prof.key_averages():
            t = getattr(e, "device_time_total", None) or getattr(e, "cuda_time_total", 0)
            if t > 0:
                rows.append((t / a.batches / 1e3, e.count / a.batches, e.key))
        rows.sort(reverse=True)
        print(f"== {name}: GPU ms per batch of 256, by kernel (all kernels: {sum(r[0] for r in rows):.2f} ms)")
        for t, count, key in rows[:a.top]:
            print(f"  {t:7.3f} ms  x{count:5.1f}  {key[:90]}")
        p.close()


if __name__ == "__main__":
    main()
