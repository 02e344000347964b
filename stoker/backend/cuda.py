"""The CUDA side: device selection, the pipeline's stream, events, memory, kernels.

Imported lazily: a CPU-only user never imports CuPy.

What lives here:

* :class:`GpuContext` - one pipeline's device and its non-blocking stream.
* :func:`use_memory_pool` - the driver's stream-ordered pool for large requests and CuPy's
  caching pool with size classes for small ones (default, :class:`HybridPool`), the caching
  pool with size classes (``STOKER_GPU_POOL=caching``) or as it is (``plain``), the driver's
  pool (``async``) or PyTorch's caching allocator (``torch``: one pool for both frameworks).
* :class:`PinnedRing` - reusable pinned staging buffers for host-to-device
  copies that do not block the host (pageable copies would sync the stream).
* :func:`load_kernel` - NVRTC-compiled kernels from ``stoker/kernels/*.cu``,
  compiled on first use and cached per device (CuPy also caches on disk).
"""

from __future__ import annotations

import collections
import contextlib
import functools
import logging
import os
import threading

import numpy as np

from stoker import settings
from stoker.tensors import pack_holding_gil

_KERNEL_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "kernels")


@functools.cache
def cupy():
    """The ``cupy`` module, imported on first use (ImportError where CuPy is not installed)."""
    import cupy

    return cupy


# The old private name, still used by modules this change could not edit (the audio GPU
# operators, stoker/operators/decoders/mixed/common.py, stoker/operators/image/gpu_warp.py);
# tests/test_module_boundaries.py lists them. Drop it once they call cupy().
_cupy = cupy


def unavailable_reason(device_id: int) -> str | None:
    """Why GPU ``device_id`` cannot be used here, or None if it can."""
    try:
        cp = cupy()
    except ImportError:
        return "cupy is not installed (pip install 'stoker[gpu]')"
    try:
        n = cp.cuda.runtime.getDeviceCount()
    except Exception as e:  # noqa: BLE001 - cupy raises several driver error types
        return f"CUDA is not usable ({type(e).__name__}: {e})"
    if n == 0:
        return "no CUDA device is present"
    if device_id >= n:
        return f"device_id={device_id} was asked for but only {n} GPU(s) are present"
    return None


def cuda_available() -> bool:
    """True when CuPy imports and at least one GPU is visible."""
    return unavailable_reason(0) is None


_pool_lock = threading.Lock()
_pool_chosen: str | None = None
_pool_object = None  # the device pool CuPy allocates from, once chosen


def use_memory_pool(kind: str | None = None) -> str:
    """Choose CuPy's allocator once per process: "hybrid", the default (requests of
    :data:`HYBRID_LARGE` bytes or more from cudaMallocAsync, the rest as "caching":
    :class:`HybridPool`), "caching" (CuPy's caching pool, requests of over 1 MiB rounded up to
    :func:`size_class`), "plain" (the caching pool as it is), "async" (cudaMallocAsync) or
    "torch". "default" names the default. Returns the kind chosen.

    ``kind`` None reads ``STOKER_GPU_POOL``. Both pools free in stream order (the caching pool
    keeps one free list per stream), so memory freed by a batch is reused only by work queued
    after it on that stream; that is what keeps a consumer's late reads safe.
    """
    global _pool_chosen, _pool_object
    with _pool_lock:
        if _pool_chosen is not None:
            return _pool_chosen
        cp = cupy()
        kind = kind or settings.get().gpu_pool
        if kind == "default":
            kind = "hybrid"
        if kind not in ("hybrid", "caching", "plain", "async", "torch"):
            raise ValueError("the memory pool must be 'hybrid', 'caching', 'plain', 'async' or 'torch', "
                             f"got {kind!r}")
        if kind == "torch":
            cp.cuda.set_allocator(_torch_malloc)
            _pool_chosen, _pool_object = kind, None
            return kind
        if kind == "hybrid":
            try:
                pool = HybridPool(cp)
            except (RuntimeError, AttributeError, OSError) as e:  # no stream-ordered pools here
                logging.getLogger("stoker").info("stoker: the caching GPU memory pool, as the device has no "
                                                 "stream-ordered allocator (%s)", e)
                kind = "caching"
            else:
                cp.cuda.set_allocator(pool.malloc)
                _pool_chosen, _pool_object = kind, pool
                return kind
        pool = cp.cuda.MemoryAsyncPool() if kind == "async" else cp.get_default_memory_pool()
        if kind == "async":
            cp.cuda.set_allocator(pool.malloc)
        elif kind == "caching":
            # H100, validation pipeline (full-size decodes of varying size), 10 s: 1,347-1,403 MiB
            # with CuPy's pool as it is, 495-497 MiB with size classes, throughput the same.
            cp.cuda.set_allocator(lambda nbytes: pool.malloc(size_class(nbytes)))
        _pool_chosen, _pool_object = kind, pool
        return kind


