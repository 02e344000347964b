"""``stoker bench``: run a user's pipeline for a while and say what limits it.

It loads the ``@pipeline_def`` function of a file (as ``stoker show`` does), builds it, times the
first batch, warms up, then runs it for ``--seconds`` while measuring:

* samples/s, and the batches' host time per stage and per operator, through the executor's
  timing hook (``Executor.timer``, off unless set; :class:`NodeTimer` is the hook);
* the CPU cores busy: CPU time of this process and its helper processes over wall time;
* the GPU's utilisation when the pipeline uses one (NVML through ``pynvml`` when importable,
  else CUDA events around the GPU stage's work on its stream).

The report ends with a verdict (:func:`verdict`) naming the limit: I/O (the reader), decode, one
operator, the host (the Python side: GIL, CPU stage) or the GPU. ``--compare`` runs the same
file with DALI, or a torchvision DataLoader, in a subprocess (``stoker._cli_bench_compare``).
"""

from __future__ import annotations

import collections
import os
import threading
import time
from dataclasses import dataclass, field

from stoker import settings
from stoker._cli_pipeline import CLIError, gpu_nodes, load_pipeline

# Shares of wall time above which a stage or an item counts as the limit (see verdict()).
BUSY = 0.5
DOMINANT = 0.35
GPU_BUSY = 0.85


def _label(node) -> str:
    """An operator's name as the user wrote it, with the instance name when they gave one."""
    name = node.args.get("name") if hasattr(node, "args") else None
    return f"{node.op_name} ({name})" if name else node.op_name


class NodeTimer:
    """The executor's timing hook: host wall time per (kind, item), exclusive of nested items.

    ``Executor.timer = NodeTimer()`` makes every stage run, source advance, operator run and fused
    chain call ``timer(kind, what)``; a fused chain's time excludes the operators it runs on their
    own (its hoisted and deferred nodes), and a stage's *inclusive* time is kept apart in
    :attr:`stages`. Stages run on their own threads, so the nesting is tracked per thread.
    ``stream`` (a CuPy stream) makes the GPU stage record CUDA events for :meth:`gpu_busy_s`.
    """

    def __init__(self, stream=None):
        self.exclusive: collections.Counter = collections.Counter()  # (kind, label, node id) -> s
        self.stages: collections.Counter = collections.Counter()  # "cpu"/"gpu"/"gpu ops"/"consumer" -> s
        self.stream = stream
        self.events: list = []
        self._local = threading.local()
        self._lock = threading.Lock()
        self._generation = 0  # reset() discards spans that started before it

    def reset(self) -> None:
        """Forget everything measured so far (the warm-up)."""
        with self._lock:
            self.exclusive.clear()
            self.stages.clear()
            self.events = []
            self._generation += 1

    def __call__(self, kind: str, what):
        return _Span(self, kind, what)

    def _key(self, kind: str, what) -> tuple:
        if kind in ("stage", "wait"):
            return (kind, what, None)
        if kind == "fused":
            return (kind, " -> ".join(_label(n) for n in what.chain), tuple(n.id for n in what.chain))
        return (kind, _label(what), what.id)

    def gpu_busy_s(self) -> float | None:
        """Seconds the GPU stream spent on the GPU stage's batches (CUDA events; an upper bound:
        a gap inside one batch's work counts as busy). The spans of a GPU stage split over two
        threads overlap, so their union is counted. None without events."""
        if not self.events:
            return None
        import cupy as cp

        first = self.events[0][0]
        spans = []
        for start, end in self.events:
            end.synchronize()
            spans.append((cp.cuda.get_elapsed_time(first, start), cp.cuda.get_elapsed_time(first, end)))
        total, reach = 0.0, float("-inf")
        for a, b in sorted(spans):
            if b > reach:
                total += b - max(a, reach)
                reach = b
        return total / 1e3


