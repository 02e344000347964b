"""``num_threads="auto"`` and ``prefetch_queue_depth="auto"``: settings chosen at build from a short
measured warm-up (see :meth:`stoker.Pipeline.tuning`).

How: after the readers are listed, their positions are saved (``Graph.source_state``, the state a
checkpoint holds) and each candidate runs on an executor of its own over the pipeline's graph: a
couple of warm-up batches, then timed ones, up to the ``STOKER_TUNE_SECONDS`` budget. Then the
readers go back to the saved positions, so the first batches the user gets are the ones a fixed
setting gives (random values are functions of the seed, the operator, the iteration and the
sample, never of how many batches ran before: :mod:`stoker.random_state`). Each trial goes on
from where the previous one stopped, so that none reads files another has brought into the page
cache. The executor of the best candidate is kept as the pipeline's; the others are closed (their
threads and helper processes stopped).

Candidates: ``num_threads`` from the usable cores (``cores``, ``cores / 2``, ``cores / 4``; a GPU
pipeline's capped at 16), largest first, so the first trial is the heuristic's choice; a smaller
one stops the search when it is clearly slower (under 85 % of the best). Then
``prefetch_queue_depth`` 3 against 2 at the best thread count.

Where trials would change what the user gets or cannot run, the heuristic decides instead and
:meth:`tuning` says why: a source that cannot be rewound (``external_source`` with a callback,
an iterator or a generator, or fed by ``feed_input``: trial batches would call the user's code
or eat the user's data), no reader at all, debug mode, ``STOKER_TUNE_SECONDS=0``, or a trial that
failed. Heuristic (benchmarks/results_log.md): a CPU pipeline gets one thread per usable core
(with 8+ threads on 8+ cores the fused chains run in ``num_threads - 1`` worker processes: one
interpreter stops at a few busy cores whatever its thread count), a GPU pipeline
``min(cores, 16)`` (16 pool threads ran best of 2-16 on a 16-core GPU host); depth 2, DALI's
default.

``hw_decoder_load`` is not tuned: it moves JPEGs between the hardware engines and libjpeg-turbo,
whose pixels differ (up to 0.6 levels on average), so it would change the outputs; the mixed
decoders steer their host share automatically anyway (``STOKER_CPU_DECODE_SHARE``).
"""

from __future__ import annotations

import logging
import time

from stoker import settings
from stoker.errors import PipelineBuildError
from stoker.pipeline.executor import Executor
from stoker.pipeline.host_cores import usable_cores  # (this rank's share of the cores)

AUTO = "auto"
_log = logging.getLogger("stoker")
_CLEARLY_WORSE = 0.85  # a thread count under this share of the best ends the search downwards
_WARMUP_BATCHES = 2
_MIN_TIMED = 3  # batches popped at least in a trial's timed part (its drain included)
_DEPTHS = (2, 3)
HW_DECODER_LOAD = "not tuned: it changes which decoder (and so which pixels) a JPEG gets"


# --- arguments ---------------------------------------------------------------------------------

def check_arguments(num_threads, depth) -> tuple[int | None, object, int, int]:
    """``(num_threads or None for "auto", prefetch_queue_depth as given, cpu_size, gpu_size)``;
    PipelineBuildError naming the argument for a bad value."""
    if num_threads is None or num_threads == -1:
        num_threads = min(usable_cores(), 8)
    elif isinstance(num_threads, str) and num_threads.strip().lower() == AUTO:
        num_threads = None
    elif isinstance(num_threads, bool) or not isinstance(num_threads, int) or num_threads < 1:
        raise PipelineBuildError(f"Pipeline: num_threads must be a positive int or 'auto', got {num_threads!r}")
    if isinstance(depth, str) and depth.strip().lower() == AUTO:
        return num_threads, AUTO, 2, 2
    if isinstance(depth, dict):
        unknown = set(depth) - {"cpu_size", "gpu_size"}
        if unknown:
            raise PipelineBuildError(f"Pipeline: prefetch_queue_depth takes keys cpu_size, gpu_size; got {unknown}")
        sizes = depth.get("cpu_size", 2), depth.get("gpu_size", 2)
        if any(isinstance(s, bool) or not isinstance(s, int) or s < 1 for s in sizes):
            raise PipelineBuildError(f"Pipeline: prefetch_queue_depth sizes must be positive ints, got {depth!r}")
        return num_threads, depth, sizes[0], sizes[1]
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
        raise PipelineBuildError(f"Pipeline: prefetch_queue_depth must be a positive int, a dict or 'auto', "
                                 f"got {depth!r}")
    return num_threads, depth, depth, depth


