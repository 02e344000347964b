"""What the executor decides once, at construction: how many chain worker processes a pipeline
gets, whether its batch operators get a helper process, and which GPU-stage node reads each
device value last (so the value goes back to the memory pool right after it)."""

from __future__ import annotations

import logging
import os
import sys

from stoker import settings
from stoker.pipeline.graph import Graph

_log = logging.getLogger("stoker")


def chain_process_count(num_threads: int, cpus: int | None = None) -> int:
    """Worker processes for fused CPU chains (stoker.pipeline.chain_processes):
    ``STOKER_CPU_PROCESSES`` = N, 0 (off) or "auto" (default: ``min(num_threads, cpus) - 1`` for
    pipelines of 8 or more threads on Linux machines of 8 or more cores, else none; ``cpus``
    defaults to the cores this process may use). Measured on a 16-core host (benchmarks/results_log.md):
    the CPU training pipeline went from 906 to 3,324 img/s with 15 workers, validation from 781
    to 2,368; at 2 threads (2 cores) in-process and workers were level."""
    value = settings.get().cpu_processes
    if not hasattr(os, "memfd_create"):
        return 0
    if value is None:
        if cpus is None:
            cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        many = num_threads >= 8 and cpus >= 8 and sys.platform.startswith("linux")
        return min(num_threads, cpus) - 1 if many else 0
    return value


def _start_batch_offload(graph: Graph, num_threads: int):
    """The helper process for CPU operators that opt in to it (stoker.pipeline.batch_offload),
    started now so that it is ready by the first batches; None when no such operator is in the
    graph or the setting says no. Auto is off: on an H100 the SSD-style pipeline ran no faster
    with the helper than without, in two runs (9,036 against 9,265 img/s and 8,406 against 9,245,
    benchmarks/RESULTS.md): the CPU stage still waits for the batch to come back, and after the
    operators' own speed-ups the round trip costs about what the GIL time it frees is worth."""
    wanted = settings.get().batch_offload
    if not wanted or not hasattr(os, "memfd_create"):
        return None
    if not any(getattr(graph.instances[n.id], "offload_cpu", False) for n in graph.cpu_nodes):
        return None
    from stoker.pipeline.batch_offload import BatchOffload

    try:
        return BatchOffload()
    except OSError as e:
        _log.warning("stoker: no helper process for batch operators (%s)", e)
        return None


def _last_uses(graph: Graph, keep: set) -> dict:
    """GPU-stage node id -> the values (node id, output) it is the last GPU-stage reader of,
    outputs of the pipeline excepted."""
    last: dict = {}
    for node in graph.gpu_nodes:
        for x in [*node.inputs, *node.arg_inputs.values()]:
            last[(x.source.id, x.index)] = node.id
    out: dict = {}
    for key, node_id in last.items():
        if key not in keep:
            out.setdefault(node_id, []).append(key)
    return out
