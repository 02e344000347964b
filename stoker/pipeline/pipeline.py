"""``Pipeline`` and ``@pipeline_def``: DALI's way of defining and running a data pipeline."""

from __future__ import annotations

import atexit
import functools
import inspect
import json
import os
import sys
import threading
import weakref
from collections import deque

from stoker import settings
from stoker.errors import PipelineBuildError, StokerError
from stoker.pipeline import checkpoint as checkpoint_format
from stoker.pipeline import executor as executor_module
from stoker.pipeline import tuning
from stoker.pipeline.data_node import DataNode, GraphRecorder
from stoker.pipeline.executor import Executor
from stoker.pipeline.graph import Graph
from stoker.pipeline.pipeline_extras import PipelineExtras
from stoker.pipeline.tuning import AUTO

_current = threading.local()
# Built pipelines not closed yet, and the threads closing the ones garbage collected (__del__):
# both are finished by _close_at_exit before the interpreter finalizes.
_live_pipelines: weakref.WeakSet = weakref.WeakSet()
_closing_threads: set = set()


def close_at_exit_if_open(pipe) -> None:
    """Have :func:`_close_at_exit` close ``pipe`` if it is still open when the program ends (it is
    held weakly: a pipeline collected before then is not kept alive)."""
    _live_pipelines.add(pipe)


def _close_at_exit() -> None:
    """Close every pipeline left open when the program ends (registered with atexit).

    atexit runs after the program's non-daemon threads have ended and before the interpreter
    finalizes. At finalization a daemon stage thread still inside OpenCV or torch would abort
    the process when it comes back (see :func:`stoker.pipeline.executor.close_all`), so the
    pipelines are closed here: their threads joined, their helper processes reaped."""
    for pipe in list(_live_pipelines):
        pipe._close_quietly()
    executor_module.close_all()  # executors of pipelines collected but still closing
    for t in list(_closing_threads):
        t.join(timeout=30)


def _forget_after_fork() -> None:
    """In a forked child: its exit leaves the parent's pipelines alone (it has none of their
    threads, and their helper processes are the parent's children)."""
    _live_pipelines.clear()
    _closing_threads.clear()


def _close_first_at_exit() -> None:
    """Make :func:`_close_at_exit` the last atexit handler registered, so that it runs first.

    atexit runs its handlers last-registered-first, and libraries imported after stoker register
    theirs later: CuPy's, for one, tears down state (FFT plans, memory pools) that a stage thread
    may still be using, which crashed a GPU audio pipeline at exit with SIGSEGV. This runs in
    ``threading``'s shutdown step, after every import and before any atexit handler."""
    atexit.unregister(_close_at_exit)
    atexit.register(_close_at_exit)


atexit.register(_close_at_exit)
# (a private hook of the threading module, the one concurrent.futures uses for its workers)
if callable(getattr(threading, "_register_atexit", None)):
    try:
        threading._register_atexit(_close_first_at_exit)
    except RuntimeError:  # stoker imported while the interpreter shuts down: atexit order as is
        pass
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)


