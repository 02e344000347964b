"""Per-operator and whole-pipeline GPU throughput, stoker and DALI side by side in one run.

    python benchmarks/gpu_op_table.py DATA_DIR [--libs stoker,dali] [--ops all|rotate,hsv,...]
        [--pipelines augmented,detection] [--seconds 4] [--threads 16] [--batch 256] [--rounds 1]
        [--old-tree PATH] [--variant NAME:KEY=VALUE[,KEY=VALUE...]] [--baseline-every K]

``--old-tree`` adds the library "stoker-old" (give it in ``--libs``): stoker imported from PATH
(another checkout), to compare two versions of stoker beside DALI in one run. ``--variant`` (may be
repeated) adds the library NAME: stoker run with those environment variables (a setting's A/B, e.g.
``--variant si05:STOKER_SWITCH_INTERVAL=0.00005 --libs stoker,si05,dali``).

Operator table: reader -> mixed decode with random crop -> resize 256x256 -> the operator
(``benchmarks/op_zoo.py``, random arguments as a user writes them) -> crop 224, one pipeline per
process, libraries interleaved for each operator. The baseline has no operator; an operator's
added cost is ``batch / img_s - batch / baseline img_s`` in ms per batch. With ``--baseline-every
K`` the baseline runs again after every K operators, and each operator is measured against the mean
of the baselines just before and after it in its round (a machine's speed drifts over a long run:
one baseline at the start misjudged operators measured minutes later). For stoker, the host
time each operator takes (wall time in ``run_gpu`` / ``run_cpu``; the stages share one GIL) is
reported as ``host_ms``. Pipelines: the zoo's whole pipelines.
Each child prints one JSON line; the parent prints them and a Markdown table at the end.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def parse_variant(text: str) -> tuple[str, dict]:
    """``NAME:KEY=VALUE,KEY=VALUE`` -> (NAME, {KEY: VALUE}); NAME must start with "stoker" or be
    free of the other libraries' names, and every pair needs a ``=``."""
    name, sep, pairs = text.partition(":")
    if not sep or not name or name in ("stoker", "stoker-old", "dali"):
        raise ValueError(f"--variant {text!r}: expected NAME:KEY=VALUE[,KEY=VALUE...] with a new NAME")
    env = {}
    for pair in pairs.split(","):
        key, eq, value = pair.partition("=")
        if not eq or not key:
            raise ValueError(f"--variant {text!r}: {pair!r} is not KEY=VALUE")
        env[key] = value
    return name, env


def is_stoker(lib: str) -> bool:
    """stoker itself, another checkout of it (stoker-old) or a variant: anything but DALI."""
    return lib != "dali"


def _modules(lib: str):
    if is_stoker(lib):  # (stoker-old: PYTHONPATH puts the other checkout first; variants: their env)
        import stoker.fn as fn
        import stoker.types as types
        from stoker import pipeline_def
    else:
        import nvidia.dali.fn as fn
        import nvidia.dali.types as types
        from nvidia.dali import pipeline_def
    return fn, types, pipeline_def


def _instrument(timers: collections.Counter) -> None:
    """stoker only: host wall time of each operator run, by operator name ("cpu:" for the CPU
    stage's, whose fused per-sample chains count as "cpu:fused"), and of the GPU nodes' host
    halves prepared in the CPU stage ("prepare:")."""
    from stoker.pipeline import executor as ex
    from stoker.pipeline import fusion

    def timed(fn, key_of):
        def wrapper(*a, **kw):
            t = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                timers[key_of(*a, **kw)] += time.perf_counter() - t
        return wrapper

    # (hooks an older checkout lacks, run as stoker-old, are left alone: it runs untimed there)
    for owner, name, key_of in [
            (ex.Executor, "run_node", lambda self, node, it, gpu: node.op_name if gpu else "cpu:" + node.op_name),
            (ex.Executor, "prepare_gpu_nodes", lambda self, it: "prepare:gpu nodes"),
            (fusion, "run_fused", lambda ex_, step, it: "cpu:fused")]:
        if hasattr(owner, name):
            setattr(owner, name, timed(getattr(owner, name), key_of))


