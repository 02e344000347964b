"""Per-operator CPU cost, stoker and DALI side by side in one run.

    python benchmarks/cpu_op_table.py [--libs stoker,dali] [--ops all|rotate,hsv,...] [--size 256]
        [--batch 32] [--threads 1] [--iterations 8] [--rounds 1]

Each case of ``benchmarks/op_zoo.py`` (the operators as a user writes them, random arguments
included) runs on a batch of random ``size`` x ``size`` RGB images from an external source, in a
pipeline of its own, on the CPU, one library after the other for each operator. The figure is the
CPU time (this process, every thread) per image of the pipeline minus that of the same pipeline
without the operator, measured in the same process; so it is the operator's own CPU cost, the
source's copy taken out. One process per (library, operator); each prints a JSON line, and the
parent prints a Markdown table with stoker / DALI at the end. DALI's missing CPU operators (jitter
runs on its GPU only) show as errors.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def _modules(lib: str):
    if lib == "dali":
        import nvidia.dali.fn as fn
        import nvidia.dali.types as types
        from nvidia.dali import pipeline_def
    else:
        import stoker.fn as fn
        import stoker.types as types
        from stoker import pipeline_def
    return fn, types, pipeline_def


def child(lib: str, case: str, size: int, batch: int, threads: int, iterations: int) -> dict:
    import numpy as np

    sys.path.insert(0, HERE)
    import op_zoo

    fn, types, pipeline_def = _modules(lib)
    rng = np.random.default_rng(0)
    images = [rng.integers(0, 256, (size, size, 3), np.uint8) for _ in range(batch)]

    def cpu_ms(with_op: bool) -> float:
        @pipeline_def(batch_size=batch, num_threads=threads, device_id=None, seed=1)
        def pipe():
            x = fn.external_source(source=lambda: images, layout="HWC")
            return op_zoo.OPS[case](fn, types, x) if with_op else x

        p = pipe()
        p.build()
        for _ in range(2):
            p.run()
        t = time.process_time()
        for _ in range(iterations):
            p.run()
        return (time.process_time() - t) * 1e3 / (iterations * batch)

    base = cpu_ms(False)
    return {"lib": lib, "case": case, "ms_per_image": round(cpu_ms(True) - base, 3), "baseline_ms": round(base, 3)}


def table(rows: list) -> str:
    """Markdown: per operator, each library's CPU ms an image and stoker's speed-up over DALI (DALI's
    ms / stoker's)."""
    libs = list(dict.fromkeys(r["lib"] for r in rows))
    by: dict = {}
    for r in rows:
        if "ms_per_image" in r:  # the best (lowest) of the rounds
            key = (r["case"], r["lib"])
            by[key] = min(by.get(key, float("inf")), r["ms_per_image"])
    head = "| operator | " + " | ".join(f"{lib} ms an image" for lib in libs)
    both = "stoker" in libs and "dali" in libs
    head += " | dali / stoker |" if both else " |"
    lines = [head, "|" + " --- |" * (head.count("|") - 1)]
    for case in dict.fromkeys(r["case"] for r in rows):
        cells = [f"{by[(case, lib)]:.3f}" if (case, lib) in by else "error" for lib in libs]
        line = f"| {case} | " + " | ".join(cells) + " |"
        if both:
            s, d = by.get((case, "stoker")), by.get((case, "dali"))
            line += f" {d / s:.2f}x |" if s and d and s > 0 and d > 0 else " |"
        lines.append(line)
    return "\n".join(lines)


def main() -> None:
    sys.path.insert(0, HERE)
    import op_zoo

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--libs", default="stoker,dali")
    ap.add_argument("--ops", default="all")
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--iterations", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=1)
    a = ap.parse_args()
    ops = list(op_zoo.OPS) if a.ops == "all" else [o for o in a.ops.split(",") if o]
    rows = []
    for _ in range(a.rounds):
        for case in ops:
            for lib in a.libs.split(","):
                cmd = [sys.executable, __file__, "--child", lib, case, str(a.size), str(a.batch), str(a.threads),
                       str(a.iterations)]
                row = op_zoo.run_child(cmd, lib, case, timeout=300)
                rows.append(row)
                print(json.dumps(row), flush=True)
    print(table(rows), flush=True)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        _, _, lib, case, size, batch, threads, iterations = sys.argv
        print(json.dumps(child(lib, case, int(size), int(batch), int(threads), int(iterations))), flush=True)
        sys.exit(0)
    main()
