"""Calling an operator eagerly: the same operator classes the graph uses, run now on real data.

``call("resize", [images], {"size": 224})`` checks the arguments against the
schema, takes an operator instance from a cache keyed by (operator, static
arguments, device), and runs its ``run_cpu`` (or ``run_gpu``) with a
``BatchContext`` on a shared thread pool. Nothing is copied from the
operator implementations: eager mode and pipelines share them.
"""

from __future__ import annotations

import copy
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from stoker.errors import arg_error
from stoker.operators.base import BatchContext
from stoker.operators.schema import get_operator
from stoker.pipeline.data_node import user_origin
from stoker.tensors import TensorListCPU

from ._data import Batch, Tensor, as_batch, as_tensor, is_batch_like

_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None
_num_threads = min(os.cpu_count() or 1, 8)
_cache: dict = {}
_CACHE_LIMIT = 512


def set_num_threads(n: int) -> None:
    """Threads that eager operators spread samples over (default: CPU cores, at most 8)."""
    global _pool, _num_threads
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"set_num_threads: expected a positive int, got {n!r}")
    with _lock:
        old, _pool, _num_threads = _pool, None, n
    if old is not None:
        old.shutdown(wait=False)


def get_num_threads() -> int:
    return _num_threads


def thread_pool() -> ThreadPoolExecutor | None:
    global _pool
    if _num_threads <= 1:
        return None
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(_num_threads, thread_name_prefix="stoker-eager")
        return _pool


def freeze(v):
    """A hashable stand-in for an argument value (for the instance cache)."""
    if isinstance(v, np.ndarray):
        return ("ndarray", v.dtype.str, v.shape, v.tobytes())
    if isinstance(v, (list, tuple)):
        return (type(v).__name__, tuple(freeze(x) for x in v))
    if isinstance(v, dict):
        return ("dict", tuple(sorted((k, freeze(x)) for k, x in v.items())))
    try:
        hash(v)
    except TypeError:
        return ("id", id(v))
    return (type(v).__name__, v)


def _place(op_name: str, schema, requested: str | None, any_gpu_input: bool) -> str:
    device = requested or ("gpu" if any_gpu_input else "cpu")
    if device not in ("cpu", "gpu", "mixed"):
        raise arg_error(op_name, "device", f"must be 'cpu' or 'gpu', got {device!r}")
    if device == "gpu" and "gpu" not in schema.devices and "mixed" in schema.devices:
        device = "mixed"  # eager mode says "gpu" for decoders that DALI's graph calls "mixed"
    if device not in schema.devices:
        raise arg_error(op_name, "device",
                        f"'{device}' is not available; this operator runs on {', '.join(schema.devices)}")
    if device != "cpu":
        from stoker.backend import cuda

        problem = cuda.unavailable_reason(0)
        if problem:
            raise RuntimeError(f"{op_name}(device='gpu'): no GPU can be used here ({problem}); "
                               "call it with device='cpu'")
    return device


def convert_args(op_name: str, schema, kwargs: dict) -> tuple[dict, dict]:
    """Static arguments (converted, defaults filled) and per-sample arguments (as Batches)."""
    plain = {}
    for key, value in kwargs.items():
        if isinstance(value, Tensor) and not is_batch_like(value):
            value = value.numpy()
            value = value.item() if value.ndim == 0 else value
        plain[key] = value
    static, per_sample = schema.bind(plain, is_batch_like)
    per_sample = {k: as_batch(v).cpu() for k, v in per_sample.items()}
    return static, per_sample


def instance(cls, op_name: str, static: dict, device: str):
    """The cached operator instance for these static arguments (setup() runs once per key)."""
    key = (op_name, device, freeze(static))
    inst = _cache.get(key)
    if inst is None:
        inst = cls(static, device, op_seed=0, origin="", name=static.get("name") or op_name)
        with _lock:
            if len(_cache) >= _CACHE_LIMIT:
                _cache.pop(next(iter(_cache)))
            _cache[key] = inst
    return inst


def forget(op_name: str) -> None:
    """Drop the cached instances of operator ``op_name`` (it was registered again or removed)."""
    with _lock:
        for key in [k for k in _cache if k[0] == op_name]:
            del _cache[key]