def heuristic_threads(gpu: bool, cores: int | None = None) -> int:
    """The thread count without trials (see the module docstring)."""
    cores = cores or usable_cores()
    return max(1, min(cores, 16 if gpu else 64))


def thread_candidates(gpu: bool, cores: int | None = None) -> list[int]:
    """``num_threads`` tried, largest (the heuristic's) first: on 2 cores [2, 1], on 16 [16, 8, 4]."""
    top = heuristic_threads(gpu, cores)
    out: list[int] = []
    for n in (top, top // 2, top // 4):
        if n >= 1 and n not in out:
            out.append(n)
    return out


def rewind_problem(graph) -> str | None:
    """Why trial batches cannot be taken back in ``graph`` (None: every source is a reader)."""
    from stoker.operators.base import Reader

    for node in graph.source_nodes:
        inst = graph.instances[node.id]
        if isinstance(inst, Reader):
            continue
        label = getattr(inst, "label", None) or node.instance_name
        what = {"call0": "a callback", "call1": "a callback", "iter": "an iterable", "genfunc": "a generator",
                "feed": "feed_input"}.get(getattr(inst, "kind", None))
        if what == "feed_input":
            return f"{label} is fed by feed_input, which trials would consume"
        if what is not None:
            return f"{label} with {what} cannot be rewound"
        return f"{label} cannot be rewound"
    if not graph.readers():
        return "no reader whose position can be saved and restored"
    return None


# --- at build ----------------------------------------------------------------------------------

def settle(pipe, gpu: bool) -> None:
    """Give an "auto" pipeline provisional values (the heuristic's) before its operators are
    bound to it: readers read ``pipe.num_threads`` then."""
    if pipe._num_threads is None:
        pipe._num_threads = heuristic_threads(gpu)
        pipe._auto.add("num_threads")
    if pipe._prefetch_queue_depth == AUTO:
        pipe._prefetch_queue_depth = pipe._cpu_queue = pipe._gpu_queue = 2
        pipe._auto.add("prefetch_queue_depth")


def settle_for_debug(pipe) -> None:
    """Debug mode runs no staged executor: the heuristic's values, said so in tuning()."""
    if pipe._num_threads is None or pipe._prefetch_queue_depth == AUTO:
        settle(pipe, gpu=False)
        pipe._tuning = _record(pipe, [], 0.0, "heuristic: debug mode")


def make_executor(pipe, graph, num_threads: int | None = None, depth: tuple[int, int] | None = None) -> Executor:
    cpu, gpu = depth or (pipe._cpu_queue, pipe._gpu_queue)
    return Executor(graph, batch_size=pipe._batch_size, num_threads=num_threads or pipe._num_threads,
                    cpu_queue=cpu, gpu_queue=gpu, asynchronous=pipe._exec_async, gpu_context=pipe._gpu,
                    on_error=pipe._on_error)


def executor_for(pipe, graph) -> Executor:
    """The pipeline's executor: tuned first where any setting is "auto"."""
    if not pipe._auto:
        pipe._tuning = _record(pipe, [], 0.0, "fixed: given by the caller")
        return make_executor(pipe, graph)
    return _tune(pipe, graph)


def _record(pipe, candidates: list, seconds: float, why: str) -> dict:
    return {"num_threads": pipe._num_threads, "prefetch_queue_depth": pipe._prefetch_queue_depth,
            "auto": sorted(pipe._auto), "candidates": candidates, "seconds": round(seconds, 3), "why": why,
            "hw_decoder_load": HW_DECODER_LOAD}


def _rebind_readers(pipe, graph) -> None:
    """Readers decide at binding whether to read in their I/O helper process (from num_threads)."""
    for _, reader in graph.readers():
        if hasattr(reader, "bind_pipeline"):
            reader.bind_pipeline(pipe)


def _tune(pipe, graph) -> Executor:
    start = time.perf_counter()
    budget = settings.get().tune_seconds
    gpu = bool(graph.gpu_nodes)
    problem = rewind_problem(graph)
    if problem is None and budget <= 0:
        problem = "STOKER_TUNE_SECONDS is 0"
    candidates: list[dict] = []
    best = None
    if problem is None:
        try:
            best = _trials(pipe, graph, gpu, start + budget, candidates)
        except Exception as e:  # noqa: BLE001 - the heuristic decides; the user's run shows the error
            problem = f"a trial failed ({type(e).__name__}: {e})"
            best = None
    if best is None:
        problem = problem or "STOKER_TUNE_SECONDS too short to measure a candidate"
        if "num_threads" in pipe._auto:
            pipe._num_threads = heuristic_threads(gpu)
        if "prefetch_queue_depth" in pipe._auto:
            pipe._prefetch_queue_depth = pipe._cpu_queue = pipe._gpu_queue = 2
        _rebind_readers(pipe, graph)
        executor, why = make_executor(pipe, graph), f"heuristic: {problem}"
    else:
        executor, threads, depth = best
        pipe._num_threads = threads
        if "prefetch_queue_depth" in pipe._auto:
            pipe._prefetch_queue_depth = pipe._cpu_queue = pipe._gpu_queue = depth
        _rebind_readers(pipe, graph)
        executor.error_reports.clear()  # (samples the trials met are the user's run's to report)
        executor.error_count = 0
        why = "measured"
    pipe._tuning = _record(pipe, candidates, time.perf_counter() - start, why)
    tried = ", ".join(f"{c['num_threads']} threads depth {c['prefetch_queue_depth']}: "
                      f"{c['batches_per_s'] if c['batches_per_s'] is not None else '-'} batches/s"
                      for c in candidates)
    _log.info("stoker: auto-tuned num_threads=%d, prefetch_queue_depth=%s (%s; %.2f s%s)", pipe._num_threads,
              pipe._prefetch_queue_depth, why, pipe._tuning["seconds"], f"; {tried}" if tried else "")
    return executor


def _trials(pipe, graph, gpu: bool, deadline: float, candidates: list):
    """Run the candidates; returns (executor, num_threads, depth) of the fastest, or None."""
    saved = graph.source_state(pipe._iteration)
    auto_threads = "num_threads" in pipe._auto
    auto_depth = "prefetch_queue_depth" in pipe._auto and pipe._exec_pipelined and pipe._exec_async
    threads_list = thread_candidates(gpu) if auto_threads else [pipe._num_threads]
    depths = list(_DEPTHS) if auto_depth else [pipe._cpu_queue]
    best = None  # (rate, executor, threads, depth)
    # Trials go on from where the previous one stopped, so that each reads files the others have
    # not (a data set read twice would be in the page cache for the later candidates only).
    index = [pipe._iteration]
    try:
        planned = len(threads_list) + len(depths) - 1
        for k, threads in enumerate(threads_list):
            share = (deadline - time.perf_counter()) / (planned - k)
            if share <= 0:
                break
            pipe._num_threads = threads
            _rebind_readers(pipe, graph)
            queues = (depths[0], depths[0]) if auto_depth else (pipe._cpu_queue, pipe._gpu_queue)
            executor = make_executor(pipe, graph, threads, queues)
            rate = _measure(pipe, graph, executor, queues, index, deadline, share, candidates, threads)
            best = _keep(best, rate, executor, threads, depths[0])
            if best is None or rate is None or rate < _CLEARLY_WORSE * best[0]:
                break  # smaller thread counts are slower still
        if best is not None and len(depths) > 1:
            threads = best[2]
            pipe._num_threads = threads
            _rebind_readers(pipe, graph)
            for k, depth in enumerate(depths[1:]):
                share = (deadline - time.perf_counter()) / (len(depths) - 1 - k)
                if share <= 0:
                    break
                # A CPU-only graph's executor does not depend on the depth (it is how far the
                # pipeline schedules ahead): the best one is measured again, its helpers warm.
                executor = best[1] if not gpu else make_executor(pipe, graph, threads, (depth, depth))
                rate = _measure(pipe, graph, executor, (depth, depth), index, deadline, share, candidates,
                                threads, reused=executor is best[1])
                if executor is best[1]:
                    if rate is not None and rate > best[0]:
                        best = (rate, executor, threads, depth)
                else:
                    best = _keep(best, rate, executor, threads, depth)
    except BaseException:
        if best is not None:
            best[1].close()
        graph.set_source_state(saved)
        raise
    graph.set_source_state(saved)
    return None if best is None else best[1:]


def _keep(best, rate, executor, threads, depth):
    if rate is not None and (best is None or rate > best[0]):
        if best is not None:
            best[1].close()
        return rate, executor, threads, depth
    executor.close()
    return best


def _measure(pipe, graph, executor, queues: tuple[int, int], index: list, deadline: float, share: float,
             candidates: list, threads: int, reused: bool = False) -> float | None:
    """Batches per second of ``executor`` scheduling as far ahead as ``Pipeline.schedule_run`` does
    with prefetch ``queues`` (cpu_size, gpu_size), iterations numbered on from ``index[0]``:
    warm-up batches (and, where fused chains run in worker processes, until those have started),
    then batches timed until ``share`` seconds are used; the executor is left drained. None when
    the deadline came before a timed batch."""
    t0 = time.perf_counter()
    ahead = queues[0]
    if not pipe._exec_pipelined:
        ahead = 1
    elif graph.gpu_nodes and pipe._exec_async and settings.get().stage_queues:
        ahead = queues[0] + queues[1]

    def schedule():
        executor.schedule({}, index[0])
        index[0] += 1

    for _ in range(ahead):
        schedule()
    depth = queues[0] if queues[0] == queues[1] else {"cpu_size": queues[0], "gpu_size": queues[1]}
    record = {"num_threads": threads, "prefetch_queue_depth": depth, "batches_per_s": None, "batches": 0}
    candidates.append(record)
    warm = 0
    rate = None
    try:
        while True:  # warm-up
            _pop(executor)
            warm += 1
            if time.perf_counter() >= deadline:
                return None
            workers = executor._chain_workers if executor.wants_chain_processes() else None
            if warm >= _WARMUP_BATCHES and (workers is None or workers.ready()):
                break
            schedule()
        trial_end = t0 + share
        n, t1 = 0, time.perf_counter()
        while executor.pending:  # timed: schedule while time is left, then drain
            now = time.perf_counter()
            if n + executor.pending < _MIN_TIMED or (now < trial_end and now < deadline):
                schedule()
            _pop(executor)
            n += 1
        rate = n / (time.perf_counter() - t1)
    finally:
        if rate is None and reused and executor.pending:
            executor.drain()
        elif rate is None and not reused:  # failed, or the deadline came: queued work is not computed
            executor.close()
    record["batches_per_s"] = round(rate, 3)
    record["batches"] = n
    return rate


def _pop(executor) -> None:
    it = executor.pop()
    if it.error is not None:
        raise it.error
