"""``fn.external_source``: batches from Python, pulled from a ``source`` or pushed with ``feed_input``.

Sources, as in DALI:

* a per-batch callable: ``source()``, ``source(iteration)`` or, with
  ``batch_info=True``, ``source(types.BatchInfo)``;
* a per-sample callable (``batch=False``): ``source(types.SampleInfo)`` once per sample;
* an iterable (``next`` per batch, or per sample with ``batch=False``) or a
  generator function (called to get a fresh generator at each restart).

The end of data is a ``StopIteration`` from the source: ``Pipeline.run`` raises
``StopIteration`` and ``Pipeline.reset()`` starts the next epoch. ``cycle``
says what happens at the end: ``False``/"no" stop for good, ``True``/"quiet"
restart silently, "raise" stop and restart after ``reset()``.

``parallel=True`` runs a per-sample callable, or a per-batch callable taking
an argument, in ``py_num_workers`` processes that compute the next
``prefetch_queue_depth`` batches ahead; the batches are the same as with
``parallel=False``. Iterables and generator functions run in this process.

``device="gpu"`` takes device arrays (CuPy, torch CUDA, ``__cuda_array_interface__``,
DLPack) straight into the GPU stage and uploads host arrays once per batch
(:mod:`stoker.operators.readers._external_gpu`).
"""

from __future__ import annotations

import inspect
from collections import deque

import numpy as np

from stoker import types
from stoker.errors import PipelineBuildError
from stoker.operators.base import Operator
from stoker.operators.readers._external_gpu import (
    DeviceSamples,
    cupy_ndarray,
    device_array,
    device_batch,
    mark_ready,
    to_device,
)
from stoker.operators.readers._py_workers import STOP, WorkerPool
from stoker.operators.schema import Arg, Schema, register
from stoker.tensors import TensorCPU, TensorListCPU, to_numpy

_CYCLE = {False: "no", None: "no", "no": "no", True: "quiet", "quiet": "quiet", "raise": "raise"}


def _per_output(value, n: int, what: str, op: str) -> list:
    """A scalar-or-list argument as one value per output."""
    if isinstance(value, (list, tuple)):
        if len(value) > n:
            raise PipelineBuildError(f"{op}: argument '{what}' has {len(value)} values for {n} outputs")
        return list(value) + [None] * (n - len(value))
    return [value] * n


def _positional_count(fn) -> int:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return 0
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    params = sig.parameters.values()
    if any(p.kind == inspect.Parameter.VAR_POSITIONAL for p in params):
        return 1
    return sum(1 for p in params if p.kind in kinds)