class _Span:
    __slots__ = ("timer", "kind", "what", "start", "inner", "generation", "event")

    def __init__(self, timer: NodeTimer, kind: str, what):
        self.timer, self.kind, self.what = timer, kind, what

    def __enter__(self):
        stack = getattr(self.timer._local, "stack", None)
        if stack is None:
            stack = self.timer._local.stack = []
        stack.append(self)
        self.inner = 0.0
        self.generation = self.timer._generation
        self.event = None
        if self.kind == "stage" and self.what in ("gpu", "gpu ops") and self.timer.stream is not None:
            import cupy as cp

            self.event = cp.cuda.Event()
            self.event.record(self.timer.stream)
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc):
        elapsed = time.perf_counter() - self.start
        t = self.timer
        stack = t._local.stack
        stack.pop()
        if stack:
            stack[-1].inner += elapsed
        if self.generation != t._generation:
            return False
        with t._lock:
            if self.kind in ("stage", "wait"):
                t.stages[self.what] += elapsed
            if self.kind == "stage":  # (a stage's own time outside its items is its overhead)
                t.exclusive[("overhead", f"{self.what} stage bookkeeping", None)] += elapsed - self.inner
            elif self.kind != "wait":
                t.exclusive[t._key(self.kind, self.what)] += elapsed - self.inner
            if self.event is not None:
                import cupy as cp

                end = cp.cuda.Event()
                end.record(t.stream)
                t.events.append((self.event, end))
        return False


def cpu_seconds() -> float:
    """CPU time (user + system) of this process, its finished children and, on Linux, its live
    children (the chain worker and helper processes run the whole time)."""
    own = os.times()
    total = own.user + own.system + own.children_user + own.children_system
    me = str(os.getpid())
    try:
        ticks = os.sysconf("SC_CLK_TCK")
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue  # (it ended meanwhile)
            if fields[1] == me:  # ppid; utime and stime follow at 11 and 12
                total += (int(fields[11]) + int(fields[12])) / ticks
    except (OSError, ValueError):
        pass  # no /proc: finished children only
    return total


class GpuSampler:
    """The GPU's utilisation over a measurement, from NVML (``pynvml``, as ``nvidia-ml-py``
    installs it) sampled every 50 ms. ``method`` says where the figure came from; None when
    NVML is not importable or fails (the caller falls back to CUDA events)."""

    def __init__(self, device_id: int):
        self.method = None
        self._samples: list = []
        self._stop = threading.Event()
        self._thread = None
        try:
            import pynvml

            pynvml.nvmlInit()
            # NVML counts all GPUs; CUDA_VISIBLE_DEVICES renumbers them for CUDA.
            visible = settings.external_env("CUDA_VISIBLE_DEVICES", "").split(",")
            index = int(visible[device_id]) if visible[0].strip().isdigit() and device_id < len(visible) \
                else device_id
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            self._nvml = pynvml
            self.method = "NVML"
        except Exception:  # noqa: BLE001 - not installed, no driver, or another numbering: fall back
            self._nvml = None

    def start(self) -> None:
        if self._nvml is None:
            return

        def sample():
            while not self._stop.wait(0.05):
                try:
                    self._samples.append(self._nvml.nvmlDeviceGetUtilizationRates(self._handle).gpu)
                except Exception:  # noqa: BLE001 - a failed read leaves a gap
                    pass

        self._thread = threading.Thread(target=sample, name="stoker-bench-nvml", daemon=True)
        self._thread.start()

    def stop(self) -> float | None:
        """Mean utilisation (0-1) since start(), or None."""
        if self._thread is None:
            return None
        self._stop.set()
        self._thread.join()
        return sum(self._samples) / len(self._samples) / 100 if self._samples else None


@dataclass
class Measurement:
    """What one ``stoker bench`` run measured (times in seconds)."""

    function: str
    device: str  # "cpu" or "gpu"
    batch_size: int
    num_threads: int
    first_batch_s: float
    wall_s: float
    batches: int
    samples: int
    cpu_s: float
    consumer_wait_s: float  # time the benchmark loop spent inside run()
    stages: dict  # "cpu", "gpu", "gpu ops" (a split GPU stage), "consumer" -> busy seconds
    items: dict  # (kind, label, node id) -> exclusive seconds
    readers: set = field(default_factory=set)  # node ids of the sources (readers, external sources)
    gpu_util: float | None = None
    gpu_method: str = ""

    @property
    def rate(self) -> float:
        return self.samples / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def cores(self) -> float:
        return self.cpu_s / self.wall_s if self.wall_s > 0 else 0.0

    def ms_per_batch(self, seconds: float) -> float:
        return seconds * 1e3 / max(1, self.batches)


def category(m: Measurement, key: tuple) -> str:
    """What an item of the timing table is: "reader", "decode", "operator" or "overhead"."""
    kind, label, ids = key
    if kind == "overhead":
        return "overhead"
    if kind == "source" or (isinstance(ids, int) and ids in m.readers):
        return "reader"
    names = label.split(" -> ")
    if any(n.startswith("decoders.") or n.startswith("image_decoder") for n in names):
        return "decode"
    return "operator"