class Pipeline(PipelineExtras):
    """A data pipeline: a graph of operators run batch by batch.

    Arguments follow DALI's ``Pipeline``; all of DALI's are accepted. Those that
    matter here: ``batch_size``, ``num_threads`` (CPU thread pool), ``device_id``
    (None: CPU only), ``seed`` (every random value is a function of it, the
    operator, the iteration and the sample), ``prefetch_queue_depth`` (int or
    ``{"cpu_size", "gpu_size"}``), ``exec_pipelined`` and ``exec_async`` (run
    ahead in background threads), ``enable_checkpointing`` / ``checkpoint``
    (exact resume), ``on_error`` (stoker's per-sample policy for bad data) and
    ``max_pixels`` (stoker's default pixel limit of the image decoders; None: 2**28).
    ``num_threads="auto"`` / ``prefetch_queue_depth="auto"``: chosen at build from a short measured
    warm-up (``STOKER_TUNE_SECONDS``) that leaves the batches as a fixed setting gives them;
    :meth:`tuning` says what was chosen and why (:mod:`stoker.pipeline.tuning`).

    ``on_error``: "raise" (default) stops at a bad sample with an OperatorError naming the
    operator, where it was created and the file. "skip" drops bad samples (corrupt files, and
    folder entries the reader found unreadable when listing) and refills the batch from the same
    stream, so batches stay full and no good sample is lost or repeated; :meth:`error_report`
    lists what was dropped. Epochs: with a framework iterator given ``reader_name`` no batch mixes
    two reader passes, and each epoch delivers every good sample of its pass exactly once under
    every last-batch policy (FILL repeats the pass's last good sample to fill the last batch,
    PARTIAL shortens it, DROP drops it; with several pipelines under FILL, one whose pass ends
    first fills the remaining steps from its next pass). Without ``reader_name`` epochs are sample
    counts that drift against the passes (the iterator warns). "substitute" puts a good sample of
    the batch in a bad one's place (``fn.valid_mask()`` marks it).

    ``checkpoint``: the text of :meth:`checkpoint` (or its dict), or a list of them, one per rank of
    another world size (:func:`stoker.pipeline.checkpoint.resharded`). It must come from this pipeline
    (same seed, readers, data sets, stoker version: its fingerprint) or the build raises a
    CheckpointError saying what differs; without ``seed``, the checkpoint's seed is used.

    ``debug=True``: the definition runs again at every ``run()``, one operator at a time on real
    batches, with graph mode's results (:mod:`stoker.pipeline.debug`).
    """

    def __new__(cls, *args, debug=False, **kwargs):
        if debug:
            from stoker.pipeline.debug import debug_class

            cls = debug_class(cls)
        return super().__new__(cls)

    def __init__(self, batch_size=None, num_threads=None, device_id=None, seed=None, exec_pipelined=True,
                 prefetch_queue_depth=2, exec_async=True, bytes_per_sample=0, set_affinity=False,
                 max_streams=None, default_cuda_stream_priority=None, *, enable_memory_stats=False,
                 enable_checkpointing=False, checkpoint=None, py_num_workers=1, py_start_method="fork",
                 py_callback_pickler=None, output_dtype=None, output_ndim=None, output_layout=None,
                 exec_dynamic=None, experimental_exec_dynamic=None, stream_policy=None, concurrency=None,
                 on_error="raise", max_pixels=None, debug=False):
        if batch_size is None or batch_size == -1:
            batch_size = -1
        elif isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise PipelineBuildError(f"Pipeline: batch_size must be a positive int, got {batch_size!r}")
        self._num_threads, self._prefetch_queue_depth, self._cpu_queue, self._gpu_queue = \
            tuning.check_arguments(num_threads, prefetch_queue_depth)  # (None, "auto": tuned at build)
        self._auto: set = set()  # the settings tuned at build
        self._tuning: dict | None = None  # what tuning() reports
        if device_id is not None and device_id != -1 and (isinstance(device_id, bool) or
                                                         not isinstance(device_id, int) or device_id < 0):
            raise PipelineBuildError(f"Pipeline: device_id must be a GPU index or None, got {device_id!r}")
        if on_error not in ("raise", "skip", "substitute"):
            raise PipelineBuildError(f"Pipeline: on_error must be 'raise', 'skip' or 'substitute', got {on_error!r}")
        if max_pixels is not None and (isinstance(max_pixels, bool) or not isinstance(max_pixels, int)
                                       or max_pixels < 0):
            raise PipelineBuildError(f"Pipeline: max_pixels must be an int >= 0 (0: no limit), got {max_pixels!r}")
        self._max_pixels = max_pixels
        self._batch_size = batch_size
        self._device_id = None if device_id in (None, -1) else device_id
        # (a checkpoint's structure is checked now, whether it comes from this pipeline at build)
        self._checkpoint = checkpoint_format.restorable(checkpoint)
        if seed is None or seed == -1:
            # Resuming without a seed: the checkpoint's, for the random streams it was taken in.
            saved = (self._checkpoint or {}).get("fingerprint") or {}
            seed = saved["seed"] if isinstance(saved.get("seed"), int) else int.from_bytes(os.urandom(4), "little")
        self._seed = int(seed)
        self._fingerprint: dict | None = None  # of this pipeline's checkpoints (made once, at first use)
        self._exec_pipelined = bool(exec_pipelined)
        self._exec_async = bool(exec_async) and self._exec_pipelined
        self._enable_checkpointing = enable_checkpointing or checkpoint is not None
        self._py_num_workers = py_num_workers
        self._py_start_method = py_start_method
        self._on_error = on_error
        self._outputs: list[DataNode] | None = None
        self._recorded: list = []
        self._graph: Graph | None = None
        self._instances_closed = False  # close() has closed the graph's operators
        self._close_lock = threading.Lock()  # close() from GC's thread and from exit at once
        self._executor: Executor | None = None
        self._built = False
        self._first_iter = True
        self._iteration = 0  # next iteration to schedule
        self._fed: dict[str, deque] = {}
        self._last_state: dict | None = None
        self._last_track = None  # per-sample bookkeeping of the last batch (on_error skip/substitute)
        self._closed_errors: tuple[list, int] | None = None  # error_report() after close()
        self._gpu = None
        if debug:
            tuning.settle_for_debug(self)

    # --- properties -----------------------------------------------------
    @property
    def batch_size(self) -> int:
        return self._batch_size

    @property
    def max_batch_size(self) -> int:
        return self._batch_size

    @property
    def num_threads(self) -> int | str:
        """The CPU thread pool's size ("auto" until an "auto" pipeline is built and tuned)."""
        return AUTO if self._num_threads is None else self._num_threads

    @property
    def device_id(self) -> int | None:
        return self._device_id

    @property
    def seed(self) -> int:
        return self._seed

    @property
    def exec_pipelined(self) -> bool:
        return self._exec_pipelined

    @property
    def exec_async(self) -> bool:
        return self._exec_async

    @property
    def prefetch_queue_depth(self):
        return self._prefetch_queue_depth

    @property
    def py_num_workers(self) -> int:
        return self._py_num_workers

    @property
    def py_start_method(self) -> str:
        return self._py_start_method

    @property
    def on_error(self) -> str:
        return self._on_error

    @property
    def max_pixels(self) -> int | None:
        """Default pixel limit of the image decoders in this pipeline (None: theirs, 2**28)."""
        return self._max_pixels

    # --- definition -----------------------------------------------------
    @staticmethod
    def current() -> Pipeline | None:
        """The pipeline whose graph is being defined on this thread (inside ``with pipe:``)."""
        stack = getattr(_current, "stack", None)
        return stack[-1] if stack else None

    def __enter__(self):
        if not hasattr(_current, "stack"):
            _current.stack = []
        _current.stack.append(self)
        self._recorder = GraphRecorder().__enter__()
        return self

    def __exit__(self, *exc):
        self._recorder.__exit__(*exc)
        self._recorded.extend(self._recorder.nodes)
        _current.stack.pop()

    def set_outputs(self, *outputs) -> None:
        """Declare the pipeline's outputs (DataNodes, or constants)."""
        flat = []
        for o in outputs:
            if isinstance(o, (list, tuple)):
                flat.extend(o)
            else:
                flat.append(o)
        from stoker.pipeline.data_node import constant_node

        self._outputs = [o if isinstance(o, DataNode) else constant_node(o) for o in flat]

    def define_graph(self):
        """Override in a subclass (legacy style) to return the output DataNodes."""
        raise PipelineBuildError(
            "Pipeline has no graph: decorate a function with @pipeline_def, call set_outputs(), "
            "or subclass Pipeline and override define_graph()")

    def iter_setup(self) -> None:
        """Override in a subclass to feed external sources before each iteration."""

    # --- build ----------------------------------------------------------
    def build(self) -> None:
        """Trace (if needed), check and instantiate the graph, and start the executor."""
        if self._built:
            return
        if self._batch_size < 1:
            raise PipelineBuildError("Pipeline: batch_size must be given (a positive int)")
        self._trace()
        graph = self.__dict__.pop("_early_graph", None) or Graph(self._outputs, self._recorded, self._seed)
        if graph.gpu_nodes:
            self._gpu = self._open_gpu(graph)
        tuning.settle(self, bool(graph.gpu_nodes))  # ("auto": provisional values, tuned below)
        for node in graph.nodes:
            inst = graph.instances[node.id]
            if hasattr(inst, "bind_pipeline"):
                inst.bind_pipeline(self)
        for _, reader in graph.readers():
            reader.prepare()
        if self._checkpoint is not None:
            self._fingerprint = checkpoint_format.fingerprint(graph, self._seed)
            checkpoint_format.verify(self._checkpoint, self._fingerprint, stacklevel=3)
            graph.set_source_state(self._checkpoint)
            self._iteration = int(self._checkpoint.get("iteration", 0))
            self._last_state = self._checkpoint
        self._graph = graph
        self._instances_closed = False
        self._executor = tuning.executor_for(self, graph)  # (measures candidates where "auto")
        self._built = True
        close_at_exit_if_open(self)

    def _open_gpu(self, graph: Graph):
        first = graph.gpu_nodes[0]
        what = "'.gpu()'" if first.op_name == "_to_gpu" else f"{first.op_name}(device='{first.device}')"
        if self._device_id is None:
            raise PipelineBuildError(
                f"{what} at {first.origin} needs a GPU, but the pipeline was made with device_id=None "
                "(CPU only). Pass device_id=0 on a machine with a GPU, or use device='cpu' for this operator.")
        from stoker.backend import cuda

        problem = cuda.unavailable_reason(self._device_id)
        if problem:
            raise PipelineBuildError(
                f"{what} at {first.origin} needs a GPU, but {problem}. Use device='cpu' for this operator "
                "(and no .gpu()), or run where CUDA and cupy are installed.")
        return cuda.GpuContext(self._device_id)

    # --- running --------------------------------------------------------
    def feed_input(self, data_node, data, layout=None, cuda_stream=None, use_copy_kernel=False) -> None:
        """Give the next batch to the external source named ``data_node`` (a name or its DataNode)."""
        self.build()
        name = data_node.name if isinstance(data_node, DataNode) else data_node
        try:
            inst = self._graph.instance(name)
        except KeyError as e:
            raise StokerError(f"feed_input: {e.args[0]}") from None
        if not hasattr(inst, "feed"):
            raise StokerError(f"feed_input: operator {name!r} is not an external source")
        self._fed.setdefault(name, deque()).append(inst.feed(data, layout, cuda_stream))

    def _fed_only_sources(self) -> list[str]:
        return [n.instance_name for n in self._graph.source_nodes
                if getattr(self._graph.instances[n.id], "needs_feed", False)]

    def _schedule_one(self) -> bool:
        self.iter_setup()
        fed = {}
        for name in self._fed_only_sources():
            q = self._fed.get(name)
            if not q:
                return False
            fed[name] = q.popleft()
        for name, q in self._fed.items():  # optional feeds (external_source repeat_last): newest data if any
            if name not in fed and q:
                fed[name] = q.popleft()
        self._executor.schedule(fed, self._iteration)
        self._iteration += 1
        return True

    def schedule_run(self) -> None:
        """Schedule iterations: the first call fills the prefetch queue, later calls add one."""
        self.build()
        if self._first_iter and self._exec_pipelined:
            self._first_iter = False
            depth = self._cpu_queue
            if self._graph.gpu_nodes and self._exec_async and settings.get().stage_queues:
                # A queue per stage, as DALI describes prefetch_queue_depth: up to cpu_size batches
                # done by the CPU stage and gpu_size by the GPU stage (the executor holds the GPU
                # stage there), so the CPU stage (and the mixed decoders' helper processes and
                # engine calls) work up to cpu_size batches ahead of the GPU stage.
                # STOKER_STAGE_QUEUES=0: one queue of cpu_size, as before (benchmarks/results_log.md).
                depth += self._gpu_queue
            for k in range(depth):
                if not self._schedule_one():
                    if k == 0:
                        missing = [n for n in self._fed_only_sources() if not self._fed.get(n)]
                        raise StokerError(
                            f"external source(s) {missing} have no data: call feed_input() "
                            "(or pass it to run() as a keyword argument) before running")
                    break
        else:
            self._first_iter = False
            if not self._schedule_one() and self._executor.pending == 0:
                missing = [n for n in self._fed_only_sources() if not self._fed.get(n)]
                raise StokerError(f"external source(s) {missing} have no data: call feed_input() first")

    def outputs(self) -> tuple:
        """The outputs of the oldest scheduled iteration (blocks until it is ready)."""
        it = self._executor.pop()
        if it.error is not None:
            if isinstance(it.error, StopIteration):
                raise StopIteration
            raise it.error
        self._last_state = it.state
        self._last_track = it.track
        outs = []
        for o in self._outputs:
            val = it.values[(o.source.id, o.index)]
            if it.done_event is not None and hasattr(val, "set_ready_event"):
                val.set_ready_event(it.done_event)
            outs.append(val)
        return tuple(outs)

    share_outputs = outputs

    def release_outputs(self) -> None:
        """Kept for DALI compatibility: stoker's outputs stay valid, so nothing to release."""

    def run(self, **pipeline_inputs) -> tuple:
        """Run one iteration and return its outputs (keyword arguments feed named external sources)."""
        self.build()
        for name, data in pipeline_inputs.items():
            self.feed_input(name, data)
        self.schedule_run()
        return self.outputs()

    def reset(self) -> None:
        """After StopIteration from an external source: discard pending work and start the next epoch.

        Does nothing while the data has not ended (as DALI), so batches already
        prepared are never lost by a reset in mid-stream.
        """
        if not self._built or not self._executor.ended:
            return
        self._executor.drain()
        for node in self._graph.source_nodes:
            inst = self._graph.instances[node.id]
            if hasattr(inst, "reset"):
                inst.reset()
        self._first_iter = True

    # --- introspection ------------------------------------------------
    def error_report(self) -> list[dict]:
        """Samples skipped or substituted so far (on_error="skip"/"substitute").

        Each entry: ``source`` (file path or record), ``operator``, ``reason``,
        ``iteration``, ``action`` and ``epoch`` (the reader pass the sample was read in; None
        without a reader). A ``source`` or ``reason`` holding control characters (a newline in a
        file name) is escaped as ``repr`` writes it (:func:`stoker.errors.printable`), as in the
        log. Only the latest 10,000 are kept; :meth:`error_count` counts them all.
        The report outlives :meth:`close`. Under "substitute", ``fn.valid_mask()`` marks the
        replaced samples in the batch.
        """
        if self._executor is None:
            return list(self._closed_errors[0]) if self._closed_errors else []
        with self._executor._lock:
            return list(self._executor.error_reports)

    def error_count(self) -> int:
        """How many samples were skipped or substituted so far (all of them, unlike error_report)."""
        if self._executor is None:
            return self._closed_errors[1] if self._closed_errors else 0
        return self._executor.error_count

    def checkpoint(self, filename: str | None = None) -> str:
        """A small serialized state from which ``Pipeline(..., checkpoint=state)`` resumes exactly."""
        self.build()
        if not self._enable_checkpointing:
            raise StokerError("checkpoint(): create the pipeline with enable_checkpointing=True")
        state = self._last_state or self._graph.source_state(self._iteration)
        text = json.dumps({**state, "fingerprint": self.fingerprint()})
        if filename:
            with open(filename, "w") as f:
                f.write(text)
        return text

    def restore_checkpoint(self, checkpoint) -> None:
        """Move a built pipeline to ``checkpoint`` (from :meth:`checkpoint`); scheduled work is discarded.

        The in-place counterpart of ``Pipeline(..., checkpoint=...)``, used by the framework
        iterators' ``load_state_dict``.
        """
        state = dict(checkpoint_format.parse(checkpoint))
        self.build()
        checkpoint_format.verify(state, self.fingerprint(), stacklevel=3)
        self._executor.drain()
        self._graph.set_source_state(state)
        self._iteration = int(state.get("iteration", 0))
        self._checkpoint = self._last_state = state
        self._first_iter = True

    def fingerprint(self) -> dict:
        """What this pipeline's checkpoints carry to be told apart from another pipeline's: seed,
        sources' names, readers' data set sizes and file list hashes, stoker version (see
        :mod:`stoker.pipeline.checkpoint`). A checkpoint whose fingerprint differs is refused."""
        if self._graph is None:
            self.build()
        if self._fingerprint is None:
            self._fingerprint = checkpoint_format.fingerprint(self._graph, self._seed)
        return self._fingerprint

    @property
    def is_restored_from_checkpoint(self) -> bool:
        """Whether the pipeline started from a checkpoint."""
        return self._checkpoint is not None

    def empty(self) -> bool:
        """True when no scheduled iteration is waiting to be consumed."""
        return self._executor is None or self._executor.pending == 0

    # --- teardown --------------------------------------------------------
    def close(self) -> None:
        """Stop worker threads and helper processes and release resources; safe to call twice.

        Also done at garbage collection and, for pipelines still open, at interpreter exit (an
        atexit hook), so a script that never calls it still exits cleanly."""
        with self._close_lock:
            first_error = None
            if self._executor is not None:
                self._executor.close()
                # Keep what was recorded: error_report() is often read after the run is over.
                with self._executor._lock:
                    self._closed_errors = (list(self._executor.error_reports), self._executor.error_count)
                self._executor = None
            if self._graph is not None and not self._instances_closed:
                self._instances_closed = True
                for inst in self._graph.instances.values():
                    try:  # one operator failing to close leaves the others' processes running
                        if hasattr(inst, "close"):
                            inst.close()
                    except Exception as e:  # noqa: BLE001 - raised below, after the others
                        first_error = first_error or e
            _live_pipelines.discard(self)
            if first_error is not None:
                raise first_error

    def __del__(self):
        # Garbage collection runs this on whatever thread allocates at the time, possibly one that
        # another thread waits for while holding a lock the pipeline's threads need (seen:
        # ThreadPoolExecutor.submit holds its module-wide lock while it waits for a new pool
        # thread to start; the collection ran in that new thread, and close() then waited for a
        # stage thread blocked on that lock). So the closing, which joins threads, runs on a
        # thread of its own.
        # At interpreter exit no new thread can start: close here (other threads are stopped).
        if getattr(self, "_executor", None) is None and (getattr(self, "_graph", None) is None
                                                         or getattr(self, "_instances_closed", True)):
            return  # never built, or closed already
        if sys.is_finalizing():
            self._close_quietly()
            return
        t = threading.Thread(target=self._close_in_thread, name="stoker-close", daemon=True)
        _closing_threads.add(t)  # (joined at exit: _close_at_exit)
        try:
            t.start()
        except RuntimeError:  # no new threads any more
            _closing_threads.discard(t)
            self._close_quietly()

    def _close_in_thread(self) -> None:
        try:
            self._close_quietly()
        finally:
            _closing_threads.discard(threading.current_thread())

    def _close_quietly(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


def pipeline_def(fn=None, *, enable_conditionals: bool = False, **pipeline_kwargs):
    """Decorator: turn a graph-defining function into a pipeline factory.

    Decorator keyword arguments are Pipeline defaults; keyword arguments at call
    time override them. The remaining call arguments go to the function::

        @pipeline_def(batch_size=32)
        def train(root):
            jpegs, labels = fn.readers.file(file_root=root)
            return fn.decoders.image(jpegs), labels

        pipe = train("data/", num_threads=4, device_id=None)
    """
    def decorate(func):
        if enable_conditionals:  # per-sample if/and/or/not: see stoker.pipeline.conditionals
            from stoker.pipeline.conditionals_ast import convert

            func = convert(func)
        params = set(inspect.signature(Pipeline.__init__).parameters) - {"self"}
        func_params = set(inspect.signature(func).parameters)

        @functools.wraps(func)
        def factory(*args, **kwargs):
            pipe_kw = dict(pipeline_kwargs)
            fn_kw = {}
            for k, v in kwargs.items():
                if k in params and k not in func_params:
                    pipe_kw[k] = v
                else:
                    fn_kw[k] = v
            pipe = Pipeline(**pipe_kw)
            if pipe_kw.get("debug"):  # run at every run() instead of traced once
                pipe._debug_fn = functools.partial(func, *args, **fn_kw)
                return pipe
            with pipe:
                outs = func(*args, **fn_kw)
            if outs is None:
                raise PipelineBuildError(f"@pipeline_def function {func.__name__} returned nothing; "
                                         "return the output DataNodes")
            if not isinstance(outs, (list, tuple)):
                outs = [outs]
            pipe.set_outputs(*outs)
            return pipe

        factory._is_pipeline_def = True
        return factory

    return decorate(fn) if fn is not None else decorate