HYBRID_LARGE = 4 << 20


class HybridPool:
    """CuPy's caching pool (with size classes) for small requests, the driver's stream-ordered
    pool (cudaMallocAsync) for requests of :data:`HYBRID_LARGE` bytes or more.

    Why: batch buffers (decoded images, operator outputs) change size from batch to batch, and a
    caching pool that cannot fit a request into the blocks it holds takes new memory, so it holds
    about twice the largest live set (an SSD pipeline on an H100: 601-617 MiB live in a pool of
    993-1,281). The driver's pool maps physical pages anew instead (751 MiB in all). But every
    cudaMallocAsync lets go of the interpreter lock, which costs a GPU stage beside busy Python
    threads about a switch interval each time; all allocations through it made a detection
    pipeline 16 % slower. Large requests are a few per operator and batch; the many small ones
    (argument tables, plans) stay on the caching pool."""

    def __init__(self, cp):
        self.small = cp.get_default_memory_pool()
        self.large = cp.cuda.MemoryAsyncPool()

    def malloc(self, nbytes: int):
        if nbytes >= HYBRID_LARGE:
            return self.large.malloc(nbytes)
        return self.small.malloc(size_class(nbytes))

    def free_all_blocks(self) -> None:
        self.small.free_all_blocks()
        self.large.free_all_blocks()

    def used_bytes(self) -> int:
        return self.small.used_bytes() + self.large.used_bytes()

    def total_bytes(self) -> int:
        return self.small.total_bytes() + self.large.total_bytes()


_cupyx_preload: threading.Thread | None = None


def preload_cupyx() -> None:
    """Import ``cupyx.scipy.sparse`` on a thread of its own, once per process. CuPy's first
    element-wise arithmetic on device arrays loads it (and SciPy's sparse module with it), about
    half a second that a first batch otherwise waits for in its GPU stage (benchmarks/RESULTS.md).
    Operators that will do such arithmetic start it when their pipeline is built, beside the rest
    of the build."""
    global _cupyx_preload
    with _pool_lock:
        if _cupyx_preload is not None:
            return

        def load():
            try:
                import cupyx.scipy.sparse  # noqa: F401
            except Exception:  # noqa: BLE001 - then the first use imports it, as before
                pass

        _cupyx_preload = threading.Thread(target=load, name="stoker-cupyx-preload", daemon=True)
        _cupyx_preload.start()


class _TorchBlock:
    """Owner of one block from PyTorch's caching allocator: hands it back when CuPy drops it."""

    __slots__ = ("ptr", "free")

    def __init__(self, ptr: int, free):
        self.ptr, self.free = ptr, free

    def __del__(self):
        try:
            self.free(self.ptr)
        except Exception:  # noqa: BLE001 - interpreter exit: the allocator may be gone
            pass