def verdict(m: Measurement) -> str:
    """One plain sentence (or two) naming what limits the pipeline, from the measurement."""
    ms = m.wall_s * 1e3 / max(1, m.batches)  # wall ms per batch
    if m.device == "gpu" and m.gpu_util is not None and m.gpu_util >= GPU_BUSY:
        return (f"Limited by the GPU: it was busy {m.gpu_util:.0%} of the time ({m.gpu_method}). Lighter GPU "
                f"operators, a smaller output or a faster card would help; the host keeps up.")
    by_cat: collections.Counter = collections.Counter()
    for key, s in m.items.items():
        by_cat[category(m, key)] += s
    reader_s = by_cat["reader"]
    # The busiest stage sets the pace; the consumer's own work is not part of the pipeline.
    stage = max(("cpu", "gpu", "gpu ops"), key=lambda k: m.stages.get(k, 0.0))
    busy = m.stages.get(stage, 0.0) / m.wall_s if m.wall_s else 0.0
    items = [(s, key) for key, s in m.items.items() if category(m, key) != "overhead"]
    if m.wall_s and reader_s / m.wall_s >= DOMINANT:
        top = max((k for k in m.items if category(m, k) == "reader"), key=lambda k: m.items[k])
        return (f"Limited by I/O / the reader: {top[1]} takes {m.ms_per_batch(reader_s):.1f} ms of the "
                f"{ms:.1f} ms per batch ({reader_s / m.wall_s:.0%} of the time). Faster storage, more readers "
                f"(shards) or a larger prefetch_queue_depth would help; the operators after it wait for data.")
    if busy < BUSY:
        return (f"Limited by the host (GIL / CPU stage): no stage is busy more than {busy:.0%} of the time, so "
                f"the time goes to Python between the stages and in the consumer; {m.cores:.1f} cores busy.")
    if items:
        s, key = max(items)
        share = s / m.wall_s
        if share >= DOMINANT:
            cat = category(m, key)
            what = f"{m.ms_per_batch(s):.1f} ms of the {ms:.1f} ms per batch ({share:.0%} of the time)"
            chain = "the fused chain " if key[0] == "fused" else ""
            if cat == "decode":
                hint = "decoding on the GPU (device='mixed')" if m.device == "cpu" else "smaller images"
                return (f"Limited by decode: {chain}{key[1]} takes {what}. {hint[0].upper() + hint[1:]}, or "
                        f"more num_threads ({m.cores:.1f} cores busy now), would help.")
            hint = ("it uses little CPU, so it waits on something (sleep, I/O, a lock)" if m.cores < 0.5 else
                    "more num_threads would spread its samples over more cores"
                    if m.cores < m.num_threads * 0.6 else "a cheaper setting or its GPU version would help")
            return f"Limited by the operator {chain}{key[1]}: it takes {what}; {hint}."
    return (f"Limited by the host (GIL / CPU stage): the {stage.upper()} stage is busy {busy:.0%} of the time "
            f"but no operator takes more than {DOMINANT:.0%} of it; {m.cores:.1f} cores busy of "
            f"{m.num_threads} threads, so Python's per-operator work (the GIL) is the limit.")


def _gpu_problem() -> str | None:
    try:
        from stoker.backend.cuda import unavailable_reason

        return unavailable_reason(0)
    except Exception as e:  # noqa: BLE001 - any failure means no usable GPU
        return f"{type(e).__name__}: {e}"


def _load(path, function, data, device, batch, threads):
    """The traced pipeline on the device asked for (auto: the GPU when the file places operators
    there and one is usable); returns (Loaded, "cpu"/"gpu")."""
    extra = {k: v for k, v in (("batch_size", batch), ("num_threads", threads)) if v}
    loaded = load_pipeline(path, function, data, device_id=None, **extra)
    on_gpu = gpu_nodes(loaded.pipe)
    if device is None:
        device = "gpu" if on_gpu else "cpu"
    if device == "cpu" and on_gpu:
        first = on_gpu[0]
        raise CLIError(f"{path}: {loaded.function} puts {first.op_name} (device='{first.device}', {first.origin}) "
                       f"on the GPU; use device='cpu' for it to bench on the CPU, or --device gpu")
    if device == "gpu":
        problem = _gpu_problem()
        if problem:
            raise CLIError(f"--device gpu: {problem}")
        loaded = load_pipeline(path, function, data, device_id=0, **extra)
    return loaded, device