def _op_seed(schema, static: dict, rng) -> int:
    from stoker.dynamic.random import resolve_rng

    if rng is None and static.get("seed") is not None and static["seed"] >= 0:
        from stoker.random_state import mix_seed

        return mix_seed(static["seed"], 0x0505)  # the graph's rule for an explicit seed
    if rng is None and not schema.random:
        return 0
    return resolve_rng(rng).next_key()


def call(op_name: str, inputs: list, kwargs: dict):
    """Run operator ``op_name`` now on ``inputs``; returns a Tensor, a Batch or a tuple of them.

    Any Batch among the inputs or per-sample arguments (or ``batch_size=``) makes it a batch call;
    Tensors are then used for every sample. Otherwise the result is a Tensor.
    """
    cls = get_operator(op_name)
    schema = cls.schema
    kwargs = dict(kwargs)
    requested = kwargs.pop("device", None)
    rng = kwargs.pop("rng", None)
    batch_size = kwargs.pop("batch_size", None)
    if hasattr(cls, "advance"):
        raise TypeError(f"{op_name}: source operators keep state across batches; in eager mode use "
                        "stoker.dynamic.readers (e.g. readers.File(...).next_epoch(batch_size=...))")
    lo, hi = schema.inputs
    if not lo <= len(inputs) <= hi:
        want = str(lo) if lo == hi else f"{lo} to {hi}"
        raise TypeError(f"{op_name}: expected {want} positional inputs, got {len(inputs)}")
    data = [as_batch(x) if is_batch_like(x) else as_tensor(x) for x in inputs]
    static, per_sample = convert_args(op_name, schema, kwargs)
    if schema.input_count_arg:
        static[schema.input_count_arg] = len(inputs)

    sizes = {len(x) for x in data if isinstance(x, Batch)} | {len(b) for b in per_sample.values()}
    if batch_size is not None:
        sizes.add(int(batch_size))
    if len(sizes) > 1:
        raise ValueError(f"{op_name}: the inputs, per-sample arguments and batch_size disagree on the batch "
                         f"size: {sorted(sizes)}")
    batch_mode = bool(sizes)
    n = sizes.pop() if sizes else 1

    device = _place(op_name, schema, requested, any(x.device == "gpu" for x in data))
    op = copy.copy(instance(cls, op_name, static, device))
    op.origin = user_origin()
    op.op_seed = _op_seed(schema, static, rng)

    lists = []
    for x in data:
        # "mixed" operators (GPU decoders) take host inputs; "gpu" ones take device inputs.
        placed = x.gpu() if device == "gpu" else x.cpu()
        lists.append(placed.to_tensor_list() if isinstance(placed, Batch) else _broadcast(placed, n))
    arg_inputs = {k: b.to_tensor_list().samples() for k, b in per_sample.items()}
    sources = lists[0].source_info() if lists and hasattr(lists[0], "source_info") else []
    ctx = BatchContext(n, 0, pool=thread_pool(), sources=sources)
    if device == "cpu":
        outs = op.run_cpu(ctx, lists, arg_inputs)
    else:
        outs = _run_gpu(op, op_name, ctx, lists, arg_inputs)
    if batch_mode:
        result = tuple(Batch(o) for o in outs)
    else:
        result = tuple(Tensor(o[0], o.layout()) for o in outs)
    return result[0] if len(result) == 1 else result


def _broadcast(t: Tensor, n: int):
    """One tensor used for every sample of an n-sample batch (no copies)."""
    if t.device == "cpu":
        return TensorListCPU([t.numpy()] * n, t.layout)
    from stoker.tensors_gpu import TensorListGPU

    return TensorListGPU([t._data] * n, t.layout)


_gpu_contexts: dict = {}


def _run_gpu(op, op_name: str, ctx: BatchContext, lists, arg_inputs):
    from stoker.backend import cuda

    dev = cuda.cupy().cuda.runtime.getDevice()
    gpu = _gpu_contexts.get(dev)
    if gpu is None:
        gpu = _gpu_contexts[dev] = cuda.GpuContext(dev)
    ctx.stream = gpu.stream
    ctx.device_id = dev
    with gpu.activate():
        outs = op.run_gpu(ctx, lists, arg_inputs)
    gpu.stream.synchronize()  # eager results are ready when the call returns
    return outs
