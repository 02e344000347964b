"""Debug mode: ``@pipeline_def(debug=True)`` / ``Pipeline(..., debug=True)``.

The pipeline function is not traced once into a graph: it runs again at every
``run()``, and each operator call runs at once on real batches, so inside the
function every DataNode holds its batch (``print(x)``, ``x.get()``,
``x.as_array()``, ``np.asarray(x)``, ``x.shape()``...) and a debugger can step
through it.

Same results as graph mode: the i-th operator call of every run is the same
operator object (readers keep their position, caches stay warm), whose seed is
the one graph mode gives the i-th operator the definition creates
(:func:`stoker.pipeline.graph.operator_seed`). Each call runs through the
executor's own node runner, with the iteration number and sample indices graph
mode uses, so random values match graph mode's for the same seed. Per-sample
conditionals (``enable_conditionals=True``) work too: a branch's operators run
on its samples only, as in the graph.

Limits: the function must call the same operators in the same order at every
run (an error names the first call that differs); ``on_error`` must be
"raise"; no checkpoints; ``serialize()`` needs a graph-mode pipeline. It is
slow by design (one operator at a time, GPU work synchronized after each).
"""

from __future__ import annotations

import functools
import threading
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import numpy as np

from stoker.errors import PipelineBuildError, StokerError
from stoker.operators.base import BatchContext, Reader
from stoker.pipeline.data_node import DataNode, GraphRecorder, OpNode
from stoker.pipeline.executor import Executor, Iteration
from stoker.pipeline.graph import counts_in_seed_order, make_instance, operator_seed


class DebugDataNode(DataNode):
    """A DataNode of a debug-mode pipeline: its batch is already computed.

    ``get()`` returns the batch (a ``TensorListCPU``/``TensorListGPU``); the batch's own
    methods (``as_array``, ``as_tensor``, ``at``, ``layout``, ``as_cpu``...) can be called on
    the node directly. Operators, arithmetic and ``.gpu()`` on it run at once too."""

    def __init__(self, op: OpNode, index: int, device: str, it: Iteration):
        super().__init__(op, index, device)
        self._it = it

    def get(self):
        """The batch this node holds."""
        return self._it.values[(self.source.id, self.index)]

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.get(), name)

    def __len__(self) -> int:
        return len(self.get())

    def __array__(self, dtype=None, copy=None):
        batch = self.get()
        batch = batch.as_cpu() if hasattr(batch, "as_cpu") else batch
        if not batch.is_dense_tensor():
            raise ValueError(f"{self.name}: the samples differ in shape ({batch.shape()}); take them one by "
                             "one with .at(i)")
        arr = np.asarray(batch.as_array())
        return arr if dtype is None else arr.astype(dtype, copy=False)

    def __repr__(self) -> str:
        return f"DebugDataNode(name={self.name!r}, device={self.device!r}, data={self.get()!r})"

    __str__ = __repr__


class _Recorder(GraphRecorder):
    """Runs each operator call as it is recorded (see :class:`DebugRunner`)."""

    def __init__(self, runner: DebugRunner, it: Iteration):
        super().__init__()
        self.runner = runner
        self.it = it

    def add(self, node: OpNode) -> None:
        self.nodes.append(node)
        self.runner.execute(node, self.it, len(self.nodes) - 1)
        node.outputs = [DebugDataNode(node, i, d.device, self.it) for i, d in enumerate(node.outputs)]


