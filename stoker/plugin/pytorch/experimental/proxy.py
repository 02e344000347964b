"""[Experimental] Feed a stoker pipeline from torch ``DataLoader`` workers (DALI's proxy).

A ``Dataset`` keeps its own indexing, file reading and labels, and hands the per-sample work
that should run batched (decoding, augmentation) to the pipeline through ``server.proxy``::

    with DALIServer(pipe) as server:              # pipe: external_source(name="images") -> ...
        dataset = ImageFolder(root, loader=read_bytes, transform=server.proxy)
        loader = DataLoader(server, dataset, batch_size=64, num_workers=8)
        for images, labels in loader:              # images: the pipeline's output, a torch.Tensor
            ...

How it runs (stoker's design; DALI's outputs and API, not its machinery):

1. In a worker, ``server.proxy(x)`` stores the encoded sample ``x`` and returns a placeholder
   (:class:`DALIOutputSampleRef`, one per pipeline output).
2. torch's ``default_collate`` gathers a batch's placeholders into one
   :class:`DALIPipelineRunRef` (the batch's inputs, per external source) and one
   :class:`DALIOutputBatchRef` per output; the worker sends them with the rest of the batch
   through torch's own result queue.
3. In the main process, :meth:`DALIServer.produce_data` feeds each run to the pipeline,
   batched, and puts the outputs in place of the placeholders.

The inputs travel with the batch they belong to, so there is no second queue to lose them:
a worker that dies raises torch's "worker exited unexpectedly" error, and nothing waits for
data that will not come. Runs are fed in the order the loader returns batches (a batch that
already arrived is fed ahead, so the pipeline works while the loop consumes), which makes the
outputs those of running the pipeline directly on the same batches in the same order; DALI's
``deterministic`` switch is accepted and always on.
"""

from __future__ import annotations

import inspect
from collections import deque

from torch.utils import data as _torchdata
from torch.utils.data._utils.collate import default_collate_fn_map as _default_collate_fn_map

from stoker.errors import StokerError
from stoker.plugin.pytorch import to_torch

__all__ = ["DALIServer", "DataLoader", "DALIOutputSampleRef", "DALIOutputBatchRef", "DALIPipelineRunRef"]


class _SampleInputs:
    """One sample's inputs, shared by the placeholders of all the pipeline's outputs."""

    __slots__ = ("values", "run")

    def __init__(self, values: dict):
        self.values = values
        self.run = None  # the batch it was collated into


class DALIOutputSampleRef:
    """Placeholder for output ``output_idx`` of one sample, returned by ``server.proxy(...)``."""

    def __init__(self, inputs: _SampleInputs, output_idx: int):
        self.inputs = inputs
        self.output_idx = output_idx

    def __repr__(self) -> str:
        return f"DALIOutputSampleRef(output_idx={self.output_idx}, inputs={sorted(self.inputs.values)})"


class DALIPipelineRunRef:
    """One pipeline run: a batch of inputs per external source, as collated in a worker."""

    _count = 0

    def __init__(self, call_args: dict):
        DALIPipelineRunRef._count += 1
        self.batch_id = (_torchdata.get_worker_info().id if _torchdata.get_worker_info() else -1,
                         DALIPipelineRunRef._count)
        self.call_args = call_args

    def __len__(self) -> int:
        return len(next(iter(self.call_args.values())))

    def __repr__(self) -> str:
        return f"DALIPipelineRunRef(batch_id={self.batch_id}, samples={len(self)}, inputs={sorted(self.call_args)})"


class DALIOutputBatchRef:
    """Placeholder for output ``output_idx`` of a batch; :meth:`DALIServer.produce_data` replaces it."""

    def __init__(self, pipe_run_ref: DALIPipelineRunRef, output_idx: int):
        self.pipe_run_ref = pipe_run_ref
        self.output_idx = output_idx

    def __repr__(self) -> str:
        return f"DALIOutputBatchRef({self.pipe_run_ref!r}, output_idx={self.output_idx})"


def _collate_sample_refs(samples, *, collate_fn_map=None):
    """torch collate for placeholders: the batch's inputs become one run (shared by every output)."""
    inputs = [s.inputs for s in samples]
    run = inputs[0].run
    if run is None or len(run) != len(inputs) or any(i.run is not run for i in inputs):
        names = list(inputs[0].values)
        run = DALIPipelineRunRef({name: [i.values[name] for i in inputs] for name in names})
        for i in inputs:
            i.run = run
    return DALIOutputBatchRef(run, samples[0].output_idx)


_default_collate_fn_map[DALIOutputSampleRef] = _collate_sample_refs