def _sync(device: str) -> None:
    if device == "gpu":
        import cupy as cp

        cp.cuda.runtime.deviceSynchronize()


def measure(path: str, data: str | None = None, seconds: float = 10.0, batch: int | None = None,
            threads: int | None = None, device: str | None = None, function: str | None = None,
            warmup: float | None = None) -> Measurement:
    """Build the pipeline of ``path``, time its first batch, warm up (``warmup`` seconds, default
    a fifth of ``seconds`` up to 3 s) and run it for ``seconds`` under the timing hook."""
    from stoker.errors import StokerError

    if seconds <= 0:
        raise CLIError(f"--seconds must be positive, got {seconds}")
    loaded, device = _load(path, function, data, device, batch, threads)
    pipe = loaded.pipe
    warmup = min(3.0, seconds / 5) if warmup is None else warmup
    try:
        t0 = time.perf_counter()
        pipe.build()
        outs = _run(pipe)
        _sync(device)
        first = time.perf_counter() - t0
        executor = pipe._executor
        gpu = getattr(executor, "gpu", None)
        timer = NodeTimer(stream=gpu.stream if gpu is not None and device == "gpu" else None)
        executor.timer = timer
        t1 = time.perf_counter()
        for k in range(1000):
            if time.perf_counter() - t1 >= warmup and k >= 2:
                break
            _run(pipe)
        sampler = GpuSampler(pipe.device_id) if device == "gpu" else None
        if sampler is not None and sampler.method:
            timer.stream = None  # NVML measures it: no events needed
        _sync(device)
        timer.reset()
        if sampler is not None:
            sampler.start()
        cpu0 = cpu_seconds()
        n = samples = 0
        in_run = 0.0
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            a = time.perf_counter()
            outs = _run(pipe)
            in_run += time.perf_counter() - a
            n += 1
            samples += len(outs[0]) if outs else 0
        _sync(device)
        wall = time.perf_counter() - start
        cpu_s = cpu_seconds() - cpu0
        util, method = (sampler.stop(), sampler.method) if sampler is not None else (None, "")
        if device == "gpu" and util is None:
            busy = timer.gpu_busy_s()
            if busy is not None:
                util, method = min(1.0, busy / wall), "CUDA events (stream time of the GPU stage, an upper bound)"
        executor.timer = None
        with timer._lock:
            items, stages = dict(timer.exclusive), dict(timer.stages)
        readers = {node.id for node in pipe._graph.source_nodes}
    except StokerError as e:
        raise CLIError(f"{path}: running {loaded.function} failed: {e}") from None
    finally:
        pipe.close()
    return Measurement(loaded.function, device, pipe.batch_size, pipe.num_threads, first, wall, n, samples, cpu_s,
                       in_run, stages, items, readers, util, method)


def _run(pipe):
    """One batch; at the end of a finite source, the next epoch."""
    try:
        return pipe.run()
    except StopIteration:
        pipe.reset()
        return pipe.run()


def report(m: Measurement, top: int = 12) -> str:
    """The figures of ``m`` as text, ending with the verdict."""
    wall_ms = m.wall_s * 1e3 / max(1, m.batches)
    cores = os.cpu_count() or 1
    lines = [f"{m.function}: batch {m.batch_size}, {m.num_threads} threads, on the {m.device.upper()}",
             f"  throughput     {m.rate:,.1f} samples/s ({m.batches} batches in {m.wall_s:.1f} s, "
             f"{wall_ms:.1f} ms per batch)",
             f"  first batch    {m.first_batch_s:.2f} s (build + first run)",
             f"  CPU            {m.cores:.2f} cores busy of {cores} (this process and its helper processes)"]
    if m.device == "gpu":
        lines.append(f"  GPU            {m.gpu_util:.0%} busy ({m.gpu_method})" if m.gpu_util is not None else
                     "  GPU            utilisation unknown (no NVML and no CUDA events)")
    reader_s = sum(s for k, s in m.items.items() if category(m, k) == "reader")
    lines += ["", "Share of wall time (stages overlap, so shares need not add up to 100%):",
              f"  reader (sources and reader operators)  {reader_s / m.wall_s:6.1%}",
              f"  CPU stage (all of it)                  {m.stages.get('cpu', 0) / m.wall_s:6.1%}"]
    if m.device == "gpu":
        lines.append(f"  GPU stage (host side)                  {m.stages.get('gpu', 0) / m.wall_s:6.1%}")
    lines += [f"  stages waiting for the consumer        {m.stages.get('consumer', 0) / m.wall_s:6.1%}",
              f"  consumer waiting for the pipeline      {m.consumer_wait_s / m.wall_s:6.1%}",
              "", "Per operator (host ms per batch, nested operators excluded):"]
    items = sorted(m.items.items(), key=lambda kv: -kv[1])
    width = max([len(_item_name(k)) for k, _ in items[:top]] + [10])
    for key, s in items[:top]:
        lines.append(f"  {_item_name(key):<{width}}  {m.ms_per_batch(s):8.2f} ms  {s / m.wall_s:6.1%}  "
                     f"[{category(m, key)}]")
    if len(items) > top:
        rest = sum(s for _, s in items[top:])
        lines.append(f"  {'(' + str(len(items) - top) + ' more)':<{width}}  {m.ms_per_batch(rest):8.2f} ms")
    lines += ["", "Verdict: " + verdict(m)]
    return "\n".join(lines)