def _torch_malloc(nbytes: int):
    """CuPy allocations served by PyTorch's caching allocator (``STOKER_GPU_POOL=torch``), on
    CuPy's current device and stream, so that memory one framework frees the other reuses
    instead of each caching its own. Freed blocks are reused in that stream's order, as with
    CuPy's own pool."""
    import torch

    cp = cupy()
    if nbytes == 0:
        return cp.cuda.MemoryPointer(cp.cuda.Memory(0), 0)
    device = cp.cuda.Device().id
    ptr = torch.cuda.caching_allocator_alloc(nbytes, device, cp.cuda.get_current_stream().ptr)
    owner = _TorchBlock(ptr, torch.cuda.caching_allocator_delete)
    return cp.cuda.MemoryPointer(cp.cuda.UnownedMemory(ptr, nbytes, owner, device), 0)


def release_unused_memory() -> None:
    """Hand back to the driver the device memory and pinned host memory that the pools keep
    cached for reuse but no live array uses. Arrays still referenced (batches in flight,
    outputs the caller holds) keep theirs. The next batches allocate afresh, so call this
    between phases (after an epoch, before evaluation), not per batch."""
    cp = cupy()
    if _pool_chosen == "torch":
        import torch

        torch.cuda.empty_cache()
    memory_pool().free_all_blocks()
    cp.get_default_pinned_memory_pool().free_all_blocks()


def memory_pool():
    """The device pool stoker allocates from (``used_bytes()``, ``total_bytes()``,
    ``free_all_blocks()``): the chosen one, else CuPy's default pool."""
    return _pool_object if _pool_object is not None else cupy().get_default_memory_pool()


