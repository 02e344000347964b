"""Runs a built graph, iteration by iteration, in stages that overlap.

Stages:
  1. source advance (one thread, iteration order): readers pick the sample
     references of the batch, external sources fetch their data. This is the
     only stateful part, so running it in order makes results independent of
     thread count and prefetch depth.
  2. CPU stage: the CPU operators in topological order, each spreading its
     samples over the thread pool.
  3. GPU stage (only when the graph has "mixed"/"gpu" operators): host-to-device
     copies and GPU operators on the pipeline's CUDA stream.

With ``exec_async`` each stage has its own worker thread and bounded queue
(``cpu_size`` / ``gpu_size``), so iteration i+1 is read and decoded while
iteration i runs on the GPU and the user's training step runs in Python. The
GPU stage runs an iteration only while fewer than ``gpu_size - 1`` of its
outputs wait for the consumer (who holds one more), so a deep CPU queue does
not hold more device batches.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import queue
import threading
import weakref
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from stoker import settings
from stoker.errors import OperatorError, StokerError
from stoker.operators.base import BatchContext, HostHalf
from stoker.operators.decoders.cpu import tune_allocator_once
from stoker.operators.transfer import seal_tables
from stoker.pipeline import conditionals, cpu_lanes, deferred_offload, fusion, sample_drops
from stoker.pipeline.graph import Graph
from stoker.pipeline.stage_setup import chain_process_count, last_uses, split_gpu_nodes, start_batch_offload  # noqa: F401
from stoker.pipeline.tracking import Track, Tracker, complete_batch, fill_masks
from stoker.tensors import TensorListCPU

_STOP = object()

# Executors whose threads may still run (weak); close_all() stops them before finalization.
_open_executors: weakref.WeakSet = weakref.WeakSet()


def close_all(gpu_only: bool = False) -> None:
    """Close every executor still open (with ``gpu_only``, those with a GPU stage); run at
    interpreter exit (``Pipeline``'s atexit hook).

    Why: the stage threads are daemon threads, and one may be inside OpenCV or torch with the
    GIL released when the interpreter finalizes. On its way back it then calls pthread_exit
    (Python < 3.14 ends daemon threads that way), whose forced unwinding through the library's
    C++ frames calls std::terminate: "terminate called without an active exception", exit
    code 134, in 6 of 10 runs of the Getting Started script without ``close()``. Joining the
    threads before finalization means no thread is left in native code by then.
    """
    for ex in list(_open_executors):
        if gpu_only and getattr(ex, "gpu", None) is None:
            continue
        try:
            ex.close()
        except Exception:  # noqa: BLE001 - at exit: close the others regardless
            pass


if hasattr(os, "register_at_fork"):  # a forked child has none of its parent's threads to stop
    os.register_at_fork(after_in_child=_open_executors.clear)


def cancel_prepared(prepared) -> None:
    """Call off a GPU node's host half whose batch was dropped, where it holds resources
    (:class:`~stoker.operators.base.HostHalf`: a mixed decoder's ``PreparedBatch`` returns its
    device buffer permit, the GPU numpy reader's ``StagedBatch`` its staging buffers). Nothing
    else: a reader's refs or a Future must not be called off."""
    if isinstance(prepared, HostHalf):
        prepared.cancel()


def is_gpu_batch(value) -> bool:
    """True for a TensorListGPU (checked without importing CuPy)."""
    return type(value).__name__ == "TensorListGPU"


_log = logging.getLogger("stoker")
_MAX_REFILL_ROUNDS = 16
MAX_ERROR_REPORTS = 10_000  # error_reports keeps the latest only (error_count counts them all)


@dataclass
class Iteration:
    """One scheduled iteration travelling through the stages."""

    index: int
    fed: dict[str, Any] = field(default_factory=dict)
    values: dict[tuple[int, int], Any] = field(default_factory=dict)  # (node id, output) -> batch
    # node id -> what was prepared for this batch ahead of the node's run: a source's advance()
    # (the samples it will read), a GPU node's host half (a mixed decoder's staged buffers: a
    # HostHalf, called off with cancel_prepared when the batch is dropped)
    prepared: dict[int, Any] = field(default_factory=dict)
    batch_size: int = 0
    error: BaseException | None = None
    state: dict | None = None  # source states after this iteration (for checkpoints)
    done_event: Any = None  # CUDA event recorded after the GPU stage
    offset: int = 0  # sample-index offset of refilled samples (random streams)
    dropped: int = 0  # samples removed under on_error="skip"/"substitute"
    reports: list = field(default_factory=list)
    track: Any = None  # per-sample bookkeeping under skip/substitute (tracking.Track)
    scopes: dict = field(default_factory=dict)  # conditional branch id -> its samples' indices
    seq: int = 0  # schedule order (the CPU-stage lanes take their turns by it)
    deferred: list | None = None  # a lane's helper answers taken at the hand-over (deferred_offload)


class Executor:
    """Executes ``graph`` for ``Pipeline``; see the module docstring for the stages."""

    # Optional timing hook (``stoker bench``): ``timer(kind, what)`` returns a context manager
    # around each stage run ("stage", "cpu"/"gpu"), source advance ("source", node), operator run
    # ("cpu"/"gpu", node), GPU host half ("prepare", node), fused chain ("fused", FusedStep) and
    # wait for the consumer ("wait", "consumer"). Off (None) it costs one attribute check each.
    timer = None

    def __init__(self, graph: Graph, *, batch_size: int, num_threads: int, cpu_queue: int, gpu_queue: int,
                 asynchronous: bool, gpu_context=None, on_error: str = "raise"):
        self.graph = graph
        self.batch_size = batch_size
        self.pool = ThreadPoolExecutor(num_threads, thread_name_prefix="stoker-cpu") if num_threads > 1 else None
        self.gpu = gpu_context
        self.asynchronous = asynchronous
        self.on_error = on_error
        # samples skipped or substituted (see Pipeline.error_report), the latest MAX_ERROR_REPORTS
        self.error_reports: collections.deque = collections.deque(maxlen=MAX_ERROR_REPORTS)
        self.error_count = 0
        self.tracker = Tracker(graph, batch_size, on_error)
        from stoker.operators.base import Reader

        self._output_keys = {(o.source.id, o.index) for o in graph.outputs}
        self._last_use = last_uses(graph, self._output_keys)
        self._refillable = bool(graph.source_nodes) and all(
            isinstance(graph.instances[n.id], Reader) for n in graph.source_nodes)
        self.tracker.can_skip = self._refillable
        # Per-sample operator chains run as one pool task per chunk (see stoker.pipeline.fusion);
        # STOKER_FUSE=0 runs every CPU node on its own.
        self._cpu_steps = fusion.plan(graph) if fusion.enabled() else list(graph.cpu_nodes)
        if graph.cpu_nodes:  # host operators make image-sized arrays (decoders.cpu says why)
            tune_allocator_once()
        self._chain_processes = chain_process_count(num_threads, numpy_heavy=fusion.numpy_heavy(graph, self._cpu_steps))
        self._chain_workers = None
        self._batch_offload = start_batch_offload(graph, num_threads, cpu_lanes.lanes_possible(self))
        self._deferrable = deferred_offload.deferrable(graph, self._cpu_steps, self._batch_offload)
        self._seq = 0
        self._ended = False  # a source raised StopIteration: later iterations end too
        self._closed = False
        self._close_lock = threading.Lock()  # a second close() waits until the first is done
        self._out: queue.Queue = queue.Queue()
        self._threads: list[threading.Thread] = []
        self._pending = 0
        self._lock = threading.Lock()
        _open_executors.add(self)  # (closed at interpreter exit: close_all)
        # STOKER_SERIAL_STAGES=1: the CPU and GPU stages take turns instead of overlapping (a probe:
        # measured within run-to-run noise of overlapping, benchmarks/RESULTS.md).
        self._stage_lock = threading.Lock() if settings.get().serial_stages else contextlib.nullcontext()
        if asynchronous:
            self._in: queue.Queue = queue.Queue()
            has_gpu = bool(graph.gpu_nodes)
            self._mid: queue.Queue = queue.Queue(maxsize=max(1, gpu_queue)) if has_gpu else self._out
            # One permit per GPU-stage output not yet taken by pop(). As in DALI, the batch the
            # consumer holds counts as one of gpu_size, so the device memory held by finished
            # batches stays at gpu_size batches however far ahead the CPU stage runs.
            self._gpu_outputs = threading.Semaphore(max(1, gpu_queue - 1)) if has_gpu else None
            self._cpu_lanes = cpu_lanes.start(self, _STOP)  # 2 threads where it pays, else 1:
            if self._cpu_lanes == 1:
                self.start_thread(self._cpu_worker, "stoker-cpu-stage")
            # STOKER_SPLIT_GPU_STAGE=1: the mixed nodes on one thread, the operators after them on
            # another (stage_setup.split_gpu_nodes), as DALI's mixed and GPU stages
            self._gpu_parts = split_gpu_nodes(graph) if has_gpu else None
            if self._gpu_parts:
                self._gpu_mid: queue.Queue = queue.Queue(maxsize=1)
                self.start_thread(lambda: self._gpu_worker(1), "stoker-gpu-stage")
                self.start_thread(lambda: self._gpu_worker(2), "stoker-gpu-ops")
            elif has_gpu:
                self.start_thread(self._gpu_worker, "stoker-gpu-stage")

    def _timed(self, kind: str, what):
        return self.timer(kind, what) if self.timer is not None else contextlib.nullcontext()

    def wants_chain_processes(self) -> bool:
        return self._chain_processes > 0

    def chain_workers(self):
        """The worker processes of fused chains, started on first use; None when not asked for."""
        if self._chain_processes <= 0 or self._closed:  # (closed: none started again)
            return None
        if self._chain_workers is None:
            from stoker.pipeline.chain_processes import ChainWorkers

            self._chain_workers = ChainWorkers(self._chain_processes)
        return self._chain_workers

    def schedule(self, fed: dict[str, Any], index: int) -> None:
        """Queue one iteration (``fed`` holds data given with feed_input for it)."""
        it = Iteration(index, fed)
        with self._lock:
            self._pending += 1
            it.seq, self._seq = self._seq, self._seq + 1
        if self.asynchronous:
            self._in.put(it)
        else:
            with self._timed("stage", "cpu"):
                self._run_cpu_stage(it)
            if self.graph.gpu_nodes:
                with self._timed("stage", "gpu"):
                    self._run_gpu_stage(it)
            self._out.put(it)

    @property
    def ended(self) -> bool:
        """True once a source raised StopIteration (until drain()); the CPU-stage lanes set it."""
        return self._ended

    @ended.setter
    def ended(self, value: bool) -> None:
        self._ended = value

    @property
    def closed(self) -> bool:
        """True once close() began: the stage threads then skip the iterations still queued."""
        return self._closed

    @property
    def cpu_steps(self) -> list:
        """The CPU stage's steps in order: OpNodes run one by one and ``fusion.FusedStep`` chains."""
        return self._cpu_steps

    @property
    def batch_offload(self):
        """The batch operators' helper process (stoker.pipeline.batch_offload), or None."""
        return getattr(self, "_batch_offload", None)

    def next_scheduled(self):
        """The next scheduled iteration, or the stop marker once closing (asynchronous executors
        only; blocks): what a CPU-stage thread works on next."""
        return self._in.get()

    def hand_on(self, it) -> None:
        """Put ``it`` (or the stop marker) on the GPU stage's queue, in order (asynchronous
        executors only; blocks while that queue is full)."""
        self._mid.put(it)

    @property
    def pending(self) -> int:
        return self._pending

    def pop(self) -> Iteration:
        """The next finished iteration, in schedule order (blocks)."""
        if self._pending == 0:
            raise StokerError("no iteration is scheduled: call schedule_run() before outputs()")
        while True:
            try:
                it = self._out.get(timeout=0.5)
                break
            except queue.Empty:
                if self._closed:  # (at exit, a daemon thread of the program's may still wait here)
                    raise StokerError("the pipeline was closed") from None
                if any(not t.is_alive() for t in self._threads):
                    raise StokerError("a stoker executor thread died unexpectedly") from None
        with self._lock:
            self._pending -= 1
        if self.asynchronous and self._gpu_outputs is not None:
            self._gpu_outputs.release()
        return it

    def drain(self) -> None:
        """Wait for and discard every scheduled iteration."""
        while self._pending:
            self.pop()
        self._ended = False

    def close(self) -> None:
        """Stop the worker threads, the pool and the chain worker processes; safe to call twice
        and from two threads (the second call returns once the first has finished: at exit
        :func:`close_all` may meet a close that garbage collection started)."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True  # the stage threads now skip the iterations still queued
            if self.asynchronous:
                for _ in range(getattr(self, "_cpu_lanes", 1)):
                    self._in.put(_STOP)
            me = threading.current_thread()
            for t in self._threads:
                if t is not me:
                    t.join(timeout=30)
            if self.pool is not None:
                self.pool.shutdown(wait=True, cancel_futures=True)
            if self._chain_workers is not None:
                self._chain_workers.close()
                self._chain_workers = None
            offload, self._batch_offload = getattr(self, "_batch_offload", None), None
            if offload is not None:
                offload.close()
            _open_executors.discard(self)

    def start_thread(self, target, name: str) -> None:
        """Run ``target`` on a daemon stage thread that close() joins."""
        t = threading.Thread(target=target, name=name, daemon=True)
        t.start()
        self._threads.append(t)

    def _cpu_worker(self):
        while True:
            it = self._in.get()
            if it is _STOP:
                self._mid.put(_STOP)
                return
            if self._closed:  # closing: what is still queued is never consumed, so not computed
                it.error = StokerError("the pipeline was closed")
                self._mid.put(it)
                continue
            with self._stage_lock, self._timed("stage", "cpu"):
                self._run_cpu_stage(it)
            with self._timed("wait", "consumer"):  # blocks while the queue ahead is full
                self._mid.put(it)

    def _gpu_worker(self, part: int = 0):
        """The GPU stage's thread (``part`` 0), or one of its two halves when it is split: 1 runs
        the nodes up to the split and hands the iteration on, 2 runs the rest."""
        source, sink = (self._gpu_mid, self._out) if part == 2 else (self._mid, self._gpu_mid if part else self._out)
        nodes = self._gpu_parts[part - 1] if part else None
        while True:
            it = source.get()
            if it is _STOP:
                if part == 1:
                    sink.put(_STOP)
                return
            if part != 2:
                with self._timed("wait", "consumer"):
                    while not self._closed and not self._gpu_outputs.acquire(timeout=0.1):
                        pass  # wait for pop() to take a finished batch
            if self._closed:
                # Keep reading the queue until the CPU stage's _STOP (it would block on a full queue
                # otherwise) and call off what the iterations hold (a mixed decoder's buffers).
                for prepared in it.prepared.values():
                    cancel_prepared(prepared)
                continue
            with self._stage_lock, self._timed("stage", "gpu ops" if part == 2 else "gpu"):
                self._run_gpu_stage(it, nodes, finish=part != 1)
            sink.put(it)

    def _run_cpu_stage(self, it: Iteration) -> None:
        if self._ended:
            it.error = StopIteration()
            return
        try:
            if self.tracker.active:
                it.track = Track(target=self.batch_size)
            self.advance_sources(it, self.batch_size)
            self._run_steps(it)
            if it.dropped or (it.track is not None and it.track.taken < it.track.target):
                self._repair(it)
            if self.tracker.mask_nodes:
                fill_masks(it, self.tracker.mask_nodes)
            self.prepare_gpu_nodes(it)
            it.state = self.graph.source_state(it.index + 1)
        except StopIteration as e:
            self._ended = True
            it.error = e
        except BaseException as e:  # noqa: BLE001 - handed to the consumer, who re-raises
            it.error = e

    def _run_steps(self, it: Iteration) -> None:
        if self.timer is None:
            fusion.run_steps(self, self._cpu_steps, it)
            return
        for step in self._cpu_steps:  # one by one, so that the timing hook sees each fused chain
            fused = isinstance(step, fusion.FusedStep)
            with self._timed("fused", step) if fused else contextlib.nullcontext():
                fusion.run_steps(self, [step], it)

    def _run_gpu_stage(self, it: Iteration, nodes=None, finish: bool = True) -> None:
        """Run the GPU nodes (``nodes``: some of them, in order) on ``it``; ``finish``: the last
        of them ran, so seal the tables, record ``done_event`` and free the intermediates."""
        if it.error is not None:
            return
        try:
            with self.gpu.activate():
                prepared = it.prepared
                for node in self.graph.gpu_nodes if nodes is None else nodes:
                    self.run_node(node, it, gpu=True)
                    prepared.pop(node.id, None)  # a mixed decoder's host half holds its buffers
                    # A device batch no later operator reads goes back to the pool at once, so the
                    # stage's peak is not the sum of all its intermediates (ordered on this stream).
                    for key in self._last_use.get(node.id, ()):
                        if is_gpu_batch(it.values.get(key)):
                            del it.values[key]
                if not finish:
                    return
                seal_tables(self.gpu.device_id)  # (one event for the stage's tables)
                it.done_event = self.gpu.record_event()
                # Device intermediates go back to the pool now, not when the consumer takes the
                # outputs (with a full output queue they were most of the memory held).
                for key in [k for k, v in it.values.items() if k not in self._output_keys and is_gpu_batch(v)]:
                    del it.values[key]
        except BaseException as e:  # noqa: BLE001
            it.error = e

    def advance_sources(self, it: Iteration, count: int, has_samples: bool = False) -> int:
        """Advance the sources by up to ``count`` samples for ``it`` (fewer where a padded
        reader's pass ends; ``has_samples``: ``it`` holds some already); returns how many."""
        if it.track is None:
            self._advance_all(it, count)
            return count
        return self.tracker.advance(it, lambda k: self._advance_all(it, k), count, has_samples)

    def _advance_all(self, it: Iteration, count: int) -> None:
        prepared = {}
        sizes = []
        for node in self.graph.source_nodes:
            inst = self.graph.instances[node.id]
            ctx = BatchContext(count, it.index, pool=self.pool)
            ctx.prepared = it.fed.get(node.instance_name)
            try:
                with self._timed("source", node):
                    prepared[node.id] = inst.advance(ctx)
            except (StopIteration, OperatorError):
                raise
            except Exception as e:
                raise annotated_error(e, node) from e
            size = getattr(inst, "last_batch_size", None)
            if size is not None:
                sizes.append(size)
        it.batch_size = sizes[0] if sizes else count
        it.prepared = prepared

    def _repair(self, it: Iteration) -> None:
        """After samples failed under on_error="skip"/"substitute", or a padded reader's pass ended
        before the batch was full: refill, substitute in place, pad (see stoker.pipeline.tracking).

        "skip" draws replacements from the readers' stream (same epoch order, so no good sample
        is lost or repeated); "substitute" puts a good sample of the batch (of the same pass) in
        the failed sample's place. Refilled samples get fresh sample indices for their random
        streams, so results stay deterministic.
        """
        tr = it.track
        target = tr.target if tr is not None else it.batch_size + it.dropped
        subs = tr.substitutes if tr is not None else []
        rounds = pad = 0
        while self._refillable and it.batch_size + len(subs) < target and rounds < _MAX_REFILL_ROUNDS:
            rounds += 1
            need = target - it.batch_size - len(subs)
            sub = Iteration(it.index, offset=target * rounds)
            sub.track = tr.child() if tr is not None else None
            if not self.advance_sources(sub, need, has_samples=it.batch_size > 0):
                pad = need  # a padded reader's pass ended: pad instead of reading the next pass
                break
            fusion.run_steps(self, self._cpu_steps, sub)
            for key, value in sub.values.items():
                it.values[key] = sample_drops.concat(it.values[key], value)
            it.batch_size += sub.batch_size
            it.reports.extend(sub.reports)
            if tr is not None:
                tr.merge(sub.track)
        if tr is not None:
            complete_batch(it, pad, sample_drops.take)
        with self._lock:
            self.error_reports.extend(it.reports)
            self.error_count += len(it.reports)
        for r in it.reports:
            _log.warning("stoker: %s sample %s at iteration %d (%s: %s)", r["action"], r["source"] or "?",
                         r["iteration"], r["operator"], r["reason"])

    def prepare_gpu_nodes(self, it: Iteration) -> None:
        """Host-side work of GPU-stage operators fed only by host data (a mixed decoder parsing
        headers and drawing crop windows), done here so that it overlaps the previous GPU stage.
        The operator gets the result as ``ctx.prepared`` in ``run_gpu``.

        Samples the host half finds bad (a mixed decoder's CPU-decoded samples under
        on_error="skip"/"substitute") are dropped and refilled as for a CPU operator, and
        the batch is prepared again."""
        for _ in range(_MAX_REFILL_ROUNDS):
            failed = self._prepare_gpu_nodes_once(it)
            if not failed:
                return
            it.reports = []  # those of the CPU stage's own repair are recorded already
            for node, ctx, n in failed:
                self.drop_samples(it, node, ctx, n)
            for node in self.graph.gpu_nodes:  # work started for the dropped batch is called off
                cancel_prepared(it.prepared.pop(node.id, None))
            self._repair(it)
        raise OperatorError("samples kept failing after several refills", operator="executor")

    def _prepare_gpu_nodes_once(self, it: Iteration) -> list:
        failed = []
        for node in self.graph.gpu_nodes:
            inst = self.graph.instances[node.id]
            prep = getattr(inst, "prepare_host", None)
            keys = [(x.source.id, x.index) for x in [*node.inputs, *node.arg_inputs.values()]]
            if prep is None or not all(k in it.values for k in keys):
                continue
            inputs = [it.values[k] for k in keys[:len(node.inputs)]]
            arg_inputs = {k: it.values[(x.source.id, x.index)].arg_samples() for k, x in node.arg_inputs.items()}
            sources = inputs[0].source_info() if inputs and hasattr(inputs[0], "source_info") else []
            ctx = BatchContext(len(inputs[0]) if inputs else it.batch_size, it.index, pool=self.pool,
                               sources=sources, device_id=self.gpu.device_id if self.gpu else None,
                               stream=self.gpu.stream if self.gpu else None)
            ctx.on_error = self.on_error
            try:
                with self._timed("prepare", node):
                    it.prepared[node.id] = prep(ctx, inputs, arg_inputs)
            except (OperatorError, StopIteration):
                raise
            except Exception as e:
                raise annotated_error(e, node) from e
            if ctx.failures:
                failed.append((node, ctx, ctx.batch_size))
                break  # the batch changes: prepare every node again once it is refilled
        return failed

    def run_node(self, node, it: Iteration, gpu: bool) -> None:
        """Run graph node ``node`` on iteration ``it``'s values (its whole batch, or its branch's
        samples) on the CPU or, with ``gpu``, the GPU stage; its outputs go to ``it.values`` and
        its failed samples are dropped (:meth:`drop_samples`). Errors name the operator."""
        inst = self.graph.instances[node.id]
        inputs = [it.values[(x.source.id, x.index)] for x in node.inputs]
        arg_inputs = {k: it.values[(x.source.id, x.index)].arg_samples() for k, x in node.arg_inputs.items()}
        in_gpu_stage = gpu
        if gpu and node.device == "cpu" and all(isinstance(x, TensorListCPU) for x in inputs):
            gpu = False  # (a CPU operator after .cpu() or after a metadata read: host data, host code)
        sources = inputs[0].source_info() if inputs and hasattr(inputs[0], "source_info") else []
        ids = conditionals.scope_sample_ids(node.scope, it) if node.scope is not None else None
        n = len(inputs[0]) if inputs else (len(ids) if ids is not None else it.batch_size)
        ctx = BatchContext(n, it.index, pool=self.pool, sources=sources,
                           stream=self.gpu.stream if gpu else None,
                           device_id=self.gpu.device_id if self.gpu else None)
        ctx.prepared = it.prepared.get(node.id)
        if gpu and inst.gpu_writes_in_place:
            ctx.donated = self._donated_inputs(node, it, inputs)
        ctx.on_error = "raise" if in_gpu_stage else self.on_error  # (a GPU stage has no way back to the readers)
        ctx.index_offset = it.offset
        ctx.sample_ids = ids
        for k, v in arg_inputs.items():
            if len(v) != n:
                raise OperatorError(f"argument '{k}' has {len(v)} samples but the batch has {n}",
                                    operator=inst.instance_name, origin=node.origin)
        try:
            outs = None
            if not in_gpu_stage and getattr(inst, "offload_cpu", False) and getattr(self, "_batch_offload", None):
                if it.deferred is not None and node.id == self._deferrable and \
                        deferred_offload.submit(self, it, node, inst, ctx, inputs, arg_inputs):
                    return
                outs = self._batch_offload.run(inst, ctx, inputs, arg_inputs)  # None: compute it here
            if outs is None:
                with self._timed("gpu" if gpu else "cpu", node):
                    outs = inst.run_gpu(ctx, inputs, arg_inputs) if gpu else inst.run_cpu(ctx, inputs, arg_inputs)
        except (OperatorError, StopIteration):
            raise
        except Exception as e:
            raise annotated_error(e, node) from e
        if ctx.failures:
            self.drop_samples(it, node, ctx, n)
        for i, out in enumerate(outs):
            it.values[(node.id, i)] = out

    def _donated_inputs(self, node, it: Iteration, inputs: list) -> frozenset:
        """The positions of ``node``'s inputs whose memory its operator may overwrite: device
        batches that ``node`` reads last (not pipeline outputs), read once by it, made fresh by
        their producer (``TensorListGPU.fresh``: no cache keeps them), and whose memory no other
        live value of the iteration shares (a view of it elsewhere would see the writes)."""
        dying = self._last_use.get(node.id, ())
        keys = [(x.source.id, x.index) for x in node.inputs]
        arg_keys = {(x.source.id, x.index) for x in node.arg_inputs.values()}
        picked = [i for i, (k, v) in enumerate(zip(keys, inputs))
                  if k in dying and keys.count(k) == 1 and k not in arg_keys and is_gpu_batch(v) and v.fresh]
        if not picked:
            return frozenset()
        mine = {i: inputs[i].memory_ids() for i in picked}
        others: set = set()
        for key, value in it.values.items():
            if key not in {keys[i] for i in picked} and is_gpu_batch(value):
                others |= value.memory_ids()
        for i in picked:  # (two picked inputs sharing memory would see each other's writes)
            others |= set().union(*(mine[j] for j in picked if j != i))
        return frozenset(i for i in picked if not mine[i] & others)

    def drop_samples(self, it: Iteration, node, ctx: BatchContext, n: int) -> None:
        """Remove the samples that failed in ``node`` (``ctx.failures``; ``n``: the size of the
        batch it ran on) from everything computed so far in ``it`` (used by fused chains too)."""
        sample_drops.drop_failed(self.graph, it, node, ctx, n)


def annotated_error(e: BaseException, node) -> OperatorError:
    return OperatorError(f"{type(e).__name__}: {e}", operator=node.args.get("name") or node.op_name,
                         origin=node.origin)