class DebugRunner(Executor):
    """The executor of a debug-mode pipeline: runs one node at a time, when the function calls it.

    It reuses :meth:`Executor.run_node` (contexts, conditional branches, error messages), so
    it is built without the staged executor's threads and queues."""

    def __init__(self, pipe):  # (no super().__init__: no stages, queues or helper processes)
        self.pipe = pipe
        self.batch_size = pipe.batch_size
        self.on_error = "raise"
        n = pipe.num_threads
        self.pool = ThreadPoolExecutor(n, thread_name_prefix="stoker-debug") if n > 1 else None
        self.gpu = None
        self.asynchronous = False
        self._batch_offload = self._chain_workers = None
        self._last_use: dict = {}  # (no buffer donation: the user may still look at every batch)
        self._closed = False
        self._close_lock = threading.Lock()
        self._threads: list = []
        self.graph = SimpleNamespace(instances={})  # this run's node ids -> operator objects
        self.ops: list[list] = []  # per call ordinal: [op_name, device, args key, instance, seed place]
        self._gpu_ids: set[int] = set()  # this run's nodes that run on the GPU stage
        self.fed: dict[str, deque] = {}

    def begin(self) -> Iteration:
        """A new iteration: forget the previous run's nodes (their batches stay with them)."""
        self.graph.instances = {}
        self._gpu_ids = set()
        it = Iteration(self.pipe._iteration)
        it.batch_size = self.batch_size
        it.sources_seen = 0
        return it

    # --- operators by call ordinal ---------------------------------------------------
    def _instance(self, node: OpNode, ordinal: int):
        from stoker.dynamic._invoke import freeze

        key = freeze({k: v for k, v in node.args.items() if k != "name"})
        if ordinal == len(self.ops):
            k = sum(1 for op in self.ops if op[4])
            inst = self._new(node, operator_seed(self.pipe.seed, node.args, k))
            self.ops.append([node.op_name, node.device, key, inst, counts_in_seed_order(node)])
            return inst
        op_name, device, old_key, inst, _ = self.ops[ordinal]
        if (op_name, device) != (node.op_name, node.device):
            raise PipelineBuildError(
                f"debug mode: operator call #{ordinal + 1} is {node.op_name}(device='{node.device}') at "
                f"{node.origin}, but in the first run it was {op_name}(device='{device}'). The pipeline "
                "function must call the same operators in the same order at every run")
        if key != old_key and not hasattr(inst, "advance"):
            # Arguments computed from the data (debug mode allows it): a new object, same stream.
            inst = self._new(node, inst.op_seed)
            self.ops[ordinal][2:4] = [key, inst]
        return inst

    def _new(self, node: OpNode, op_seed: int):
        inst = make_instance(node, op_seed)
        if hasattr(inst, "bind_pipeline"):
            inst.bind_pipeline(self.pipe)
        if isinstance(inst, Reader):
            inst.prepare()
        return inst

    # --- running -------------------------------------------------------------------------
    def execute(self, node: OpNode, it: Iteration, ordinal: int) -> None:
        """Run ``node`` now; its outputs go to ``it.values`` as in the staged executor."""
        inst = self._instance(node, ordinal)
        self.graph.instances[node.id] = inst
        if hasattr(inst, "advance"):
            self._advance(node, inst, it)
        upstream = [x.source.id for x in node.inputs]
        if node.device in ("gpu", "mixed") or any(i in self._gpu_ids for i in upstream):
            self._gpu_ids.add(node.id)
            gpu = self._gpu_context(node)
            with gpu.activate():
                self._prepare_host(node, inst, it)
                self.run_node(node, it, gpu=True)
            gpu.stream.synchronize()  # the user may read the batch on the host right away
        else:
            self.run_node(node, it, gpu=False)

    def _advance(self, node: OpNode, inst, it: Iteration) -> None:
        ctx = BatchContext(self.batch_size, it.index, pool=self.pool)
        queued = self.fed.get(node.instance_name)
        if queued:
            data, layout = queued.popleft()
            ctx.prepared = inst.feed(data, layout)
        it.prepared[node.id] = inst.advance(ctx)
        size = getattr(inst, "last_batch_size", None)
        if it.sources_seen == 0 and size is not None:  # as the staged executor: the first source's
            it.batch_size = size
        it.sources_seen += 1

    def _prepare_host(self, node: OpNode, inst, it: Iteration) -> None:
        prep = getattr(inst, "prepare_host", None)
        if prep is None:
            return
        inputs = [it.values[(x.source.id, x.index)] for x in node.inputs]
        arg_inputs = {k: it.values[(x.source.id, x.index)].samples() for k, x in node.arg_inputs.items()}
        sources = inputs[0].source_info() if inputs and hasattr(inputs[0], "source_info") else []
        ctx = BatchContext(len(inputs[0]) if inputs else it.batch_size, it.index, pool=self.pool,
                           sources=sources, device_id=self.gpu.device_id, stream=self.gpu.stream)
        it.prepared[node.id] = prep(ctx, inputs, arg_inputs)

    def _gpu_context(self, node: OpNode):
        if self.gpu is None:
            what = f"{node.op_name}(device='{node.device}') at {node.origin}"
            if self.pipe.device_id is None:
                raise PipelineBuildError(f"{what} needs a GPU, but the pipeline was made with device_id=None")
            from stoker.backend import cuda

            problem = cuda.unavailable_reason(self.pipe.device_id)
            if problem:
                raise PipelineBuildError(f"{what} needs a GPU, but {problem}")
            self.gpu = cuda.GpuContext(self.pipe.device_id)
        return self.gpu

    def reset(self) -> None:
        for op in self.ops:
            if hasattr(op[3], "reset"):
                op[3].reset()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        first_error = None
        for op in self.ops:
            try:
                if hasattr(op[3], "close"):
                    op[3].close()
            except Exception as e:  # noqa: BLE001 - the others are closed first
                first_error = first_error or e
        if self.pool is not None:
            self.pool.shutdown(wait=True)
        if first_error is not None:
            raise first_error


