"""Where a GPU pipeline's time goes: per-stage and per-operator host time, and a sampling
profile of every thread (what each stage thread is doing or waiting for).

    python benchmarks/gpu_stage_profile.py DATA_DIR [--kinds train,val] [--seconds 4] [--profile] [--replay N]

Runs the standard training / validation pipelines of shared/bench/gpu_bench.py, or any
pipeline of ``op_zoo.PIPELINES`` by name (batch 256, 16 threads), for ``--seconds`` each after a warm-up and prints
images/s, milliseconds per batch of each executor stage and operator, and the
mixed decoder's own timers (hardware call, waits). ``--profile`` adds a
statistical profile: every 3 ms the innermost frame of each thread is counted,
grouped by thread (pool, stage threads, decoder thread, reader thread). The
sampler takes the GIL briefly, so its own run is a little slower. ``--replay N``
records the engines' next N calls and, once the pipeline is closed, makes them again
alone on a fresh decoder: data or contention?
Environment variables of stoker (STOKER_NVJPEG_HW, STOKER_CPU_DECODE_SHARE,
STOKER_NVJPEG_LANES, STOKER_READER_PROCESS, ...) apply as usual.
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import threading
import time

B = 256
MEAN = [0.485 * 255, 0.456 * 255, 0.406 * 255]
STD = [0.229 * 255, 0.224 * 255, 0.225 * 255]


def instrument(timers: collections.Counter) -> None:
    """Time the executor's stages and every operator run (host wall time)."""
    from stoker.pipeline import executor as ex

    for name in ("_run_cpu_stage", "_run_gpu_stage", "prepare_gpu_nodes"):
        orig = getattr(ex.Executor, name)

        def timed(self, it, *a, _orig=orig, _name=name):
            t = time.perf_counter()
            try:
                return _orig(self, it, *a)
            finally:
                timers[_name] += time.perf_counter() - t

        setattr(ex.Executor, name, timed)
    orig_node = ex.Executor.run_node

    def run_node(self, node, it, gpu):
        t = time.perf_counter()
        try:
            orig_node(self, node, it, gpu)
        finally:
            timers[("gpu:" if gpu else "cpu:") + node.op_name] += time.perf_counter() - t

    ex.Executor.run_node = run_node


class Sampler(threading.Thread):
    """Counts the innermost frame (and the innermost stoker frame) of every other thread."""

    def __init__(self, interval: float = 0.003):
        super().__init__(daemon=True)
        self.interval = interval
        self.stop = False
        self.counts: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)

    def run(self) -> None:
        me = threading.get_ident()
        while not self.stop:
            names = {t.ident: t.name for t in threading.enumerate()}
            for tid, frame in sys._current_frames().items():
                if tid == me:
                    continue
                name = names.get(tid, "?")
                group = "pool" if name.startswith("stoker-cpu_") else name.split("_")[0]
                inner = f"{frame.f_code.co_name} ({os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno})"
                ours, f = None, frame
                while f is not None and ours is None:
                    if "stoker" in f.f_code.co_filename:
                        ours = f"{f.f_code.co_name} ({os.path.basename(f.f_code.co_filename)}:{f.f_lineno})"
                    f = f.f_back
                self.counts[group][f"{inner} <= {ours or '-'}"] += 1
            time.sleep(self.interval)


def host_cpu() -> dict:
    """CPU seconds used so far: the whole machine ("machine"), each thread of this process by its
    Python name (pool threads together), and the helper processes together ("helpers")."""
    import psutil

    out: dict = collections.Counter()
    t = psutil.cpu_times()
    out["machine"] = sum(t) - t.idle - getattr(t, "iowait", 0.0)
    names = {th.native_id: th.name for th in threading.enumerate()}
    me = psutil.Process()
    for th in me.threads():
        name = names.get(th.id, "other")
        name = "pool" if name.startswith("stoker-cpu") else name.split("_")[0]
        out["thread " + name] += th.user_time + th.system_time
    for child in me.children(recursive=True):
        try:
            c = child.cpu_times()
            out["helpers"] += c.user + c.system
        except psutil.Error:
            pass
    return out