class _Proxy:
    """``server.proxy``: a picklable callable with the pipeline's external sources as parameters."""

    def __init__(self, names: list[str], num_outputs: int):
        self._names = list(names)
        self._num_outputs = num_outputs
        kind = inspect.Parameter.POSITIONAL_OR_KEYWORD if len(names) == 1 else inspect.Parameter.KEYWORD_ONLY
        self.__signature__ = inspect.Signature([inspect.Parameter(n, kind) for n in names])

    def __call__(self, *args, **kwargs):
        try:
            bound = self.__signature__.bind(*args, **kwargs)
        except TypeError as e:
            raise TypeError(f"DALI proxy: {e}; call it as proxy{self.__signature__} (one value per external "
                            "source of the pipeline, by name when there are several)") from None
        inputs = _SampleInputs(dict(bound.arguments))
        refs = tuple(DALIOutputSampleRef(inputs, k) for k in range(self._num_outputs))
        return refs[0] if len(refs) == 1 else refs

    def __repr__(self) -> str:
        return f"DALIProxy{self.__signature__}"


class DALIServer:
    """Runs ``pipeline`` in this process on batches that DataLoader workers collate (see the module docstring).

    Arguments:
      pipeline: a stoker pipeline whose inputs are external sources without ``source`` (fed by
        name); every one of them becomes a parameter of :attr:`proxy`.
      deterministic: accepted for DALI compatibility; runs are always fed in the loader's order.

    Use it as a context manager, or call :meth:`start_thread` / :meth:`stop_thread` (names kept
    from DALI; stoker needs no thread of its own: the pipeline's executor works in the background).
    """

    def __init__(self, pipeline, deterministic: bool = False):
        if not hasattr(pipeline, "feed_input") or not hasattr(pipeline, "_fed_only_sources"):
            raise TypeError(f"DALIServer: expected a stoker Pipeline, got {type(pipeline).__name__}")
        self._pipe = pipeline
        pipeline.build()
        self._names = list(pipeline._fed_only_sources())
        if not self._names:
            raise ValueError("DALIServer: the pipeline has no inputs to feed; give it fn.external_source(name=...) "
                             "without a source for each value the proxy should take")
        self._num_outputs = len(pipeline._outputs)
        self._deterministic = deterministic
        self._proxy = _Proxy(self._names, self._num_outputs)
        self._submitted: deque = deque()  # runs fed to the pipeline, oldest first
        self._ready: dict[int, tuple] = {}  # outputs of runs fed ahead but asked for out of order
        self._running = False

    @property
    def proxy(self) -> _Proxy:
        """The callable a Dataset calls per sample (e.g. as its ``transform``)."""
        return self._proxy

    # --- running ------------------------------------------------------------------
    def _submit(self, run: DALIPipelineRunRef) -> None:
        missing = sorted(set(self._names) - set(run.call_args))
        if missing:
            raise ValueError(f"DALI proxy: batch {run.batch_id} has no value for input(s) {missing}")
        if len(run) > self._pipe.max_batch_size:
            raise ValueError(f"DALI proxy: the loader's batch {run.batch_id} holds {len(run)} samples, more than "
                             f"the pipeline's batch_size {self._pipe.max_batch_size}; make the DataLoader's "
                             "batch_size at most the pipeline's")
        for name in self._names:
            self._pipe.feed_input(name, list(run.call_args[name]))
        self._pipe.schedule_run()
        self._submitted.append(run)

    def _outputs(self, run: DALIPipelineRunRef) -> tuple:
        key = id(run)
        if key in self._ready:
            return self._ready.pop(key)
        if not any(r is run for r in self._submitted):
            self._submit(run)
        while True:
            head = self._submitted[0]
            try:
                outs = self._pipe.outputs()
            except StopIteration:
                raise StokerError(f"DALI proxy: the pipeline ended its data on batch {head.batch_id}; a proxied "
                                  "pipeline must read only what the proxy feeds it") from None
            except Exception as e:
                # Raised as it is: torch's handler of a dead worker may interrupt this wait with its own
                # error, which must reach the user unchanged.
                if hasattr(e, "add_note"):
                    e.add_note(f"DALI proxy: while waiting for the pipeline's outputs of batch {head.batch_id}")
                raise
            self._submitted.popleft()
            converted = tuple(to_torch(o, f"#{k}", self._pipe.device_id) for k, o in enumerate(outs))
            if head is run:
                return converted
            self._ready[id(head)] = converted

    def _feed_ahead(self, runs, limit: int) -> None:
        """Feed runs that the loader will return next, so that the pipeline works meanwhile."""
        for run in runs:
            if len(self._submitted) >= limit:
                return
            if id(run) not in self._ready and not any(r is run for r in self._submitted):
                self._submit(run)

    def _drain(self) -> None:
        """Discard runs fed ahead that nobody will ask for (a loader stopped early or crashed)."""
        while self._submitted:
            self._submitted.popleft()
            try:
                self._pipe.outputs()
            except Exception:  # noqa: BLE001 - a failed run nobody asked for: nothing to report to
                pass
        self._ready.clear()

    def produce_data(self, obj):
        """``obj`` with every :class:`DALIOutputBatchRef` in it (in lists, tuples, named tuples, dicts,
        object attributes) replaced by the pipeline's output as a ``torch.Tensor``. Lists, dicts and
        objects are changed in place; tuples are rebuilt."""
        return _replace(obj, self._outputs, {})

    # --- lifetime (DALI's names) ------------------------------------------------------
    def start_thread(self) -> None:
        """Mark the server as started (kept for DALI compatibility)."""
        self._running = True

    def stop_thread(self) -> None:
        """Stop: outputs of runs fed ahead are discarded."""
        self._running = False
        self._drain()

    def _is_thread_running(self) -> bool:
        return self._running

    def __enter__(self) -> DALIServer:
        self.start_thread()
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        self.stop_thread()
        return False


