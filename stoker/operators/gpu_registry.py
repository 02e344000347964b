"""GPU implementations of operators whose CPU class lives elsewhere.

``Operator.run_gpu`` falls back to :func:`lookup`: a GPU module registers a
function ``impl(op, batch, inputs, arg_inputs) -> list[TensorListGPU]`` under
the operator's schema name with :func:`register_gpu`; ``op`` is the operator
instance, so the function reads the checked arguments from ``op.args``.

Operators that declare a GPU placement but have no GPU function run through
:func:`host_fallback` (copy down, the CPU implementation, copy up): correct,
and slow, so every fallback is counted in :data:`FALLBACKS`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np

_GPU_IMPLS: dict[str, Callable] = {}
FALLBACKS: Counter = Counter()


def _discover_gpu_modules() -> tuple[str, ...]:
    """The modules that register GPU functions, found rather than listed: every ``gpu_*.py`` under
    the package (this one aside), and the mixed decoders, whose GPU half is their package."""
    root = Path(__file__).resolve().parents[1]
    found = sorted(".".join(("stoker", *p.relative_to(root).with_suffix("").parts))
                   for p in root.rglob("gpu_*.py") if p.name != "gpu_registry.py")
    return ("stoker.operators.decoders.mixed", *found)


GPU_MODULES = _discover_gpu_modules()

# Operators that DALI runs on GPU batches but that have no kernel here: they would take GPU
# batches all the same (so a DALI pipeline ports), through host_fallback, with a warning once per
# operator. Empty: every such operator has a kernel (tests/operators/test_gpu_placement.py keeps
# it so). A kernel that cannot take a batch (say, a layout it does not cover) still falls back.
HOST_FALLBACK_ON_GPU: tuple[str, ...] = ()

_loaded = False


def register_gpu(name: str, devices: tuple[str, ...] = ("gpu",), prepare: Callable | None = None):
    """Decorator: ``fn`` is the GPU implementation of operator ``name`` (placed on ``devices``).

    ``prepare(op, ctx, inputs, arg_inputs)``, if given, is host-only work the
    executor runs in the CPU stage (overlapping the previous GPU stage); its
    result reaches ``fn`` as ``batch.prepared``. A result that holds resources
    (staging buffers, a device buffer permit) is a
    :class:`stoker.operators.base.HostHalf`, whose ``cancel`` the executor calls
    when the batch is dropped before its GPU stage.
    """

    def deco(fn):
        _GPU_IMPLS[name] = fn
        fn.stoker_devices = devices
        fn.stoker_prepare = prepare
        return fn

    return deco


def load_gpu_impls() -> None:
    """Import the GPU modules and add their placements to the operators' schemas."""
    global _loaded
    import importlib

    from stoker.operators.schema import find_operator, refresh_doc

    if not _loaded:
        _loaded = True
        for mod in GPU_MODULES:
            try:
                importlib.import_module(mod)
            except ModuleNotFoundError as e:
                if e.name != mod:
                    raise
    for name in HOST_FALLBACK_ON_GPU:
        cls = find_operator(name)
        if cls is not None and "gpu" not in cls.schema.devices:
            cls.schema.devices = tuple(cls.schema.devices) + ("gpu",)
            refresh_doc(cls)
    for name, fn in _GPU_IMPLS.items():
        cls = find_operator(name)
        if cls is None:
            continue
        missing = tuple(d for d in fn.stoker_devices if d not in cls.schema.devices)
        if missing:
            cls.schema.devices = tuple(cls.schema.devices) + missing
            refresh_doc(cls)
        if fn.stoker_prepare is not None and "prepare_host" not in cls.__dict__:
            cls.prepare_host = _prepare_method(fn.stoker_prepare)


def _prepare_method(prepare):
    def prepare_host(self, batch, inputs, arg_inputs):
        """Host-side preparation of the GPU implementation (see ``register_gpu``)."""
        if self.device not in ("gpu", "mixed"):
            return None
        return prepare(self, batch, inputs, arg_inputs)

    return prepare_host


def lookup(name: str) -> Callable | None:
    if not _loaded:  # (once: the loop over the registry costs more than a kernel launch)
        load_gpu_impls()
    return _GPU_IMPLS.get(name)


def host_fallback(op, batch, inputs, arg_inputs) -> list:
    """Run ``op`` on the host for a GPU batch: download, ``run_cpu``, upload."""
    from stoker.operators.transfer import upload_batch
    from stoker.tensors_gpu import TensorListGPU

    gpu_inputs = [x for x in inputs if isinstance(x, TensorListGPU)]
    if gpu_inputs and all(len(x) == 0 for x in gpu_inputs):
        # An empty batch (a per-sample if's branch no sample took): nothing to copy or wait for;
        # the CPU operator still gives the outputs' types and layouts.
        outs = op.run_cpu(batch, [x.as_cpu() if isinstance(x, TensorListGPU) else x for x in inputs], arg_inputs)
        return [upload_batch(o, batch) for o in outs]
    if FALLBACKS[op.schema.name] == 0:
        import logging

        logging.getLogger("stoker").warning(
            "%s has no GPU kernel yet: its GPU batches are copied to the host, processed there and copied "
            "back (correct, but slower than a kernel)", op.schema.name)
    FALLBACKS[op.schema.name] += 1
    if batch.stream is not None:
        batch.stream.synchronize()
    host_inputs = [x.as_cpu() if isinstance(x, TensorListGPU) else x for x in inputs]
    outs = op.run_cpu(batch, host_inputs, arg_inputs)
    return [upload_batch(o, batch) for o in outs]