def size_class(nbytes: int) -> int:
    """``nbytes`` rounded up to one of eight sizes per power of two (at most 12.5 % more) from
    1 MiB up; smaller requests are left as they are. Batches of variable-sized images ask the
    pool for a slightly different size every time, and a caching pool that cannot fit a request
    into the blocks it holds takes new memory: size classes let the same blocks serve again."""
    if nbytes <= 1 << 20:
        return nbytes
    step = 1 << (nbytes.bit_length() - 4)  # an eighth of the power of two below nbytes
    return -(-nbytes // step) * step


# cuDevicePrimaryCtxSetFlags' scheduling flags, by STOKER_CUDA_SYNC's values
_SYNC_FLAGS = {"spin": 0x1, "yield": 0x2, "blocking": 0x4}


def set_sync_mode(device_id: int, mode: str | None = None) -> int | None:
    """How host threads wait for the GPU (``STOKER_CUDA_SYNC``): "default" leaves CUDA's choice
    (spinning, with fewer busy contexts than cores), "spin", "yield" or "blocking" (the thread
    sleeps until the GPU signals). Set through the driver on the device's primary context, which
    CuPy, nvJPEG and PyTorch share. Returns the driver's status, or None when nothing was set."""
    import ctypes

    mode = (mode or settings.get().cuda_sync).strip().lower()
    if mode == "default":
        return None
    if mode not in _SYNC_FLAGS:
        raise ValueError(f"the sync mode must be 'default', 'spin', 'yield' or 'blocking', not {mode!r}")
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    dev = ctypes.c_int()
    if lib.cuInit(0) != 0 or lib.cuDeviceGet(ctypes.byref(dev), int(device_id)) != 0:
        return None
    # The _v2 entry point (what cuda.h maps the name to) may change an active context's flags;
    # the plain one refuses once CuPy or PyTorch has made the context.
    set_flags = getattr(lib, "cuDevicePrimaryCtxSetFlags_v2", None) or lib.cuDevicePrimaryCtxSetFlags
    status = int(set_flags(dev, _SYNC_FLAGS[mode]))
    if status != 0:
        import logging

        logging.getLogger("stoker").warning("STOKER_CUDA_SYNC=%s was not applied: the CUDA driver answered %d",
                                            mode, status)
    return status


class GpuContext:
    """One pipeline's GPU: its device, its own non-blocking CUDA stream and staging buffers."""

    def __init__(self, device_id: int):
        cp = cupy()
        self.sync_status = set_sync_mode(device_id)
        use_memory_pool()
        if settings.get().preload_cupyx:  # (auto: only GPU arithmetic operators start it, at their bind)
            preload_cupyx()
        self.device_id = device_id
        self.device = cp.cuda.Device(device_id)
        with self.device:
            self.stream = cp.cuda.Stream(non_blocking=True)
        self.pinned = PinnedRing(device_id)

    @contextlib.contextmanager
    def activate(self):
        with self.device, self.stream:
            yield self

    def record_event(self):
        ev = cupy().cuda.Event(disable_timing=True)
        ev.record(self.stream)
        return ev


class PinnedRing:
    """Pinned host buffers reused in turn for asynchronous host-to-device copies.

    Each slot remembers the event recorded after the copy that read it; a slot
    is written again only once that event has completed. Slots grow on demand.
    """

    def __init__(self, device_id: int, slots: int = 4):
        self.device_id = device_id
        self._bufs: list = [None] * slots
        self._events: list = [None] * slots
        self._next = 0
        self._lock = threading.Lock()

    def _slot(self, nbytes: int):
        cp = cupy()
        with self._lock:
            k = self._next
            self._next = (k + 1) % len(self._bufs)
        ev = self._events[k]
        if ev is not None:
            ev.synchronize()
        buf = self._bufs[k]
        if buf is None or buf.size < nbytes:
            size = max(nbytes, 1 << 20)
            size = 1 << (size - 1).bit_length()
            mem = cp.cuda.alloc_pinned_memory(size)
            buf = np.frombuffer(mem, np.uint8, size)
            self._bufs[k] = buf
        return k, buf

    def upload(self, host: np.ndarray, stream, out=None):
        """Copy ``host`` to a new (or the given) CuPy array on ``stream``, without blocking the host."""
        cp = cupy()
        host = np.ascontiguousarray(host)
        if out is None:
            out = cp.empty(host.shape, host.dtype)
        nbytes = host.nbytes
        if nbytes == 0:
            return out
        k, buf = self._slot(nbytes)
        buf[:nbytes] = host.reshape(-1).view(np.uint8)
        cp.cuda.runtime.memcpyAsync(out.data.ptr, buf.ctypes.data, nbytes,
                                    cp.cuda.runtime.memcpyHostToDevice, stream.ptr)
        ev = cp.cuda.Event(disable_timing=True)
        ev.record(stream)
        self._events[k] = ev
        return out

    def upload_many(self, arrays, stream, align: int = 256):
        """Pack host arrays into one pinned buffer, copy it once, return (device buffer, byte offsets)."""
        cp = cupy()
        offsets = []
        total = 0
        for a in arrays:
            offsets.append(total)
            total += (a.nbytes + align - 1) // align * align
        dev = cp.empty(max(total, 1), cp.uint8)
        if total == 0:
            return dev, offsets
        k, buf = self._slot(total)
        pack_holding_gil(buf, arrays, offsets)
        cp.cuda.runtime.memcpyAsync(dev.data.ptr, buf.ctypes.data, total,
                                    cp.cuda.runtime.memcpyHostToDevice, stream.ptr)
        ev = cp.cuda.Event(disable_timing=True)
        ev.record(stream)
        self._events[k] = ev
        return dev, offsets

    def upload_packed(self, arrays, dst_ptr: int, stream) -> None:
        """Copy host arrays back to back to device memory at ``dst_ptr``: one pack, one copy."""
        cp = cupy()
        offsets, total = [], 0
        for a in arrays:
            offsets.append(total)
            total += a.nbytes
        if total == 0:
            return
        k, buf = self._slot(total)
        pack_holding_gil(buf, arrays, offsets)
        cp.cuda.runtime.memcpyAsync(int(dst_ptr), buf.ctypes.data, total, cp.cuda.runtime.memcpyHostToDevice,
                                    stream.ptr)
        ev = cp.cuda.Event(disable_timing=True)
        ev.record(stream)
        self._events[k] = ev

    def upload_to(self, arrays, dst_ptrs, stream) -> None:
        """Copy each host array to the device address in ``dst_ptrs`` (one pinned staging buffer)."""
        cp = cupy()
        sizes = [a.nbytes for a in arrays]
        total = sum(sizes)
        if total == 0:
            return
        k, buf = self._slot(total)
        off = 0
        for a, size, dst in zip(arrays, sizes, dst_ptrs):
            buf[off:off + size] = np.ascontiguousarray(a).reshape(-1).view(np.uint8)
            cp.cuda.runtime.memcpyAsync(int(dst), buf.ctypes.data + off, size,
                                        cp.cuda.runtime.memcpyHostToDevice, stream.ptr)
            off += size
        ev = cp.cuda.Event(disable_timing=True)
        ev.record(stream)
        self._events[k] = ev


class TableArena:
    """Pinned host memory used as a ring for the small per-batch tables GPU operators upload
    (argument tables, windows, matrices).

    Each upload takes the next free bytes and records an event after its copy; the bytes are
    written again only once the ring has come round to them and that event has completed. With
    a few MiB the ring holds many batches' tables, so the GPU stage does not wait for the device
    as it did with :class:`PinnedRing`'s few slots, where every operator took a slot and the ring
    came round within one batch: the launch thread then waited for the previous batch's kernels
    (H100, augmented pipeline: 29 ms of a 97 ms batch in the first operator's upload).

    The event that guards a table's bytes is recorded once for many tables (:meth:`seal`, which
    the executor calls at the end of each GPU stage, and every ``SEAL_EVERY`` uploads): creating
    and recording one per table were two more CUDA calls per table, each letting go of the
    interpreter lock that the GPU stage then waits to get back behind the pipeline's other
    threads. An event recorded after a copy on its stream completes only after the copy, so one
    event covers every table copied on that stream before it.
    """

    ALIGN = 256
    # Device memory for the tables comes in chunks of this size, one chunk at a time per stream,
    # handed out in order: one pool allocation per few batches rather than one per table (the
    # pool's allocator is a Python call, and the GPU stage made ~20 of them a batch for tables).
    # A chunk returns to the pool when its last table is dropped, as a table's own block did.
    CHUNK = 1 << 20
    SEAL_EVERY = 32  # uploads without an event at most (tables copied outside a GPU stage too)

    def __init__(self, size: int = 16 << 20):
        self.size = size
        self._buf = None
        self._head = 0
        self._lap = 0
        self._live: collections.deque = collections.deque()  # (lap, start, event), in order
        self._unsealed: list = []  # (lap, start, stream) of copies no event guards yet, in order
        self._lock = threading.Lock()
        self._chunks: dict = {}  # stream pointer -> [device chunk (uint8), next free byte]

    def _device_table(self, shape, dtype, nbytes: int, stream):
        """A new device array for a table of ``nbytes``: a slice of the stream's current chunk."""
        cp = cupy()
        n = -(-nbytes // self.ALIGN) * self.ALIGN
        if n > self.CHUNK // 4:
            return cp.empty(shape, dtype)
        entry = self._chunks.get(stream.ptr)
        if entry is None or entry[1] + n > self.CHUNK:
            entry = self._chunks[stream.ptr] = [cp.empty(self.CHUNK, cp.uint8), 0]
        start = entry[1]
        entry[1] = start + n
        return entry[0][start:start + nbytes].view(dtype).reshape(shape)

    def _reserve(self, nbytes: int) -> int:
        n = -(-nbytes // self.ALIGN) * self.ALIGN
        if self._head + n > self.size:  # wrap: what is left of the older lap is the oldest
            self._seal_locked()  # (the bytes about to be written again need their events)
            while self._live and self._live[0][0] < self._lap:
                self._live.popleft()[2].synchronize()
            self._lap += 1
            self._head = 0
        start = self._head
        while self._live and self._live[0][0] < self._lap and self._live[0][1] < start + n:
            self._live.popleft()[2].synchronize()  # bytes of the last lap about to be written
        self._head = start + n
        return start

    def upload(self, host: np.ndarray, stream):
        """``host`` copied to a new CuPy array on ``stream``; the host does not wait for the device
        unless the ring has come round to bytes whose copy is still queued."""
        cp = cupy()
        host = np.ascontiguousarray(host)
        nbytes = host.nbytes
        if nbytes == 0:
            return cp.empty(host.shape, host.dtype)
        if nbytes > self.size // 8:
            raise ValueError(f"TableArena: a table of {nbytes} bytes is too large for the ring")
        with self._lock:
            if self._buf is None:
                self._buf = np.frombuffer(cp.cuda.alloc_pinned_memory(self.size), np.uint8, self.size)
            out = self._device_table(host.shape, host.dtype, nbytes, stream)
            start = self._reserve(nbytes)
            self._buf[start:start + nbytes] = host.reshape(-1).view(np.uint8)
            cp.cuda.runtime.memcpyAsync(out.data.ptr, self._buf.ctypes.data + start, nbytes,
                                        cp.cuda.runtime.memcpyHostToDevice, stream.ptr)
            self._unsealed.append((self._lap, start, stream))
            if len(self._unsealed) >= self.SEAL_EVERY:
                self._seal_locked()
        return out

    def seal(self) -> None:
        """Record one event per stream after the tables copied since the last seal: the host
        writes their bytes again only once it has completed."""
        if self._unsealed:
            with self._lock:
                self._seal_locked()

    def _seal_locked(self) -> None:
        if not self._unsealed:
            return
        cp = cupy()
        events: dict = {}
        for lap, start, stream in self._unsealed:
            ev = events.get(stream.ptr)
            if ev is None:
                ev = events[stream.ptr] = cp.cuda.Event(disable_timing=True)
                ev.record(stream)
            self._live.append((lap, start, ev))
        self._unsealed.clear()


_module_cache: dict = {}
_module_lock = threading.Lock()


_function_cache: dict = {}


def load_kernel(source: str, name: str, options: tuple = ("-std=c++17",)):
    """The kernel ``name`` from ``stoker/kernels/<source>.cu``, compiled by NVRTC once per device."""
    def code() -> str:
        with open(os.path.join(_KERNEL_DIR, source + ".cu")) as f:
            return f.read()

    return _kernel(source, code, name, options)


def source_kernel(code: str, name: str, options: tuple = ("-std=c++17",)):
    """The kernel ``name`` of the CUDA source text ``code``, compiled by NVRTC once per device.
    Kept with :func:`load_kernel`'s kernels, so that a stand-in CuPy (the tests' null device)
    starts from an empty cache and never meets a real kernel."""
    return _kernel(("text", code), lambda: code, name, options)


def elementwise_kernel(name: str, in_params: str, out_params: str, body: str, preamble: str = ""):
    """A ``cupy.ElementwiseKernel`` made once per ``name`` (CuPy compiles it per device on first
    launch), kept with the kernels of :func:`load_kernel`."""
    key = ("elementwise", name)
    k = _function_cache.get(key)
    if k is None:
        with _module_lock:
            k = _function_cache.get(key)
            if k is None:
                k = _function_cache[key] = cupy().ElementwiseKernel(in_params, out_params, body, f"stoker_{name}",
                                                                    preamble=preamble)
    return k


def _kernel(source, code, name: str, options: tuple):
    cp = cupy()
    dev = cp.cuda.runtime.getDevice()
    # (every launch of a GPU stage asks: a dictionary read, without the lock or a Device object)
    fn = _function_cache.get((source, name, dev, options))
    if fn is not None:
        return fn
    key = (source, dev, options)
    with _module_lock:
        mod = _module_cache.get(key)
        if mod is None:
            mod = _module_cache[key] = cp.RawModule(code=code(), options=options)
        fn = _function_cache[(source, name, dev, options)] = mod.get_function(name)
    return fn


def current_stream(batch=None):
    """The stream GPU work goes on: the batch's (pipeline stream) or CuPy's current one."""
    if batch is not None and getattr(batch, "stream", None) is not None:
        return batch.stream
    return cupy().cuda.get_current_stream()
