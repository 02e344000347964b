"""num_threads="auto" / prefetch_queue_depth="auto" against every fixed candidate, same run.

    python benchmarks/auto_tuning.py DATA_DIR [--device cpu|gpu] [--batch 64] [--seconds 10] [--rounds 2]

Pipelines: ``--device cpu``: benchmarks/cpu_pipeline.py's train and val (file reader, CPU decode,
resize, crop_mirror_normalize); ``--device gpu`` (device_id=0): op_zoo.py's ``decode_resize``
(reader, mixed decode with random crop, resize 256) + its ``crop_mirror_normalize`` case, as
``train``, and the same without shuffling as ``val``.
For each pipeline and round, every configuration runs in a subprocess of its own, one after the
other: "auto" (both settings "auto"), then each fixed (num_threads, prefetch_queue_depth) among the
tuning's candidates (stoker.pipeline.tuning.thread_candidates x depths 2 and 3). Each prints one
JSON line: images/s measured for ``--seconds`` after three warm-up batches (and, with chain worker
processes, once they have started, as cpu_pipeline.py does), the build time, and for "auto" what
tuning() chose. At the end, per pipeline: the median over rounds of each configuration, and
auto / best fixed (the requirement: >= 0.95) and auto / the fixed run of the setting auto chose.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def build(root: str, device: str, kind: str, batch: int, threads, depth):
    import stoker.fn as fn
    import stoker.types as types
    from stoker import pipeline_def

    device_id = 0 if device == "gpu" else None

    @pipeline_def(batch_size=batch, num_threads=threads, prefetch_queue_depth=depth, device_id=device_id, seed=1)
    def cpu_pipe():
        sys.path.insert(0, HERE)
        from cpu_pipeline import cpu_graph

        return cpu_graph(fn, types, root, kind)

    @pipeline_def(batch_size=batch, num_threads=threads, prefetch_queue_depth=depth, device_id=device_id, seed=1)
    def gpu_pipe(shuffle):
        sys.path.insert(0, HERE)
        import op_zoo

        x, labels = op_zoo.decode_resize(fn, types, root, shuffle=shuffle)
        return op_zoo.OPS["crop_mirror_normalize"](fn, types, x), labels

    if device == "gpu":
        pipe = gpu_pipe(kind == "train")
    else:
        pipe = cpu_pipe()
    pipe.build()
    return pipe


def workers_ready(pipe) -> bool | None:
    workers = getattr(getattr(pipe, "_executor", None), "_chain_workers", None)
    return None if workers is None else workers.ready()


def child(root: str, device: str, kind: str, batch: int, threads: str, depth: str, seconds: float) -> None:
    t0 = time.perf_counter()
    pipe = build(root, device, kind, batch, threads if threads == "auto" else int(threads),
                 depth if depth == "auto" else int(depth))
    built = time.perf_counter() - t0

    def step():
        return pipe.run()

    for _ in range(3):
        step()
    while workers_ready(pipe) is False and time.perf_counter() - t0 < 90:
        step()
    n, t1 = 0, time.perf_counter()
    while time.perf_counter() - t1 < seconds:
        step()
        n += batch
    if device == "gpu":
        step()[0].as_cpu()  # wait for the last batch's GPU work (as gpu_pipeline.py)
        n += batch
    rate = n / (time.perf_counter() - t1)
    report = pipe.tuning()
    print(json.dumps({"pipeline": kind, "config": "auto" if threads == "auto" else f"{threads}/{depth}",
                      "num_threads": pipe.num_threads, "prefetch_queue_depth": pipe.prefetch_queue_depth,
                      "img_s": round(rate, 1), "build_s": round(built, 2), "tuning_s": report["seconds"],
                      "why": report["why"], "candidates": report["candidates"] if threads == "auto" else None,
                      "load_avg_1min": round(os.getloadavg()[0], 2)}), flush=True)
    os._exit(0)  # skip slow teardown of helper processes


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        _, _, root, device, kind, batch, threads, depth, seconds = sys.argv
        child(root, device, kind, int(batch), threads, depth, float(seconds))
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("root", help="DATA_DIR: class folders of JPEGs")
    ap.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    ap.add_argument("--pipelines", default="train,val")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    sys.path.insert(0, os.path.dirname(HERE))
    from stoker.pipeline.tuning import _DEPTHS, thread_candidates, usable_cores

    fixed = [(t, d) for t in thread_candidates(a.device == "gpu") for d in _DEPTHS]
    configs = [("auto", "auto")] + [(str(t), str(d)) for t, d in fixed]
    print(f"# {usable_cores()} usable cores, device {a.device}, batch {a.batch}, {a.seconds:g} s per run, "
          f"configurations {[f'{t}/{d}' for t, d in configs]}", flush=True)
    results = []
    for rnd in range(a.rounds):
        for kind in a.pipelines.split(","):
            for threads, depth in configs:
                cmd = [sys.executable, __file__, "--child", a.root, a.device, kind, str(a.batch), threads, depth,
                       str(a.seconds)]
                p = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
                lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
                res = json.loads(lines[-1]) if lines else {"pipeline": kind, "config": f"{threads}/{depth}",
                                                           "error": p.stderr.strip()[-600:]}
                res["round"] = rnd + 1
                results.append(res)
                print(json.dumps(res), flush=True)
    for kind in a.pipelines.split(","):
        done = [r for r in results if r["pipeline"] == kind and "img_s" in r]
        medians = {c: statistics.median(r["img_s"] for r in done if r["config"] == c)
                   for c in dict.fromkeys(r["config"] for r in done)}
        if "auto" not in medians or len(medians) < 2:
            print(f"{kind}: not enough results")
            continue
        auto = medians.pop("auto")
        best = max(medians, key=medians.get)
        chosen = [f"{r['num_threads']}/{r['prefetch_queue_depth']}" for r in done if r["config"] == "auto"]
        print(f"{kind}: auto {auto:.1f} img/s (chose {', '.join(chosen)}); fixed: "
              + ", ".join(f"{c} {v:.1f} (auto/this {auto / v:.3f})" for c, v in medians.items()))
        print(f"{kind}: auto / best fixed ({best}) = {auto / medians[best]:.3f}")


if __name__ == "__main__":
    main()