def _item_name(key: tuple) -> str:
    kind, label, _ = key
    prefix = {"source": "source ", "fused": "fused ", "prepare": "host half of ", "gpu": "gpu ",
              "wait": "waiting: "}.get(kind, "")
    return prefix + label


def add_parser(sub) -> None:
    """The ``bench`` subcommand's arguments."""
    import argparse

    from stoker.cli import PIPELINE_CONVENTION, wrap_help

    b = sub.add_parser("bench", help="run a pipeline for a while: samples/s, CPU/GPU use, time per stage and "
                       "operator, and what limits it",
                       description=wrap_help("Build the pipeline, time the first batch, warm up, run it for --seconds "
                       "and print samples/s, the CPU cores and GPU busy, the share of time per stage and the host "
                       "milliseconds per operator, then a verdict: I/O (the reader), decode, a named operator, the "
                       "host (GIL / CPU stage) or the GPU."),
                       epilog=PIPELINE_CONVENTION.replace("The pipeline is traced (and for show, built) with\n"
                                                          "device_id=None, on the CPU.",
                                                          "bench runs it on the GPU when it places operators there "
                                                          "(--device to choose)."),
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    b.add_argument("pipeline", metavar="PIPELINE.py", help="Python file that defines the pipeline")
    b.add_argument("data", metavar="DATA", nargs="?", help="data root passed to a pipeline function that takes "
                   "one argument (or --data)")
    b.add_argument("--data", dest="data_opt", metavar="DIR", help="the data root, as for show and graph")
    b.add_argument("--function", metavar="NAME", help="the pipeline function to use (default: the only "
                   "@pipeline_def function of the file)")
    b.add_argument("--seconds", type=float, default=10.0, help="how long to measure after warm-up "
                   "(default: %(default)s)")
    b.add_argument("--batch", type=int, help="override the pipeline's batch size")
    b.add_argument("--threads", type=int, help="override the pipeline's num_threads")
    b.add_argument("--device", choices=["cpu", "gpu"], help="cpu: device_id=None; gpu: device_id=0 (default: "
                   "gpu when the file puts operators on the GPU, else cpu)")
    b.add_argument("--compare", choices=["dali", "torchvision"], help="also run dali: the same file with its "
                   "imports renamed to nvidia.dali (needs DALI); torchvision: a DataLoader doing the same work, "
                   "only for the standard training pipeline (file reader, decode with random crop, resize, "
                   "crop_mirror_normalize with a random mirror); both in a subprocess, and print the ratio")


def run(a) -> str:
    """``stoker bench`` from parsed arguments; returns the report."""
    if a.data and a.data_opt and a.data != a.data_opt:
        raise CLIError(f"the data root was given twice ({a.data}, --data {a.data_opt}); give it once")
    data = a.data or a.data_opt
    m = measure(a.pipeline, data, seconds=a.seconds, batch=a.batch, threads=a.threads, device=a.device,
                function=a.function)
    text = report(m)
    if a.compare:
        from stoker._cli_bench_compare import compare

        text += "\n\n" + compare(a.compare, a.pipeline, m, data=data, seconds=a.seconds, function=a.function,
                                 batch=a.batch, threads=a.threads)
    return text