def make_pipeline(lib: str, root: str, case: str, threads: int, batch: int):
    """The pipeline object (not built) of ``case``: an operator's name, "baseline" or "pipeline:NAME"."""
    sys.path.insert(0, HERE)
    import op_zoo

    fn, types, pipeline_def = _modules(lib)
    conditional = case.split(":", 1)[-1] in op_zoo.CONDITIONAL

    @pipeline_def(batch_size=batch, num_threads=threads, device_id=0, seed=1, enable_conditionals=conditional)
    def pipe():
        return op_zoo.case_builder(case)(fn, types, root)

    return pipe()


def child(lib: str, root: str, case: str, seconds: float, threads: int, batch: int) -> dict:
    _modules(lib)  # (the imports stay out of first_batch_s)
    sys.path.insert(0, HERE)
    import op_zoo  # noqa: F401

    timers: collections.Counter = collections.Counter()
    if is_stoker(lib):
        _instrument(timers)
    import cupy as cp

    free0, _ = cp.cuda.runtime.memGetInfo()
    t0 = time.perf_counter()
    p = make_pipeline(lib, root, case, threads, batch)
    p.build()
    p.run()
    first = time.perf_counter() - t0
    for _ in range(3):
        p.run()
    cp.cuda.runtime.deviceSynchronize()
    timers.clear()
    n, t1 = 0, time.perf_counter()
    while time.perf_counter() - t1 < seconds:
        p.run()
        n += 1
    cp.cuda.runtime.deviceSynchronize()
    dt = time.perf_counter() - t1
    free1, _ = cp.cuda.runtime.memGetInfo()
    row = {"lib": lib, "case": case, "img_s": round(n * batch / dt), "first_batch_s": round(first, 2),
           "gpu_mem_mib": round((free0 - free1) / 2**20)}
    if timers:
        row["host_ms"] = {k: round(v / n * 1e3, 2) for k, v in timers.most_common()}
    return row


def _table(rows: list, batch: int) -> str:
    order = ["stoker", "stoker-old", "dali"]
    libs = sorted({r["lib"] for r in rows}, key=lambda s: order.index(s) if s in order else len(order))
    versus = [lib for lib in libs if lib != "dali"] if "dali" in libs else []
    by = collections.defaultdict(list)
    mem = {}
    for r in rows:
        if "img_s" in r:
            by[(r["case"], r["lib"])].append(r["img_s"])
            mem[(r["case"], r["lib"])] = r.get("gpu_mem_mib")
    best = {k: max(v) for k, v in by.items()}
    added_of = added_costs(rows, batch)
    head = "| case | " + " | ".join(f"{lib} img/s | {lib} added ms | {lib} MiB" for lib in libs)
    head += "".join(f" | {lib} / dali" for lib in versus) + " |"
    lines = [head, "|" + " --- |" * (head.count("|") - 1)]
    for case in dict.fromkeys(r["case"] for r in rows):
        cells = []
        for lib in libs:
            v = best.get((case, lib))
            cost = added_of.get((case, lib))
            added = "" if cost is None or case.startswith("pipeline:") else f"{cost:+.2f}"
            cells += [f"{v:,}" if v else "error", added, str(mem.get((case, lib), ""))]
        ratio = ""
        for lib in versus:
            a, b = best.get((case, lib)), best.get((case, "dali"))
            ratio += f" {a / b:.2f}x |" if a and b else " |"
        lines.append(f"| {case} | " + " | ".join(cells) + " |" + ratio)
    return "\n".join(lines)


