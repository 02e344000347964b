"""A null CUDA device for machines without a GPU: a stand-in ``cupy`` module built on NumPy.

Device arrays are NumPy arrays in host memory whose ``.data.ptr`` is their real address, so
stoker's host-side GPU code (argument tables, windows, flat output buffers, pinned uploads, which
become real ``memmove`` copies) runs as it does on a GPU. Kernel launches are recorded in
:data:`LAUNCHES` and do nothing (but the few in :data:`EMULATED`): outputs hold whatever the
allocator left there. That makes it
fit for checking the host half of a GPU operator (its planning, the tables it uploads, how its
cost grows with the batch), never its pixels; those are checked against the CPU on a real GPU
(tests marked ``gpu``).

Use :func:`installed` as a context manager (tests use the ``null_cupy`` fixture).
"""

from __future__ import annotations

import contextlib
import ctypes
import itertools
import sys
import threading
import types

import numpy as np

LAUNCHES: list[tuple[str, tuple, tuple]] = []  # (kernel name, grid, block) per launch
_handles = itertools.count(0x1000)


class _MemPtr:
    __slots__ = ("ptr", "mem")

    def __init__(self, ptr: int, mem=None):
        self.ptr = int(ptr)
        self.mem = mem

    def __int__(self) -> int:
        return self.ptr


class ndarray(np.ndarray):  # noqa: N801 - CuPy's name
    """A NumPy array posing as a device array (``.data.ptr``, ``.get()``, ``.device``)."""

    @property
    def data(self):
        # .mem: the allocation (the end of the view chain), as CuPy's views share their memory's
        root = self
        while isinstance(getattr(root, "base", None), np.ndarray):
            root = root.base
        return _MemPtr(self.__array_interface__["data"][0], root)

    def get(self, stream=None, out=None):
        host = np.array(self, copy=True).view(np.ndarray)
        if out is not None:
            out[...] = host
            return out
        return host

    def set(self, host, stream=None):
        self[...] = host

    @property
    def device(self):
        return Device(0)

    @property
    def __cuda_array_interface__(self):
        return dict(self.__array_interface__, version=3, stream=None)


def _dev(x):
    """NumPy results as stand-in device arrays (tuples and lists element by element)."""
    if isinstance(x, np.ndarray) and not isinstance(x, ndarray):
        return x.view(ndarray)
    if isinstance(x, tuple):
        return tuple(_dev(v) for v in x)
    if isinstance(x, list):
        return [_dev(v) for v in x]
    return x


def _wrapped(fn):
    def call(*args, **kwargs):
        return _dev(fn(*args, **kwargs))

    call.__name__ = getattr(fn, "__name__", "fn")
    return call


# --- streams, events, devices ------------------------------------------------------------------

_local = threading.local()


def _stack() -> list:
    if not hasattr(_local, "streams"):
        _local.streams = []
    return _local.streams


class Stream:
    null = None  # set below

    def __init__(self, null: bool = False, non_blocking: bool = False, ptr: int | None = None):
        self.ptr = 0 if null else (ptr if ptr is not None else next(_handles))

    def __enter__(self):
        _stack().append(self)
        return self

    def __exit__(self, *exc):
        _stack().pop()

    def use(self):
        _stack().append(self)
        return self

    def synchronize(self) -> None:
        pass

    def wait_event(self, event) -> None:
        pass

    def record(self, event=None):
        event = event or Event()
        event.record(self)
        return event

    @property
    def done(self) -> bool:
        return True


Stream.null = Stream(null=True)


def get_current_stream(device_id=None):
    s = _stack()
    return s[-1] if s else Stream.null


class Event:
    def __init__(self, block: bool = False, disable_timing: bool = False, interprocess: bool = False):
        self.ptr = next(_handles)

    def record(self, stream=None) -> None:
        pass

    def synchronize(self) -> None:
        pass

    @property
    def done(self) -> bool:
        return True


