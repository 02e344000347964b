"""Where a GPU pipeline's first batch goes: the time of each phase (import, pipeline object,
build, first run) and a profile of the main thread over them.

    python benchmarks/first_batch_profile.py DATA_DIR [--case baseline|rotate|pipeline:ssd|...] [--top 25]

Run it twice: the second process finds CuPy's kernel cache filled, as a user's second run does
(issue 16 asks for a first batch within 1.0 s then). The case is one of ``gpu_op_table.py``'s
(an operator, or ``pipeline:NAME``).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("root")
    ap.add_argument("--case", default="baseline")
    ap.add_argument("--threads", type=int, default=16)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--callers", default="cupyx/__init__,numpy/__init__.py:[0-9]+.__getattr__",
                    help="comma-separated regexes: who called the functions they match (lazy imports)")
    a = ap.parse_args()
    times = {}
    prof = cProfile.Profile()
    t = time.perf_counter()
    prof.enable()
    import stoker.fn as fn
    import stoker.types as types
    from stoker import pipeline_def

    sys.path.insert(0, HERE)
    import op_zoo

    times["import_s"] = time.perf_counter() - t

    whole = a.case.split(":", 1)[1] if a.case.startswith("pipeline:") else None

    @pipeline_def(batch_size=a.batch, num_threads=a.threads, device_id=0, seed=1,
                  enable_conditionals=whole in op_zoo.CONDITIONAL)
    def pipe():
        return op_zoo.case_builder(a.case)(fn, types, a.root)

    before = set(sys.modules)
    t = time.perf_counter()
    p = pipe()
    times["construct_s"] = time.perf_counter() - t
    t = time.perf_counter()
    p.build()
    times["build_s"] = time.perf_counter() - t
    t = time.perf_counter()
    out = p.run()
    out[0].as_tensor()  # the batch itself, ready on the device
    times["first_run_s"] = time.perf_counter() - t
    prof.disable()
    times["first_batch_s"] = times["construct_s"] + times["build_s"] + times["first_run_s"]
    print(json.dumps({k: round(v, 3) for k, v in times.items()}), flush=True)
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats("cumulative").print_stats(a.top)
    print(s.getvalue()[-6000:])
    print("modules imported from the pipeline object to the first batch, by package:",
          json.dumps(imported_packages(before, set(sys.modules))))
    for pattern in filter(None, a.callers.split(",")):
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("cumulative").print_callers(pattern)
        print(s.getvalue()[-3000:])
    p.close()


def imported_packages(before: set, after: set) -> dict:
    """Top-level package -> how many of its modules were imported between two ``sys.modules``
    snapshots, most first."""
    counts: dict = {}
    for name in after - before:
        top = name.split(".")[0]
        counts[top] = counts.get(top, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: -kv[1]))


if __name__ == "__main__":
    main()