def run_gpu(op, batch, inputs, arg_inputs) -> list:
    """What ``Operator.run_gpu`` does when a class does not override it."""
    impl = lookup(op.schema.name)
    if impl is not None:
        return impl(op, batch, inputs, arg_inputs)
    if type(op).run_sample is not _base_run_sample() or type(op).run_cpu is not _base_run_cpu():
        return host_fallback(op, batch, inputs, arg_inputs)
    raise NotImplementedError(f"{op.schema.name} has no GPU implementation")


def _base_run_sample():
    from stoker.operators.base import Operator

    return Operator.run_sample


def _base_run_cpu():
    from stoker.operators.base import Operator

    return Operator.run_cpu


# --- helpers for GPU modules ---------------------------------------------------

# A kernel preamble: ``stoker_dbl(v)``, any element type as a double. A template only: an overload
# for CuPy's float16 failed to compile (a preamble comes before float16 is a complete type), and
# the template converts float16 through its float() at the point of use.
DOUBLE_OF_ANY = "template <typename V> __device__ double stoker_dbl(V v) { return static_cast<double>(v); }\n"


def upload_table(table, batch):
    """A small host table (NumPy) on the device, copied asynchronously on the batch's stream."""
    from stoker.backend.cuda import current_stream
    from stoker.operators.transfer import table_arena

    table = np.ascontiguousarray(table)
    if table.nbytes > (1 << 20):  # a large table takes a staging slot of its own
        from stoker.operators.transfer import pinned_ring

        return pinned_ring(batch).upload(table, current_stream(batch))
    return table_arena(batch).upload(table, current_stream(batch))


_TABLE_ALIGN = 256  # (TableArena.ALIGN: each table of a packed upload starts as a table of its own would)