def added_costs(rows: list, batch: int) -> dict:
    """(case, lib) -> ms per batch the case adds to its baseline, from the row with the case's best
    img/s: against the mean of the lib's baselines just before and after that row in its round
    (rows carry ``round`` and ``seq``, their place in the round), or, for rows without them, against
    the lib's best baseline."""
    base_rows = collections.defaultdict(list)  # (lib, round) -> [(seq, img_s)]
    for r in rows:
        if r.get("case") == "baseline" and "img_s" in r:
            base_rows[(r["lib"], r.get("round"))].append((r.get("seq", 0), r["img_s"]))
    best_base: dict = {}
    for (lib, _), pts in base_rows.items():
        best_base[lib] = max(best_base.get(lib, 0), max(v for _, v in pts))
    chosen = {}
    for r in rows:
        if "img_s" not in r or r.get("case") == "baseline":
            continue
        key = (r["case"], r["lib"])
        if key not in chosen or r["img_s"] > chosen[key]["img_s"]:
            chosen[key] = r
    out = {("baseline", lib): 0.0 for lib in best_base}
    for key, r in chosen.items():
        pts = base_rows.get((r["lib"], r.get("round")), [])
        if "seq" in r and pts:
            before = [v for q, v in pts if q < r["seq"]]
            after = [v for q, v in pts if q > r["seq"]]
            near = [x for x in (before[-1] if before else None, after[0] if after else None) if x]
            base = sum(near) / len(near)
        else:
            base = best_base.get(r["lib"])
        if base:
            out[key] = batch * 1e3 / r["img_s"] - batch * 1e3 / base
    return out


def case_order(ops: list, pipelines: list, every: int) -> list:
    """The cases of one round: the baseline, the operators (the baseline again after every
    ``every`` of them and at their end, when ``every`` > 0), then the pipelines."""
    cases = ["baseline"]
    for k, op in enumerate(ops, 1):
        cases.append(op)
        if every > 0 and (k % every == 0 or k == len(ops)):
            cases.append("baseline")
    return cases + [f"pipeline:{p}" for p in pipelines]


def main() -> None:
    sys.path.insert(0, HERE)
    import op_zoo

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("root")
    ap.add_argument("--libs", default="stoker,dali")
    ap.add_argument("--ops", default="all")
    ap.add_argument("--pipelines", default=",".join(op_zoo.PIPELINES))
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--threads", type=int, default=16)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--old-tree", default=None, help="a checkout of stoker to run as the library 'stoker-old'")
    ap.add_argument("--baseline-every", type=int, default=0,
                    help="run the baseline again after every K operators (0: once, first)")
    ap.add_argument("--variant", action="append", default=[],
                    help="NAME:KEY=VALUE,...: stoker with these environment variables, as the library NAME")
    a = ap.parse_args()
    variants = {}
    for text in a.variant:
        name, extra = parse_variant(text)
        variants[name] = dict(os.environ, **extra)
    old_env = None
    if a.old_tree:
        old_env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.abspath(a.old_tree),
                                                               os.environ.get("PYTHONPATH", "")]))
    ops = list(op_zoo.OPS) if a.ops == "all" else [o for o in a.ops.split(",") if o]
    cases = case_order(ops, [p for p in a.pipelines.split(",") if p], a.baseline_every)
    rows = []
    for rnd in range(a.rounds):
        for seq, case in enumerate(cases):
            for lib in a.libs.split(","):
                cmd = [sys.executable, __file__, "--child", lib, a.root, case, str(a.seconds), str(a.threads),
                       str(a.batch)]
                env = variants.get(lib) or (old_env if lib == "stoker-old" else None)
                if lib == "stoker-old" and env is None:
                    raise SystemExit("--libs names stoker-old: give --old-tree")
                row = op_zoo.run_child(cmd, lib, case, timeout=180, env=env)
                row.update(round=rnd, seq=seq)
                rows.append(row)
                print(json.dumps(row), flush=True)
    print(_table(rows, a.batch), flush=True)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        _, _, lib, root, case, seconds, threads, batch = sys.argv
        print(json.dumps(child(lib, root, case, float(seconds), int(threads), int(batch))), flush=True)
        sys.exit(0)
    main()