class Device:
    def __init__(self, device=None):
        self.id = int(device or 0)
        self.compute_capability = "90"

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None

    def use(self) -> None:
        pass

    def synchronize(self) -> None:
        pass


# --- memory ------------------------------------------------------------------------------------

class Memory:
    def __init__(self, size: int = 0):
        self._buf = np.empty(max(int(size), 1), np.uint8)
        self.ptr = self._buf.ctypes.data
        self.size = int(size)


class UnownedMemory:
    def __init__(self, ptr: int, size: int, owner, device_id: int = 0):
        self.ptr, self.size, self.owner = int(ptr), int(size), owner


class MemoryPointer:
    def __init__(self, mem, offset: int):
        self.mem = mem
        self.ptr = mem.ptr + int(offset)


class MemoryPool:
    def malloc(self, nbytes: int):
        return MemoryPointer(Memory(nbytes), 0)

    def free_all_blocks(self, stream=None) -> None:
        pass

    def used_bytes(self) -> int:
        return 0

    def total_bytes(self) -> int:
        return 0


_POOL = MemoryPool()
_PINNED_POOL = MemoryPool()


def alloc_pinned_memory(size: int):
    return bytearray(int(size))


def _memcpy(dst: int, src: int, nbytes: int, kind: int = 0, stream: int = 0) -> None:
    ctypes.memmove(int(dst), int(src), int(nbytes))


class _Runtime(types.ModuleType):
    memcpyHostToDevice = 1  # noqa: N815 - CUDA's names
    memcpyDeviceToHost = 2  # noqa: N815
    memcpyDeviceToDevice = 3  # noqa: N815
    memcpyDefault = 4  # noqa: N815

    def __init__(self):
        super().__init__("cupy.cuda.runtime")
        self.memcpyAsync = _memcpy
        self.memcpy = _memcpy

    @staticmethod
    def getDeviceCount() -> int:  # noqa: N802
        return 1

    @staticmethod
    def setDevice(device: int) -> None:  # noqa: N802
        pass

    @staticmethod
    def getDevice() -> int:  # noqa: N802
        return 0

    @staticmethod
    def streamWaitEvent(stream: int, event: int, flags: int = 0) -> None:  # noqa: N802
        pass

    @staticmethod
    def eventRecord(event: int, stream: int) -> None:  # noqa: N802
        pass

    @staticmethod
    def hostRegister(ptr: int, size: int, flags: int) -> None:  # noqa: N802
        pass

    @staticmethod
    def hostUnregister(ptr: int) -> None:  # noqa: N802
        pass

    @staticmethod
    def deviceSynchronize() -> None:  # noqa: N802
        pass

    @staticmethod
    def getDeviceProperties(device: int) -> dict:  # noqa: N802
        return {"name": b"null device", "major": 9, "minor": 0, "multiProcessorCount": 1}


# --- kernels -----------------------------------------------------------------------------------

def _plain_copies(args) -> None:
    """``window_copy_<size>`` where every sample is a plain copy (one dimension, no offset, the
    input's extent): what ``_conditional.merge`` launches. Other windows are skipped, as any
    kernel is."""
    tab = np.asarray(args[0]).reshape(-1, 32)
    size = np.asarray(args[1]).itemsize
    for row in tab.tolist():
        if row[3] == 1 and row[11] == row[17] == row[2] and row[23] == 1 and row[29] == 0:
            ctypes.memmove(row[1], row[0], row[2] * size)


def _preemphasis(args) -> None:
    """``preemphasis_f32`` (stoker/kernels/preemphasis.cu) in float32 NumPy steps; the kernel source
    itself is run on the host by tests/operators/audio/test_preemphasis_kernel.py."""
    x, y, table, coef, border = (np.asarray(a) for a in args)
    for (off, size), c in zip(table.reshape(-1, 2).tolist(), coef.tolist()):
        if size == 0:
            continue
        c = np.float32(c)
        xs = x[off:off + size]
        first = [np.float32(0), xs[0], xs[1] if size > 1 else xs[0]][int(border)]
        y[off] = xs[0] - c * first
        y[off + 1:off + size] = xs[1:] - c * xs[:-1]