def print_timeline(trace) -> None:
    """Medians over the measured batches of the mixed decoder's timeline (ms): when the engines'
    call and the helper processes started and ended, relative to the batch's prepare (CPU stage)
    and to the moment its GPU stage began waiting for them (positive: the GPU stage waited)."""
    import numpy as np

    rows = [c for c in trace if "gpu_stage" in c]

    def med(a: str, b: str) -> str:
        vals = [c[a] - c[b] for c in rows if a in c and b in c]
        return f"{np.median(vals) * 1e3:.1f}" if vals else "-"

    if rows:
        print(f"   timeline (median ms): GPU stage waits {med('gpu_stage', 'prepare')} after prepare; "
              f"engines start {med('engines_start', 'prepare')} after prepare, run "
              f"{med('engines_end', 'engines_start')}, end {med('engines_end', 'gpu_stage')} after the GPU "
              f"stage waits; helpers start {med('helpers_start', 'sent')} after the send, run "
              f"{med('helpers_end', 'helpers_start')}, end {med('helpers_end', 'gpu_stage')} after the GPU stage "
              f"waits; inputs ready {med('inputs_ready', 'gpu_stage')} after", flush=True)


def record_engine_calls(keep: int):
    """Start keeping copies of the inputs of the engines' next ``keep`` calls (bitstreams, windows,
    padding); returns (the calls, a function that stops recording)."""
    import numpy as np

    from stoker.backend import nvjpeg

    calls: collections.deque = collections.deque(maxlen=keep)
    orig = nvjpeg.HardwareDecoder.stage

    def stage(self, datas, windows, fixed_batch=0, located=None):
        if type(self) is nvjpeg.HardwareDecoder:  # (not the hybrid backend's)
            calls.append(([np.array(d, copy=True) for d in datas],
                          np.array(windows, np.int64).reshape(len(datas), 4), fixed_batch))
        return orig(self, datas, windows, fixed_batch, located)

    nvjpeg.HardwareDecoder.stage = stage
    return calls, lambda: setattr(nvjpeg.HardwareDecoder, "stage", orig)


class _Beside:
    """Load run beside a replay, to tell which kind slows the engines' call in the pipeline:
    ``busy`` processes spinning on host cores (as the decode helpers keep them), and with
    ``gpu`` a thread copying 256 MiB device buffers back and forth on a stream of its own."""

    def __init__(self, busy: int, gpu: bool):
        self.busy, self.gpu, self.procs, self.thread, self.stop = busy, gpu, [], None, False

    def __enter__(self):
        import subprocess
        import sys
        import threading

        self.procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(self.busy)]
        if self.gpu:
            import cupy as cp

            def copy_loop():
                s = cp.cuda.Stream(non_blocking=True)
                with s:
                    a, b = cp.zeros(1 << 28, cp.uint8), cp.ones(1 << 28, cp.uint8)
                    while not self.stop:
                        a[...] = b
                        s.synchronize()

            self.thread = threading.Thread(target=copy_loop, daemon=True)
            self.thread.start()
        time.sleep(0.3)  # (the load up and running)
        return self

    def __exit__(self, *exc):
        self.stop = True
        for p in self.procs:
            p.kill()
            p.wait()
        if self.thread is not None:
            self.thread.join()

    def label(self) -> str:
        parts = ([f"{self.busy} busy processes"] if self.busy else []) + (["device copies"] if self.gpu else [])
        return "beside " + " and ".join(parts) if parts else "alone"


def replay_engine_calls(calls, busy: int = 0, gpu_load: bool = False) -> None:
    """The recorded calls again, one at a time on a fresh decoder, alone or beside a load
    (:class:`_Beside`): is nvJPEG's call slower in the pipeline because of its data or because of
    what runs beside it, and which part of that? Prints nvJPEG's own time per call (as
    ``mixed.hw_call_only_s``) and with the wait for the engines' end."""
    with _Beside(busy, gpu_load) as beside:
        _replay(calls, beside.label())


def _replay(calls, label: str) -> None:
    import cupy as cp
    import numpy as np

    from stoker.backend.nvjpeg import HardwareDecoder

    decoder = HardwareDecoder(0)
    stream = cp.cuda.Stream(non_blocking=True)
    call_only, to_end = [], []
    for datas, windows, fixed in calls:
        sizes = windows[:, 2] * windows[:, 3] * 3
        offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        with stream:
            buf = cp.empty(max(int(sizes.sum()), 1), cp.uint8)
        for rep in range(3):  # the first call of a batch size initializes nvJPEG's state
            call = decoder.stage(datas, windows, fixed)
            if call.copied is not None:
                call.copied.result()  # (the staging copy is not what is timed)
            t = time.perf_counter()
            decoder.run(call, buf.data.ptr + offsets, stream)
            stream.synchronize()
            if rep:
                call_only.append(decoder.last_run[2])
                to_end.append(time.perf_counter() - t)
    decoder.close()
    if call_only:
        images = np.mean([len(d) for d, _, _ in calls])
        print(f"   replayed {label}: {len(calls)} calls of {images:.0f} images (padded to {calls[0][2]}): "
              f"nvJPEG's call {np.median(call_only) * 1e3:.1f} ms, to the engines' end "
              f"{np.median(to_end) * 1e3:.1f} ms (medians)", flush=True)