@register
class ExternalSource(Operator):
    """Data from Python (``fn.external_source`` / ``ops.ExternalSource``)."""

    schema = Schema(
        name="external_source",
        doc="Data from Python: a callable, an iterable, a generator function, or batches given with "
            "Pipeline.feed_input / run(name=data).",
        args=[
            Arg("source", "any", None, doc="callable, iterable or generator function; None: use feed_input"),
            Arg("num_outputs", "int", None, doc="the source returns this many batches (a tuple) per call"),
            Arg("batch", "bool", None, doc="True: the source gives whole batches; False: one sample per call"),
            Arg("batch_info", "bool", False, doc="pass types.BatchInfo instead of the iteration number"),
            Arg("cycle", "any", None, doc="False/'no', True/'quiet' or 'raise' (see the module doc)"),
            Arg("layout", "any", None, doc="layout of the data, or one per output"),
            Arg("dtype", "any", None, doc="expected element type (checked, not converted), or one per output"),
            Arg("ndim", "any", None, doc="expected number of dimensions, or one per output"),
            Arg("no_copy", "bool", False, doc="use the source's / fed arrays without copying them (as DALI, "
                                               "parallel=True never copies)"),
            Arg("parallel", "bool", False, doc="run the callback in py_num_workers processes"),
            Arg("prefetch_queue_depth", "int", 1, doc="batches computed ahead in parallel mode"),
            Arg("blocking", "bool", False, doc="accepted for compatibility: an iteration with nothing fed is "
                                                "an error (DALI's blocking=False); stoker never waits for "
                                                "feed_input, as the data is fed before run()"),
            Arg("repeat_last", "bool", False, doc="reuse the last fed batch when nothing new was fed"),
            Arg("cuda_stream", "any", None, doc="device='gpu': the stream the source's device arrays are made on "
                                                "(a handle, CuPy or torch stream); default the legacy default "
                                                "stream"),
            Arg("use_copy_kernel", "bool", None, doc="accepted for compatibility"),
        ],
        inputs=(0, 0),
        devices=("cpu", "gpu"),
        num_outputs=lambda a: a.get("num_outputs") or 1,
        legacy_name="ExternalSource",
    )
    # With num_outputs given (even 1) DALI returns a list of DataNodes.
    schema.outputs_as_list = staticmethod(lambda a: a.get("num_outputs") is not None)

    parallel_samples = False

    # --- setup ------------------------------------------------------------------
    def setup(self):
        a = self.args
        self.label = "external_source" + (f" '{a['name']}'" if a.get("name") else "")
        # device="gpu": device arrays stay on the device, host ones are uploaded per batch (_external_gpu)
        self.on_device = self.device == "gpu"
        n = self.num_outputs
        if a["num_outputs"] is not None and a["num_outputs"] < 1:
            raise self._build_error("num_outputs", f"must be at least 1, got {a['num_outputs']}")
        if a["cycle"] not in _CYCLE:
            raise self._build_error("cycle", f"must be False, True, 'no', 'quiet' or 'raise', got {a['cycle']!r}")
        self.cycle = _CYCLE[a["cycle"]]
        self.layouts = [x or "" for x in _per_output(a["layout"], n, "layout", self.label)]
        self.dtypes = []
        for d in _per_output(a["dtype"], n, "dtype", self.label):
            try:
                self.dtypes.append(None if d in (None, types.NO_TYPE) else np.dtype(types.dtype_from_arg(d)))
            except (TypeError, ValueError):
                raise self._build_error("dtype", f"expected a data type such as types.FLOAT, got {d!r}") from None
        self.ndims = _per_output(a["ndim"], n, "ndim", self.label)
        for lay, nd in zip(self.layouts, self.ndims):
            if lay and nd is not None and len(lay) != nd:
                raise self._build_error("ndim", f"{nd} does not match layout {lay!r}")
        self.parallel = bool(a["parallel"])
        self.batch_mode = a["batch"] if a["batch"] is not None else not self.parallel
        self.copy = not (a["no_copy"] or self.parallel)
        self.epoch = 0
        self.iteration = 0  # iteration within the epoch
        self._ended = False
        self._iter = None
        self._pool = None
        self._ahead: deque = deque()  # parallel mode: (iteration, futures) submitted in advance
        self._latest = None  # repeat_last: the last fed batch
        self.last_batch_size = None
        self.max_batch_size = 1 << 62
        src = a["source"]
        self.needs_feed = src is None
        if src is None:
            self.kind = "feed"
            if self.cycle != "no":
                raise self._build_error("cycle", "needs a source")
            if self.parallel:
                raise self._build_error("parallel", "needs a source")
            return
        if a["repeat_last"]:
            raise self._build_error("repeat_last", "works only with feed_input, not with a source")
        if inspect.isgeneratorfunction(src):
            self.kind = "genfunc"
        elif callable(src):
            self.kind = "call1" if _positional_count(src) >= 1 else "call0"
            if self.cycle != "no":
                raise self._build_error("cycle", "needs an iterable or a generator function, not a callable")
        elif hasattr(src, "__iter__") or hasattr(src, "__getitem__"):
            self.kind = "iter"
            if self.cycle != "no" and iter(src) is src:
                raise self._build_error("cycle", "needs a collection that can be iterated again (iter(source) "
                                        "returns the source itself); pass a list or a generator function")
        else:
            raise self._build_error("source", f"must be a callable, an iterable or a generator function, got "
                                    f"{type(src).__name__}")
        if self.parallel and self.kind in ("call0",):
            raise self._build_error("parallel", "needs a callable that takes one argument (types.SampleInfo "
                                    "with batch=False, or the iteration / types.BatchInfo with batch=True)")

    def _build_error(self, arg: str, message: str) -> PipelineBuildError:
        where = f"\n  operator created at {self.origin}" if self.origin else ""
        return PipelineBuildError(f"{self.label}: argument '{arg}': {message}{where}")

    def bind_pipeline(self, pipe) -> None:
        """Called at build: the batch size and the worker settings of the pipeline."""
        self.max_batch_size = pipe.batch_size
        self.start_workers(pipe)

    def start_workers(self, pipe) -> None:
        """Start the worker processes of parallel mode, once (``Pipeline.start_py_workers`` calls
        this before the build, which then finds them started)."""
        if self.parallel and self.kind == "call1" and self._pool is None:
            self._pool = WorkerPool(self.args["source"], pipe.py_num_workers, pipe.py_start_method)
            try:
                self._pool.start()
            except Exception as e:  # noqa: BLE001 - pickling errors come in many types
                self._pool.close()
                self._pool = None
                raise self._build_error(
                    "parallel", f"cannot start {pipe.py_num_workers} worker process(es) with "
                    f"py_start_method={pipe.py_start_method!r}: {type(e).__name__}: {e}. With 'spawn' or "
                    "'forkserver' the source must be picklable (a module-level function or object)") from e

    # --- feeding -------------------------------------------------------------------
    def feed(self, data, layout=None, cuda_stream=None):
        """Normalize data given to feed_input / run(name=...) into one list of samples per output
        (``cuda_stream``: where fed device arrays were made, for device='gpu')."""
        if self.kind != "feed":
            raise PipelineBuildError(f"{self.label}: feed_input cannot be used with an external_source that "
                                     "has a source; remove source= to feed data")
        batches = self._split_outputs(data)
        out = [self._as_samples(b, k) for k, b in enumerate(batches)]
        if self.on_device:
            mark_ready(out, cuda_stream if cuda_stream is not None else self.args["cuda_stream"])
        if layout:
            out = (out, layout)
        if self.args["repeat_last"]:
            self.needs_feed = False  # from now on a run without new data repeats the last batch
        return out

    # --- producing batches ------------------------------------------------------------
    def advance(self, batch):
        if self.kind == "feed":
            if batch.prepared is not None and self.args["repeat_last"]:
                self._latest = batch.prepared
            fed = batch.prepared if batch.prepared is not None else self._latest
            if fed is None:
                raise ValueError(f"{self.label}: no data was fed for this iteration; call "
                                 "pipe.feed_input(name, data) or pass it to pipe.run(name=data)")
            outs = fed
        elif self.parallel and self._pool is not None:
            outs = self._advance_parallel(batch.batch_size)
        elif self.batch_mode:
            outs = self._split_outputs(self._next_batch())
            outs = [self._as_samples(b, k) for k, b in enumerate(outs)]
        else:
            outs = self._next_samples(batch.batch_size)
        layout = None
        if isinstance(outs, tuple):
            outs, layout = outs
        elif self.on_device and self.kind != "feed":  # (fed data was marked by feed())
            mark_ready(outs, self.args["cuda_stream"])
        self.iteration += 1
        sizes = {len(o) for o in outs}
        if len(sizes) != 1:
            raise TypeError(f"{self.label}: the outputs have different batch sizes {sorted(sizes)}")
        size = sizes.pop()
        if size > self.max_batch_size:
            raise ValueError(f"{self.label}: the source gave {size} samples, more than the pipeline's "
                             f"batch_size={self.max_batch_size}")
        self.last_batch_size = size
        return outs, layout

    def _next_batch(self):
        src = self.args["source"]
        try:
            if self.kind == "call0":
                return src()
            if self.kind == "call1":
                arg = types.BatchInfo(self.iteration, self.epoch) if self.args["batch_info"] else self.iteration
                return src(arg)
            return self._next_item()
        except StopIteration:
            self._ended = True
            raise

    def _next_samples(self, n: int) -> list:
        src = self.args["source"]
        samples = []
        try:
            for i in range(n):
                if self.kind in ("call0", "call1"):
                    info = types.SampleInfo(self.iteration * n + i, i, self.iteration, self.epoch)
                    samples.append(src(info) if self.kind == "call1" else src())
                else:
                    samples.append(self._next_item())
        except StopIteration:
            self._ended = True
            raise
        return self._samples_to_outputs(samples)

    def _next_item(self):
        if self._iter is None:
            src = self.args["source"]
            self._iter = iter(src() if self.kind == "genfunc" else src)
        try:
            return next(self._iter)
        except StopIteration:
            if self.cycle == "quiet":
                src = self.args["source"]
                self._iter = iter(src() if self.kind == "genfunc" else src)
                try:
                    return next(self._iter)
                except StopIteration:
                    raise ValueError(f"{self.label}: cycle=True but the source yields no data") from None
            if self.cycle == "raise":
                self._iter = None  # the next epoch starts from a fresh iterator
            raise

    def _samples_to_outputs(self, samples: list) -> list:
        n = self.num_outputs
        if self.args["num_outputs"] is None:
            per_output = [samples]
        else:
            for s in samples:
                if not isinstance(s, (tuple, list)) or len(s) != n:
                    raise TypeError(f"{self.label}: with num_outputs={n} each sample must be a tuple of {n} "
                                    f"arrays, got {type(s).__name__}")
            per_output = [[s[k] for s in samples] for k in range(n)]
        return [self._on_device([self._as_sample(x, k) for x in lst]) for k, lst in enumerate(per_output)]

    def _advance_parallel(self, n: int) -> list:
        depth = max(1, self.args["prefetch_queue_depth"])
        if self._ahead and self._ahead[0][0] != (self.epoch, self.iteration):
            self._cancel_ahead()
        nxt = self._ahead[-1][0][1] + 1 if self._ahead else self.iteration
        while nxt <= self.iteration + depth:
            self._ahead.append(((self.epoch, nxt), self._submit(nxt, n)))
            nxt += 1
        _, futures = self._ahead.popleft()
        if self.batch_mode:
            res = futures.result()
            if isinstance(res, str) and res == STOP:
                self._stop_parallel()
            outs = self._split_outputs(res)
            return [self._as_samples(b, k) for k, b in enumerate(outs)]
        samples = []
        for f in futures:
            part = f.result()
            if isinstance(part, str) and part == STOP:
                self._stop_parallel()
            samples.extend(part)
        return self._samples_to_outputs(samples)

    def _submit(self, iteration: int, n: int):
        if self.batch_mode:
            arg = types.BatchInfo(iteration, self.epoch) if self.args["batch_info"] else iteration
            return self._pool.batch(arg)
        infos = [types.SampleInfo(iteration * n + i, i, iteration, self.epoch) for i in range(n)]
        return self._pool.samples(infos)

    def _stop_parallel(self):
        self._cancel_ahead()
        self._ended = True
        raise StopIteration

    def _cancel_ahead(self):
        for _, futs in self._ahead:
            for f in (futs if isinstance(futs, list) else [futs]):
                f.cancel()
        self._ahead.clear()

    # --- normalization ---------------------------------------------------------------
    def _split_outputs(self, data) -> list:
        n = self.num_outputs
        if self.args["num_outputs"] is None:
            return [data]
        if not isinstance(data, (tuple, list)) or len(data) != n:
            raise TypeError(f"{self.label}: with num_outputs={n} the source must return a tuple of {n} batches, "
                            f"got {type(data).__name__}" + (f" of length {len(data)}" if hasattr(data, "__len__")
                                                              else ""))
        return list(data)

    def _as_samples(self, batch, k: int) -> list:
        """One output's batch (list of samples, dense array, torch tensor, TensorList) as NumPy samples
        (device='gpu': device data as device arrays)."""
        if self.on_device:
            on_gpu = device_batch(batch)
            if on_gpu is not None:
                return self._check(on_gpu, k)
        if isinstance(batch, TensorListCPU):
            samples = list(batch.samples())
        elif hasattr(batch, "as_cpu") and hasattr(batch, "samples"):  # TensorListGPU
            samples = list(batch.as_cpu().samples())
        elif isinstance(batch, (list, tuple)):
            samples = list(batch)
        elif isinstance(batch, (str, bytes, dict)) or batch is None or np.isscalar(batch):
            raise TypeError(self._type_message(batch, k, "batch"))
        else:
            try:
                dense = to_numpy(batch)
            except (TypeError, ValueError, RuntimeError):
                raise TypeError(self._type_message(batch, k, "batch")) from None
            if dense.dtype == object:
                raise TypeError(self._type_message(batch, k, "batch"))
            if dense.ndim == 0:
                raise TypeError(f"{self.label}: output {k}: a batch needs a leading sample dimension, got a "
                                "0-d array (use batch=False for a per-sample source)")
            samples = list(dense)
        return self._check(self._on_device([self._as_sample(s, k) for s in samples]), k)

    def _on_device(self, samples: list) -> list:
        """device='gpu': a list holding device arrays becomes DeviceSamples (run_gpu keeps them there)."""
        if self.on_device and any(isinstance(s, cupy_ndarray()) for s in samples):
            return DeviceSamples(samples)
        return samples

    def _as_sample(self, x, k: int) -> np.ndarray:
        if self.on_device and (not isinstance(x, np.ndarray) or isinstance(x, cupy_ndarray())):
            arr = device_array(x)
            if arr is not None:
                return arr  # (copied on the device at run time unless no_copy)
        if isinstance(x, np.ndarray):
            arr = x
        elif isinstance(x, TensorCPU) or isinstance(x, (np.generic, int, float, bool)):
            arr = np.asarray(x)
        elif isinstance(x, (str, bytes, dict, list, tuple)) or x is None:
            raise TypeError(self._type_message(x, k, "sample"))
        else:
            try:
                arr = to_numpy(x)
            except (TypeError, ValueError, RuntimeError):
                raise TypeError(self._type_message(x, k, "sample")) from None
        if arr.dtype == object or arr.dtype.kind in "USV":
            raise TypeError(self._type_message(x, k, "sample"))
        if self.copy:
            arr = np.array(arr, copy=True)
        return arr

    def _type_message(self, x, k: int, what: str) -> str:
        hint = "; for encoded bytes use np.frombuffer(data, np.uint8)" if isinstance(x, bytes) else ""
        return (f"{self.label}: output {k}: a {what} must be a NumPy array, a torch tensor or a stoker "
                f"tensor (a batch may also be a list of them), got {type(x).__name__}{hint}")

    def _check(self, samples: list, k: int) -> list:
        if not samples:
            return samples
        dtypes = {s.dtype for s in samples}
        ndims = {s.ndim for s in samples}
        if len(dtypes) > 1:
            raise TypeError(f"{self.label}: output {k}: samples differ in dtype {sorted(map(str, dtypes))}")
        if len(ndims) > 1:
            raise ValueError(f"{self.label}: output {k}: samples differ in number of dimensions {sorted(ndims)}")
        dtype, ndim = dtypes.pop(), ndims.pop()
        want = self.dtypes[k]
        if want is not None and dtype != want:
            raise TypeError(f"{self.label}: output {k}: expected dtype {want} (argument 'dtype') but the source "
                            f"gave {dtype}")
        want_nd = self.ndims[k] if self.ndims[k] is not None else (len(self.layouts[k]) or None)
        if want_nd is not None and ndim != want_nd:
            what = "'ndim'" if self.ndims[k] is not None else f"'layout'={self.layouts[k]!r}"
            raise ValueError(f"{self.label}: output {k}: expected {want_nd} dimensions (argument {what}) but "
                             f"the source gave samples of shape {samples[0].shape}")
        return samples

    # --- running ---------------------------------------------------------------------------
    def _layouts_for(self, layout, n: int) -> list[str]:
        layouts = list(self.layouts)
        if layout:
            layouts = [layout] * n if isinstance(layout, str) else list(layout)
        return [layouts[k] if k < len(layouts) else "" for k in range(n)]

    def run_cpu(self, batch, inputs, arg_inputs):
        outs, layout = batch.prepared
        return [TensorListCPU(samples, lay) for samples, lay in zip(outs, self._layouts_for(layout, len(outs)))]

    def run_gpu(self, batch, inputs, arg_inputs):
        outs, layout = batch.prepared
        copy = not self.args["no_copy"]
        return [to_device(samples, lay, batch, copy)
                for samples, lay in zip(outs, self._layouts_for(layout, len(outs)))]

    def output_layouts(self, input_layouts):
        return list(self.layouts)

    # --- epochs and checkpoints --------------------------------------------------------
    def reset(self) -> None:
        """Start the next epoch after the source ran out (called by Pipeline.reset)."""
        if not self._ended:
            return
        self._ended = False
        self._cancel_ahead()
        self.epoch += 1
        self.iteration = 0
        if self.cycle == "raise":
            self._iter = None

    def state(self) -> dict:
        if self.kind == "call1":
            return {"epoch": self.epoch, "iteration": self.iteration}
        return {}

    def set_state(self, state: dict) -> None:
        if self.kind == "call1" and state:
            self._cancel_ahead()
            self.epoch, self.iteration = int(state["epoch"]), int(state["iteration"])

    def close(self) -> None:
        if self._pool is not None:
            self._cancel_ahead()
            self._pool.close()
            self._pool = None