class DebugMixin:
    """What a debug-mode pipeline does differently from ``Pipeline`` (mixed in by :func:`debug_class`)."""

    _debug_fn = None  # set by pipeline_def: the function with its arguments bound
    _runner: DebugRunner | None = None
    _pending_outputs: deque | None = None

    def build(self) -> None:
        if self._built:
            return
        if self._batch_size < 1:
            raise PipelineBuildError("Pipeline: batch_size must be given (a positive int)")
        if self._debug_fn is None and type(self).define_graph is _base_define_graph():
            raise PipelineBuildError(
                "debug=True needs a pipeline function to run at every iteration: use @pipeline_def(debug=True) "
                "or override define_graph() (a graph given with set_outputs() cannot be re-run)")
        if self._enable_checkpointing:
            raise PipelineBuildError("debug mode does not take checkpoints; use a graph-mode pipeline")
        if self._on_error != "raise":
            raise PipelineBuildError(f"debug mode runs with on_error='raise' only, got {self._on_error!r}")
        self._runner = DebugRunner(self)
        self._pending_outputs = deque()
        self._built = True
        from stoker.pipeline.pipeline import close_at_exit_if_open

        close_at_exit_if_open(self)

    def feed_input(self, data_node, data, layout=None, cuda_stream=None, use_copy_kernel=False) -> None:
        """Queue a batch for the external source named ``data_node`` (taken when its call runs)."""
        self.build()
        name = data_node.name if isinstance(data_node, DataNode) else data_node
        self._runner.fed.setdefault(name, deque()).append((data, layout))

    def run(self, **pipeline_inputs) -> tuple:
        """Run the pipeline function once, operator by operator; returns its outputs (batches)."""
        self.build()
        for name, data in pipeline_inputs.items():
            self.feed_input(name, data)
        self.iter_setup()
        from stoker.pipeline import pipeline as pipeline_module

        runner = self._runner
        it = runner.begin()
        stack = pipeline_module._current.__dict__.setdefault("stack", [])
        stack.append(self)
        try:
            with _Recorder(runner, it):
                outs = self._debug_fn() if self._debug_fn is not None else self.define_graph()
                if outs is None:
                    raise PipelineBuildError("the debug-mode pipeline function returned nothing; return the outputs")
                outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
                from stoker.pipeline.data_node import constant_node

                outs = [o if isinstance(o, DataNode) else constant_node(o) for o in outs]
        finally:
            stack.pop()
        self._iteration += 1
        for o in outs:
            if o.source.scope is not None:
                raise PipelineBuildError(f"output {o.name} was produced inside a branch of {o.source.scope.what} "
                                         "and not merged: assign it in both branches (or before the if)")
        return tuple(it.values[(o.source.id, o.index)] for o in outs)

    def schedule_run(self) -> None:
        """Run one iteration now (debug mode has no prefetching); :meth:`outputs` returns it."""
        self._pending_outputs_queue().append(self.run())

    def outputs(self) -> tuple:
        """The outputs of the oldest iteration run by :meth:`schedule_run`."""
        q = self._pending_outputs_queue()
        if not q:
            raise StokerError("no iteration is scheduled: call schedule_run() before outputs()")
        return q.popleft()

    share_outputs = outputs

    def _pending_outputs_queue(self) -> deque:
        self.build()
        return self._pending_outputs

    def empty(self) -> bool:
        return not self._pending_outputs

    def reset(self) -> None:
        """Start the sources' next epoch after StopIteration."""
        if self._runner is not None:
            self._runner.reset()

    def reader_meta(self, name: str | None = None) -> dict:
        """Readers' epoch sizes (known once the first run has created them)."""
        self.build()
        if self._runner is None or not self._runner.ops:
            self.run()  # the readers are made by the function: run once to have them
        readers = [op[3] for op in self._runner.ops if isinstance(op[3], Reader)]
        metas = {r.args.get("name") or r.instance_name: r.meta() for r in readers}
        if name is None:
            return metas
        if name not in metas:
            raise StokerError(f"reader_meta: no reader named {name!r} (readers: {sorted(metas)})")
        return metas[name]

    def checkpoint(self, filename=None):
        raise StokerError("checkpoint(): debug mode does not take checkpoints; use a graph-mode pipeline")

    def serialize(self, *args, **kwargs):
        raise StokerError("serialize(): a debug-mode pipeline has no graph to save; make it with debug=False")

    def start_py_workers(self) -> None:
        """Nothing to do in debug mode: the workers start with the first run."""

    def close(self) -> None:
        runner, self._runner = self._runner, None
        try:
            if runner is not None:
                runner.close()
        finally:
            super().close()

    def __del__(self):
        if getattr(self, "_runner", None) is not None:
            self._close_quietly()


def _base_define_graph():
    from stoker.pipeline.pipeline import Pipeline

    return Pipeline.define_graph


@functools.cache
def debug_class(cls: type) -> type:
    """The debug-mode version of pipeline class ``cls`` (``Pipeline`` or a subclass of it)."""
    return type(cls.__name__, (DebugMixin, cls), {"__module__": cls.__module__,
                                                  "__doc__": f"{cls.__name__} in debug mode (stoker.pipeline.debug)."})
