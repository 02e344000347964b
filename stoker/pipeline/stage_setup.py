"""What the executor decides once, at construction: how many chain worker processes a pipeline
gets, whether its batch operators get a helper process, which GPU-stage node reads each
device value last (so the value goes back to the memory pool right after it), and whether the
GPU stage runs on one thread or two."""

from __future__ import annotations

import logging
import os
import sys

from stoker import settings
from stoker.pipeline.graph import Graph
from stoker.pipeline.host_cores import usable_cores

_log = logging.getLogger("stoker")


def chain_process_count(num_threads: int, cpus: int | None = None, numpy_heavy: bool = False) -> int:
    """Worker processes for fused CPU chains (stoker.pipeline.chain_processes):
    ``STOKER_CPU_PROCESSES`` = N, 0 (off) or "auto" (default: ``min(num_threads, cpus) - 1`` for
    pipelines of 8 or more threads on Linux machines of 8 or more cores, else none; ``cpus``
    defaults to the cores this process may use). Why those bounds: on a 16-core host the CPU
    pipelines ran about 3x faster with 15 workers, while at 2 threads (2 cores) in-process and
    workers were level (benchmarks/results_log.md).

    ``numpy_heavy`` (a fused chain holds an operator with ``prefers_worker_processes``): auto
    gives ``min(num_threads, cpus)`` workers from 2 threads and 2 cores on. The CPU speech front
    end at 2 threads on 2 cores ran 9-20 % faster with 2 workers than in-process (1 worker: 25 %
    slower), the augmented classification pipeline 17-23 % faster, while train, val and a
    detection-style chain stay level or slower (benchmarks/RESULTS.md, session 20)."""
    value = settings.get().cpu_processes
    if not hasattr(os, "memfd_create"):
        return 0
    if value is None:
        if cpus is None:
            cpus = usable_cores()
        if not sys.platform.startswith("linux"):
            return 0
        if num_threads >= 8 and cpus >= 8:
            return min(num_threads, cpus) - 1
        if numpy_heavy and num_threads >= 2 and cpus >= 2:
            return min(num_threads, cpus)
        return 0
    return value


def start_batch_offload(graph: Graph, num_threads: int, lanes_possible: bool = False):
    """The helper process for CPU operators that opt in to it (stoker.pipeline.batch_offload),
    started now so that it is ready by the first batches; None when no such operator is in the
    graph or the setting says no. Auto: on exactly where the CPU stage can run two lanes
    (``lanes_possible``, stoker.pipeline.cpu_lanes): with one lane the CPU stage only waits for
    the helper, and the SSD pipeline ran slower with it, while with two it ran faster
    (benchmarks/RESULTS.md)."""
    wanted = settings.get().batch_offload
    if wanted is None:
        wanted = lanes_possible
    if not wanted or not hasattr(os, "memfd_create"):
        return None
    if not any(getattr(graph.instances[n.id], "offload_cpu", False) for n in graph.cpu_nodes):
        return None
    from stoker.pipeline.batch_offload import BatchOffload
    from stoker.pipeline.cpu_lanes import MAX_LANES

    lanes = min(settings.get().cpu_lanes or 2, MAX_LANES)  # (as cpu_lanes.lane_count decides them)
    try:  # (one helper per CPU-stage lane: two lanes with one helper waited for each other)
        return BatchOffload(helpers=lanes if lanes_possible else 1)
    except OSError as e:
        _log.warning("stoker: no helper process for batch operators (%s)", e)
        return None


def last_uses(graph: Graph, keep: set) -> dict:
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


def split_gpu_nodes(graph: Graph) -> tuple[list, list] | None:
    """The GPU stage's nodes as (head, rest) for two stage threads, or None for one.

    The head is the longest run of GPU nodes from the start that read only host data (the mixed
    decoders, uploads of labels): those never wait for another GPU node. A mixed decoder's device
    half mostly waits (for the JPEG engines, its helper processes, its CPU-decoded share), and on
    one thread the operators after it waited behind it; on their own thread their host work (their
    tables, launches) runs while the next batch decodes, as in DALI, whose mixed and GPU stages
    are separate. Both threads launch on the pipeline's stream, so the device keeps the order.
    Only with ``STOKER_SPLIT_GPU_STAGE=1`` (not measured faster yet: the setting says where it
    stands), and where both parts have nodes."""
    nodes = graph.gpu_nodes
    on_gpu = {n.id for n in nodes}
    k = 0
    while k < len(nodes) and all(x.source.id not in on_gpu for x in [*nodes[k].inputs, *nodes[k].arg_inputs.values()]):
        k += 1
    if not settings.get().split_gpu_stage or not 0 < k < len(nodes):
        return None
    return nodes[:k], nodes[k:]