def build(kind: str, root: str):
    import stoker.fn as fn
    import stoker.types as types
    from stoker import pipeline_def

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import op_zoo

    @pipeline_def(batch_size=B, num_threads=16, device_id=0, seed=1, enable_conditionals=kind in op_zoo.CONDITIONAL)
    def pipe():
        if kind not in ("train", "val"):  # a pipeline of benchmarks/op_zoo.py
            return {**op_zoo.PIPELINES, **op_zoo.PROBES}[kind](fn, types, root)
        jpegs, labels = fn.readers.file(file_root=root, random_shuffle=(kind == "train"), name="r")
        if kind == "train":
            images = fn.decoders.image_random_crop(jpegs, device="mixed", output_type=types.RGB)
            images = fn.resize(images, resize_x=224, resize_y=224)
            images = fn.crop_mirror_normalize(images, dtype=types.FLOAT, output_layout="CHW", mean=MEAN, std=STD,
                                              mirror=fn.random.coin_flip())
        else:
            images = fn.decoders.image(jpegs, device="mixed", output_type=types.RGB)
            images = fn.resize(images, resize_shorter=256)
            images = fn.crop_mirror_normalize(images, crop=(224, 224), dtype=types.FLOAT, output_layout="CHW",
                                              mean=MEAN, std=STD)
        return images, labels.gpu()

    p = pipe()
    p.build()
    return p


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("root")
    ap.add_argument("--kinds", default="train,val")
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--replay", type=int, default=0,
                    help="record the engines' next N calls after the measurement and time them again alone")
    ap.add_argument("--replay-beside", default="",
                    help="also replay beside loads: comma-separated BUSY[+gpu] items, e.g. '8,16,0+gpu' "
                         "(BUSY spinning host processes; +gpu: device copies on another stream)")
    a = ap.parse_args()
    timers: collections.Counter = collections.Counter()
    instrument(timers)
    for kind in a.kinds.split(","):
        pipe = build(kind, a.root)
        for _ in range(4):
            pipe.run()
        timers.clear()
        decoder = next(i for i in pipe._graph.instances.values() if hasattr(i, "_mixed_state"))
        stats = decoder._mixed_state.stats  # (stoker.operators.decoders.mixed.stats.DecodeStats)
        stats.clear()
        cpu0 = host_cpu()
        t0, n = time.perf_counter(), 0
        while time.perf_counter() - t0 < a.seconds:
            pipe.run()
            n += B
        dt = time.perf_counter() - t0
        cpu1 = host_cpu()
        batches = n // B
        print(f"== {kind}: {n / dt:.0f} img/s, {dt / batches * 1e3:.1f} ms/batch", flush=True)
        for k, v in sorted(timers.items()):
            print(f"   {k}: {v / batches * 1e3:.1f} ms/batch")
        timing = stats.timing
        for k, v in sorted(timing.items()):
            if k.endswith("_images"):  # counts: images per batch
                print(f"   mixed.{k}: {v / max(timing['batches'], 1):.1f} per batch")
            elif k != "batches":
                print(f"   mixed.{k}: {v / max(timing['batches'], 1) * 1e3:.1f} ms/batch")
        print_timeline(stats.trace)
        print("   host cores busy: " + ", ".join(f"{k} {(cpu1[k] - cpu0.get(k, 0.0)) / dt:.2f}"
                                              for k in sorted(cpu1, key=lambda k: -(cpu1[k] - cpu0.get(k, 0.0)))
                                              if cpu1[k] - cpu0.get(k, 0.0) > 0.02 * dt), flush=True)
        if a.profile:
            sampler = Sampler()
            sampler.start()
            t0 = time.perf_counter()
            while time.perf_counter() - t0 < a.seconds:
                pipe.run()
            sampler.stop = True
            sampler.join()
            for group, counts in sampler.counts.items():
                total = sum(counts.values())
                print(f"  -- thread {group}: {total} samples")
                for k, v in counts.most_common(8):
                    print(f"     {100 * v / total:5.1f}% {k}")
        calls = None
        if a.replay:
            calls, stop = record_engine_calls(a.replay)
            for _ in range(a.replay + 2):  # (the decoder stages up to two batches ahead)
                pipe.run()
            stop()
        pipe.close()
        if calls:
            replay_engine_calls(list(calls))
            for item in filter(None, a.replay_beside.split(",")):
                count, _, gpu = item.partition("+")
                replay_engine_calls(list(calls), busy=int(count or 0), gpu_load=gpu == "gpu")


if __name__ == "__main__":
    main()