# Kernels the null device runs (in NumPy) instead of skipping, so tests can check their results.
EMULATED = {f"window_copy_{k}": _plain_copies for k in (1, 2, 4, 8)}
EMULATED["preemphasis_f32"] = _preemphasis


class _Kernel:
    def __init__(self, name: str):
        self.name = name

    def __call__(self, grid, block, args, shared_mem: int = 0, stream=None):
        LAUNCHES.append((self.name, tuple(grid), tuple(block)))
        emulate = EMULATED.get(self.name)
        if emulate is not None:
            emulate(args)


class RawModule:
    def __init__(self, code: str | None = None, options: tuple = (), **kwargs):
        self.code = code

    def get_function(self, name: str) -> _Kernel:
        return _Kernel(name)


class RawKernel(_Kernel):
    def __init__(self, code: str, name: str, options: tuple = (), **kwargs):
        super().__init__(name)


class _ElementwiseKernel:
    """Launches recorded; the output argument (last one, or a new array shaped as the first
    input) is returned unwritten."""

    def __init__(self, in_params: str, out_params: str, operation: str, name: str = "kernel", **kwargs):
        self.name = name
        self.n_in = len([p for p in in_params.split(",") if p.strip()])
        out = out_params.split(",")[0].split()
        self.out_dtype = np.dtype(out[0]) if out and out[0] not in ("T", "X", "Y") else None

    def __call__(self, *args, **kwargs):
        LAUNCHES.append((self.name, (), ()))
        if len(args) > self.n_in:
            return args[self.n_in]
        first = np.asarray(args[0])
        return empty(first.shape, self.out_dtype or first.dtype)


class _ReductionKernel(_ElementwiseKernel):
    def __call__(self, *args, axis=None, **kwargs):
        LAUNCHES.append((self.name, (), ()))
        first = np.asarray(args[0])
        shape = () if axis is None else np.delete(np.asarray(first.shape), axis).tolist()
        return empty(shape, self.out_dtype or np.float64)


# --- the module --------------------------------------------------------------------------------

def empty(shape, dtype=float, order="C"):
    return np.empty(shape, dtype, order).view(ndarray)


def asarray(a, dtype=None, order=None):
    if isinstance(a, ndarray) and (dtype is None or np.dtype(dtype) == a.dtype):
        return a
    return np.array(a, dtype=dtype, order=order or "K", copy=True).view(ndarray)


def asnumpy(a, stream=None):
    return np.array(a, copy=True).view(np.ndarray)


def _cupy_getattr(name: str):
    value = getattr(np, name)
    return _wrapped(value) if callable(value) and not isinstance(value, type) else value


def make_module() -> types.ModuleType:
    """A fresh stand-in ``cupy`` module (with ``cupy.cuda`` and ``cupy.cuda.runtime``)."""
    cp = types.ModuleType("cupy")
    cuda = types.ModuleType("cupy.cuda")
    runtime = _Runtime()
    cuda.runtime = runtime
    for name, value in {
        "Stream": Stream, "Event": Event, "Device": Device, "Memory": Memory, "UnownedMemory": UnownedMemory,
        "MemoryPointer": MemoryPointer, "MemoryPool": MemoryPool, "MemoryAsyncPool": MemoryPool,
        "get_current_stream": get_current_stream, "alloc_pinned_memory": alloc_pinned_memory,
        "set_allocator": lambda allocator=None: None, "set_pinned_memory_allocator": lambda allocator=None: None,
    }.items():
        setattr(cuda, name, value)
    cp.cuda = cuda
    cp.ndarray = ndarray
    cp.empty = empty
    cp.asarray = asarray
    cp.array = asarray
    cp.asnumpy = asnumpy
    cp.RawModule = RawModule
    cp.RawKernel = RawKernel
    cp.ElementwiseKernel = _ElementwiseKernel
    cp.ReductionKernel = _ReductionKernel
    cp.get_default_memory_pool = lambda: _POOL
    cp.get_default_pinned_memory_pool = lambda: _PINNED_POOL
    cp.__getattr__ = _cupy_getattr
    cp.is_null_device = True
    return cp