def upload_tables(batch, *tables) -> list:
    """Several small host tables on the device in one copy: views into one uploaded block, each
    with its table's type and shape. One CUDA call per operator rather than one per table: every
    CUDA call lets go of the interpreter lock, and the GPU stage then waits to get it back behind
    the pipeline's other threads (issue 16)."""
    arrays = [np.ascontiguousarray(t) for t in tables]
    sizes = [-(-a.nbytes // _TABLE_ALIGN) * _TABLE_ALIGN for a in arrays]
    if len(arrays) < 2 or sum(sizes) > (1 << 20):
        return [upload_table(a, batch) for a in arrays]
    starts = np.cumsum([0, *sizes[:-1]]).tolist()
    packed = np.zeros(sum(sizes), np.uint8)
    for a, start in zip(arrays, starts):
        packed[start:start + a.nbytes] = a.reshape(-1).view(np.uint8)
    block = upload_table(packed, batch)
    return [block[start:start + a.nbytes].view(a.dtype).reshape(a.shape) for a, start in zip(arrays, starts)]


def batch_column(op, arg_inputs, name: str, n: int, default: float) -> np.ndarray:
    """A scalar argument for every sample as a float64 (n,) array: its argument input (first
    value of each sample's tensor) or the static value, ``default`` where neither is given."""
    if name in arg_inputs:
        values = arg_inputs[name]
        try:  # one C-level step when every sample has one shape (coin flips, scalars)
            flat = np.asarray(values, np.float64).reshape(len(values), -1)
        except ValueError:  # ragged: sample by sample
            flat = None
        if flat is not None and flat.shape[1]:
            return np.ascontiguousarray(flat[:, 0])
        return np.asarray([np.ravel(v)[0] if np.size(v) else default for v in values], np.float64)
    v = op.args.get(name)
    if v is None:
        return np.full(n, default, np.float64)
    a = np.asarray(v, dtype=np.float64).reshape(-1)
    return np.full(n, a[0] if a.size else default, np.float64)


def batch_rows(op, arg_inputs, name: str, n: int, width: int, default=0.0) -> np.ndarray:
    """A vector argument for every sample as a float64 ``(n, width)`` array, in one NumPy step:
    its argument input (each sample's values, broadcast from one value) or the static value
    (broadcast), ``default`` where neither is given. Raises ValueError naming the argument when a
    sample holds neither 1 nor ``width`` values (the planner then finds which, see
    :func:`plan_batch`)."""
    if name in arg_inputs:
        values = arg_inputs[name]
        try:
            flat = np.asarray(values, np.float64).reshape(len(values), -1)
        except ValueError:  # ragged: samples differ in size
            flat = None
        if flat is None or flat.shape[1] not in (1, width):
            rows = [np.ravel(np.asarray(v, np.float64)) for v in values]
            if any(r.size not in (1, width) for r in rows):
                raise ValueError(f"argument '{name}' takes {width} values per sample (or one)")
            return np.stack([np.broadcast_to(r, (width,)) for r in rows]) if rows else np.zeros((0, width))
        return np.ascontiguousarray(np.broadcast_to(flat, (n, width)))
    v = op.args.get(name)
    a = np.asarray(default if v is None else v, np.float64).reshape(-1)
    if a.size not in (1, width):
        raise ValueError(f"argument '{name}' takes {width} values (or one), got {a.size}")
    return np.ascontiguousarray(np.broadcast_to(a, (n, width)))


def plan_batch(op, batch, n: int, whole, one):
    """A GPU implementation's host-side plan for the batch: ``whole()`` computes it for every
    sample at once with NumPy. When it raises a sample error, ``one(i)`` (the per-sample rule
    the CPU uses) is run sample by sample to find the failing sample, and that sample's error
    is raised as the CPU raises it, naming the operator and the sample's source."""
    from stoker.errors import OperatorError
    from stoker.operators.base import SAMPLE_ERRORS

    try:
        return whole()
    except OperatorError:
        raise
    except Exception as e:  # noqa: BLE001 - the per-sample rule finds the sample and says whose fault
        per_sample(op, batch, n, one)  # raises for the first failing sample
        if not isinstance(e, SAMPLE_ERRORS):
            raise
        raise OperatorError(str(e) or type(e).__name__, operator=op.instance_name, origin=op.origin) from e


def per_sample(op, batch, n: int, compute) -> list:
    """``[compute(i) for i in range(n)]`` for a GPU implementation's host-side tables (arguments,
    windows, matrices). A failure is raised as the CPU path raises it: an OperatorError naming the
    operator and the sample's source."""
    from stoker.errors import OperatorError

    out = []
    for i in range(n):
        try:
            out.append(compute(i))
        except OperatorError:
            raise
        except Exception as e:  # noqa: BLE001 - bad data or a bug: sample_failure says which
            raise op.sample_failure(e, batch, i) from e
    return out


def contiguous_samples(x):
    """``x`` (a TensorListGPU) with every sample contiguous: batches in one buffer already are,
    list-backed ones may hold strided views, which are copied."""
    from stoker.backend import cuda
    from stoker.tensors_gpu import TensorListGPU

    if x.flat_parts() is not None:
        return x
    samples = x.samples()
    if all(s.flags.c_contiguous for s in samples):
        return x
    cp = cuda.cupy()
    return TensorListGPU([cp.ascontiguousarray(s) for s in samples], x.layout(), x.source_info())


def dense_view(x):
    """Batch ``x`` (a TensorListGPU) as one ``(N, ...)`` CuPy array without a copy, when its
    samples share a shape and lie back to back in one buffer; else None."""
    parts = x.flat_parts()
    if parts is None or len(x) == 0:
        return None
    buf, offsets, shapes = parts
    if not (shapes == shapes[0]).all():
        return None
    per = int(np.prod(shapes[0], dtype=np.int64))
    if not np.array_equal(offsets, np.arange(len(x), dtype=np.int64) * per):
        return None
    return buf[:per * len(x)].reshape((len(x), *shapes[0].tolist()))


def flat_output(shapes, sizes, dtype, layout: str, source_info):
    """A batch's output as one flat device buffer: ``(buffer, element offsets, TensorListGPU)``
    for samples of ``shapes`` holding ``sizes`` elements each."""
    from stoker.backend import cuda
    from stoker.tensors_gpu import TensorListGPU

    cp = cuda.cupy()
    sizes = np.asarray(sizes, np.int64)
    offsets = flat_offsets(sizes)
    buf = cp.empty(max(int(sizes.sum()), 1), dtype)
    shapes = np.asarray(shapes, np.int64).reshape(len(sizes), -1)
    return buf, offsets, TensorListGPU.from_flat(buf, offsets, shapes, layout, source_info)


def flat_offsets(sizes) -> np.ndarray:
    """Start of each of ``sizes`` when they are laid back to back (int64)."""
    sizes = np.asarray(sizes, np.int64).reshape(-1)
    out = np.zeros(sizes.size, np.int64)
    np.cumsum(sizes[:-1], out=out[1:])
    return out


def sample_geometry(arr):
    """(pointer, row stride in bytes, H, W, C) of an HWC (or HW) CuPy sample."""
    if arr.ndim == 2:
        h, w = arr.shape
        c = 1
    else:
        h, w, c = arr.shape
    if arr.ndim == 3 and (arr.strides[2] != arr.itemsize or arr.strides[1] != c * arr.itemsize):
        raise ValueError("GPU image kernels need samples whose pixels are contiguous (HWC, no channel stride)")
    return arr.data.ptr, arr.strides[0], h, w, c


def grid_for(max_pixels: int, n: int, block: int = 256):
    return ((max(1, max_pixels) + block - 1) // block, n, 1), (block, 1, 1)

