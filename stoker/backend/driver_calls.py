"""The GPU stage's small CUDA calls, made without letting go of the GIL.

CuPy releases the GIL around every driver call: a kernel launch, a host-to-device copy, an
event record. Each call takes a few microseconds, but taking the GIL back afterwards waits for
whichever thread grabbed it meanwhile to be asked to drop it, which is the interpreter's switch
interval when that thread is running Python. In a pipeline the CPU stage's thread runs Python
most of the time, so every call of the GPU stage cost it about 0.2 ms instead of 8 us
(``benchmarks/gil_contention_micro.py`` on an H100: 201.7 us per CuPy launch beside a thread
running Python, 10.1 us for the same launch through ``ctypes.PyDLL``). With a few hundred calls
per batch, that was most of what each added operator cost.

So the calls the GPU stage makes per batch go to the driver through ``ctypes.PyDLL``, which
keeps the GIL for the call. They are short and never block (launches and copies are queued on a
stream; :func:`event_done` only asks), so holding the GIL for them costs the other threads
nothing. Whatever these functions cannot express (an argument type CuPy packs in a way of its
own, a machine without ``libcuda``) goes through CuPy as before, and the setting
``gil_held_calls`` (``STOKER_GIL_HELD_CALLS=0``) sends everything through CuPy.
"""

from __future__ import annotations

import ctypes
import functools
import sys
import threading

import numpy as np

from stoker import settings

_NOT_READY = 600  # CUDA_ERROR_NOT_READY (cuEventQuery: the event's work is still queued)
_INVALID_CONTEXT = 201  # CUDA_ERROR_INVALID_CONTEXT: no context current on this thread yet
_local = threading.local()


@functools.cache
def _driver():
    """libcuda through ``ctypes.PyDLL`` (the GIL stays held during calls), or None."""
    if not settings.get().gil_held_calls:
        return None
    try:
        lib = ctypes.PyDLL("libcuda.so.1")
    except OSError:
        return None
    vp, u, sz = ctypes.c_void_p, ctypes.c_uint, ctypes.c_size_t
    lib.cuLaunchKernel.argtypes = [vp, u, u, u, u, u, u, u, vp, vp, vp]
    lib.cuMemcpyHtoDAsync_v2.argtypes = [ctypes.c_uint64, vp, sz, vp]
    lib.cuEventRecord.argtypes = [vp, vp]
    lib.cuEventQuery.argtypes = [vp]
    for name in ("cuLaunchKernel", "cuMemcpyHtoDAsync_v2", "cuEventRecord", "cuEventQuery"):
        getattr(lib, name).restype = ctypes.c_int
    return lib


def _lib():
    """The driver library to call, or None to go through CuPy (also under the tests' null device,
    whose "device" addresses are host memory)."""
    if getattr(sys.modules.get("cupy"), "is_null_device", False):
        return None
    return _driver()


def available() -> bool:
    """True when the calls here go to the driver directly (libcuda found, setting on)."""
    return _lib() is not None


def _check(status: int, retry):
    """Raise CuPy's driver error for a failed call; a thread that never used CUDA has no current
    context for the driver API yet, so make the runtime's current once and try again."""
    if status == _INVALID_CONTEXT and not getattr(_local, "context_set", False):
        import cupy as cp

        cp.cuda.runtime.setDevice(cp.cuda.runtime.getDevice())
        _local.context_set = True
        status = retry()
    if status:
        from cupy_backends.cuda.api.driver import CUDADriverError

        raise CUDADriverError(status)