@contextlib.contextmanager
def installed():
    """``cupy`` is the stand-in inside the block (stoker's cached module and kernel caches are
    reset on the way in and out), whatever CuPy the machine has."""
    from stoker.backend import cuda
    from stoker.operators import transfer
    from stoker.pipeline import executor

    # Pipelines left open with a GPU stage are stopped on the way in and out: made under one CuPy,
    # their prefetching threads must not go on under the other (one that did, on a GPU machine,
    # copied to a real device address with the stand-in's memmove: a segmentation fault).
    executor.close_all(gpu_only=True)
    saved = {k: sys.modules.get(k) for k in ("cupy", "cupy.cuda", "cupy.cuda.runtime")}
    cp = make_module()
    sys.modules.update({"cupy": cp, "cupy.cuda": cp.cuda, "cupy.cuda.runtime": cp.cuda.runtime})
    state = (cuda._pool_chosen, cuda._pool_object, dict(cuda._module_cache), dict(transfer._rings),
             dict(transfer._arenas), dict(cuda._function_cache))

    def reset():
        cuda.cupy.cache_clear()
        cuda._module_cache.clear()
        cuda._function_cache.clear()
        transfer._rings.clear()
        transfer._arenas.clear()
        cuda._pool_chosen = cuda._pool_object = None

    reset()
    LAUNCHES.clear()
    try:
        yield cp
    finally:
        executor.close_all(gpu_only=True)
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v
        reset()
        cuda._pool_chosen, cuda._pool_object = state[0], state[1]
        cuda._module_cache.update(state[2])
        transfer._rings.update(state[3])
        transfer._arenas.update(state[4])
        cuda._function_cache.update(state[5])


# --- helpers for tests of GPU planning ------------------------------------------------------------

def python_calls(fn) -> int:
    """The Python function calls ``fn()`` makes (``sys.setprofile``), with the garbage collector
    off: its finalizers, run whenever it happens to, would count as calls. How the host-cost tests
    check that a GPU operator's planning does not grow with the batch."""
    import gc

    calls = [0]

    def profile(frame, event, arg):
        if event == "call":
            calls[0] += 1

    gc.collect()
    gc.disable()
    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
        gc.enable()
    return calls[0]


@contextlib.contextmanager
def recording_uploads(monkeypatch, modules):
    """The null device installed, with ``upload_table`` (and ``upload_tables``, several tables in
    one copy) of each of ``modules`` replaced by a recorder: yields the list of host tables
    uploaded, in order."""
    got = []

    def record(table, batch):
        got.append(np.array(table))
        return table

    with installed():
        for mod in modules:
            for name, stand_in in (("upload_table", record),
                                   ("upload_tables", lambda batch, *tables: [record(t, batch) for t in tables])):
                if hasattr(mod, name):
                    monkeypatch.setattr(mod, name, stand_in)
        yield got


def device_batch(images, layout: str = "HWC", dense: bool = False):
    """``(TensorListGPU, BatchContext)`` of host ``images`` on the null device: ragged in one flat
    buffer (a decoder's form), or one dense array; sources ``img{i}.jpg``."""
    from stoker.backend import cuda
    from stoker.operators.base import BatchContext
    from stoker.tensors_gpu import TensorListGPU

    cp = cuda.cupy()
    if dense:
        x = TensorListGPU(cp.asarray(np.stack(images)), layout)
    else:
        sizes = np.array([im.size for im in images], np.int64)
        offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        buf = cp.asarray(np.concatenate([im.ravel() for im in images]))
        x = TensorListGPU.from_flat(buf, offsets, np.array([im.shape for im in images]), layout)
    return x, BatchContext(batch_size=len(images), sources=[f"img{i}.jpg" for i in range(len(images))])