def _runs_in(obj, seen=None):
    """The runs referenced in ``obj``, in order of appearance."""
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return []
    seen.add(id(obj))
    if isinstance(obj, DALIOutputBatchRef):
        return [obj.pipe_run_ref]
    if isinstance(obj, dict):
        items = obj.values()
    elif isinstance(obj, (list, tuple)):
        items = obj
    else:
        items = getattr(obj, "__dict__", {}).values()
    return [r for item in items for r in _runs_in(item, seen)]


def _replace(obj, outputs_of, memo: dict):
    if id(obj) in memo:
        return memo[id(obj)]
    if isinstance(obj, DALIOutputBatchRef):
        run_key = ("run", id(obj.pipe_run_ref))
        if run_key not in memo:
            memo[run_key] = outputs_of(obj.pipe_run_ref)
        out = memo[run_key][obj.output_idx]
    elif isinstance(obj, list):
        memo[id(obj)] = obj
        obj[:] = [_replace(x, outputs_of, memo) for x in obj]
        out = obj
    elif isinstance(obj, tuple):
        items = [_replace(x, outputs_of, memo) for x in obj]
        out = obj._make(items) if hasattr(obj, "_fields") else type(obj)(items)
    elif isinstance(obj, dict):
        memo[id(obj)] = obj
        for k in list(obj):
            obj[k] = _replace(obj[k], outputs_of, memo)
        out = obj
    elif hasattr(obj, "__dict__") and not isinstance(obj, type) and _runs_in(obj):
        memo[id(obj)] = obj
        for k, v in vars(obj).items():
            setattr(obj, k, _replace(v, outputs_of, memo))
        out = obj
    else:
        out = obj
    memo[id(obj)] = out
    return out


class DataLoader(_torchdata.DataLoader):
    """torch's ``DataLoader`` whose batches come back with the pipeline's outputs in place of the proxy's
    placeholders. Takes ``dali_server`` first, then torch's arguments (``num_workers``,
    ``persistent_workers``, ``batch_size`` at most the pipeline's, ...)."""

    def __init__(self, dali_server: DALIServer, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.dali_server = dali_server

    def _get_iterator(self):
        if self.num_workers == 0:
            return _SingleProcessIter(self)
        return _MultiProcessIter(self)


class _SingleProcessIter(_torchdata.dataloader._SingleProcessDataLoaderIter):
    def __init__(self, loader):
        loader.dali_server._drain()
        super().__init__(loader)
        self._server = loader.dali_server

    def _next_data(self):
        return self._server.produce_data(super()._next_data())


class _MultiProcessIter(_torchdata.dataloader._MultiProcessingDataLoaderIter):
    def _reset(self, loader, first_iter=False):
        # A new epoch (or a new iterator over persistent workers): runs fed ahead for an epoch that
        # was left early belong to nobody.
        loader.dali_server._drain()
        self._server = loader.dali_server
        super()._reset(loader, first_iter)

    def _next_data(self):
        try:
            data = super()._next_data()
            out = self._server.produce_data(data)
        except StopIteration:
            raise
        except BaseException:
            self._server._drain()
            raise
        self._feed_arrived()
        return out

    def _feed_arrived(self) -> None:
        """Feed the runs of batches that already arrived, in the order they will be returned."""
        if not getattr(self, "_in_order", True):
            return
        depth = self._server._pipe.prefetch_queue_depth
        limit = max(1, depth if isinstance(depth, int) else
                    int(depth.get("cpu_size", 2)) if isinstance(depth, dict) else 2)  # ("auto": not built yet)
        runs = []
        idx = self._rcvd_idx
        while idx < self._send_idx and len(runs) < limit:
            info = self._task_info.get(idx)
            if info is None or len(info) != 2 or isinstance(info[1], _torchdata._utils.ExceptionWrapper):
                break
            runs.extend(_runs_in(info[1]))
            idx += 1
        if runs:
            self._server._feed_ahead(runs, limit)