def _pack(args) -> tuple | None:
    """Kernel arguments as CuPy passes them to a raw kernel (arrays and memory pointers as their
    device address, Python ints as int64, floats as float64, NumPy scalars as themselves), each in
    an 8-byte slot; None where one is of a kind left to CuPy."""
    import cupy as cp

    n = len(args)
    slots = np.zeros(max(n, 1), np.uint64)
    raw = slots.view(np.uint8)
    for i, a in enumerate(args):
        if isinstance(a, cp.ndarray):
            slots[i] = a.data.ptr
        elif isinstance(a, np.generic):
            b = a.tobytes()
            if len(b) > 8:
                return None
            raw[8 * i:8 * i + len(b)] = np.frombuffer(b, np.uint8)
        elif isinstance(a, int):  # (bool included, as CuPy: an int64)
            slots[i] = np.int64(a).view(np.uint64)
        elif isinstance(a, float):
            slots[i] = np.float64(a).view(np.uint64)
        elif isinstance(a, cp.cuda.MemoryPointer):
            slots[i] = a.ptr
        elif a is None:
            slots[i] = 0
        else:
            return None
    base = slots.ctypes.data
    params = (ctypes.c_void_p * max(n, 1))(*[base + 8 * i for i in range(n)])
    return slots, params


class Kernel:
    """A compiled kernel (CuPy's ``Function``) launched through the driver with the GIL held;
    called as CuPy's: ``k(grid, block, args, shared_mem=0, stream=None)``."""

    __slots__ = ("function", "_ptr")

    def __init__(self, function):
        self.function = function
        ptr = getattr(function, "ptr", None)
        self._ptr = ctypes.c_void_p(ptr) if ptr else None

    def __call__(self, grid, block, args, shared_mem: int = 0, stream=None):
        lib = _lib() if self._ptr is not None else None
        packed = _pack(args) if lib is not None else None
        if packed is None:
            return self.function(grid, block, args, shared_mem=shared_mem, stream=stream)
        import cupy as cp

        g = (tuple(grid) + (1, 1))[:3] if isinstance(grid, (tuple, list)) else (int(grid), 1, 1)
        b = (tuple(block) + (1, 1))[:3] if isinstance(block, (tuple, list)) else (int(block), 1, 1)
        s = (stream if stream is not None else cp.cuda.get_current_stream()).ptr
        slots, params = packed

        def launch():
            return lib.cuLaunchKernel(self._ptr, int(g[0]), int(g[1]), int(g[2]), int(b[0]), int(b[1]),
                                      int(b[2]), int(shared_mem), s, params, None)

        _check(launch(), launch)
        del slots  # (the values were copied at launch)


def copy_to_device(dst: int, src: int, nbytes: int, stream_ptr: int) -> None:
    """Queue a host-to-device copy of ``nbytes`` from pinned ``src`` to ``dst`` on the stream."""
    lib = _lib()
    if lib is None:
        import cupy as cp

        cp.cuda.runtime.memcpyAsync(int(dst), int(src), int(nbytes), cp.cuda.runtime.memcpyHostToDevice,
                                    int(stream_ptr))
        return

    def copy():
        return lib.cuMemcpyHtoDAsync_v2(int(dst), int(src), int(nbytes), int(stream_ptr))

    _check(copy(), copy)


def record(event, stream) -> None:
    """Record CuPy ``event`` on ``stream`` (a CuPy stream)."""
    lib = _lib()
    if lib is None:
        event.record(stream)
        return

    def rec():
        return lib.cuEventRecord(event.ptr, stream.ptr)

    _check(rec(), rec)


def event_done(event) -> bool:
    """Whether the work before ``event``'s record has finished (asks; never waits)."""
    lib = _lib()
    if lib is None:
        return bool(event.done)
    status = lib.cuEventQuery(event.ptr)
    if status in (0, _NOT_READY):
        return status == 0
    _check(status, lambda: lib.cuEventQuery(event.ptr))
    return True


class EventPool:
    """Reusable CUDA events (creating one releases the GIL in CuPy; recording one kept here does
    not): ``take()`` one, ``give(event)`` it back once nothing waits on it."""

    def __init__(self):
        self._free: list = []
        self._lock = threading.Lock()

    def take(self):
        with self._lock:
            if self._free:
                return self._free.pop()
        import cupy as cp

        return cp.cuda.Event(disable_timing=True)

    def give(self, event) -> None:
        with self._lock:
            self._free.append(event)
