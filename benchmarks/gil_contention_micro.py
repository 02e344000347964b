"""What one CUDA call costs the GPU stage's thread while another thread runs Python.

    python benchmarks/gil_contention_micro.py [--calls 2000] [--intervals 0.0002,0.00005]

The GPU stage makes a few hundred small CUDA calls per batch (kernel launches, table copies,
events). A call that releases the GIL must take it back afterwards; when the CPU stage's thread
is running Python at that moment, the caller waits until that thread is asked to drop it (the
interpreter's switch interval). This measures the time per call of each kind, alone and beside
one thread spinning in Python, for each switch interval, and compares CuPy's launch with one made
through ``ctypes.PyDLL`` (which keeps the GIL for the call's few microseconds).
"""

from __future__ import annotations

import argparse
import ctypes
import sys
import threading
import time

SRC = r"""
extern "C" __global__ void fill(float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = (float)i;
}
"""


def _cases(cp, np):
    kernel = cp.RawKernel(SRC, "fill")
    stream = cp.cuda.Stream(non_blocking=True)
    x = cp.zeros(1024, cp.float32)
    n = np.int32(1024)
    kernel((4,), (256,), (x, n), stream=stream)  # (compiles and loads it)
    stream.synchronize()
    pinned = np.frombuffer(cp.cuda.alloc_pinned_memory(256), np.uint8, 256)
    dev = cp.empty(256, cp.uint8)
    done = cp.cuda.Event(disable_timing=True)
    done.record(stream)
    stream.synchronize()
    host = np.arange(4096, dtype=np.float32)

    libcuda_keep = ctypes.PyDLL("libcuda.so.1")  # PyDLL: the GIL stays held during the call
    libcuda_free = ctypes.CDLL("libcuda.so.1")  # CDLL: released, as CuPy does
    fn_ptr = ctypes.c_void_p(kernel.kernel.ptr)
    arg_x, arg_n = ctypes.c_void_p(x.data.ptr), ctypes.c_int(1024)
    params = (ctypes.c_void_p * 2)(ctypes.addressof(arg_x), ctypes.addressof(arg_n))
    s_ptr = ctypes.c_void_p(stream.ptr)

    def launch_ctypes(lib):
        def call():
            r = lib.cuLaunchKernel(fn_ptr, 4, 1, 1, 256, 1, 1, 0, s_ptr, params, None)
            if r:
                raise RuntimeError(f"cuLaunchKernel: {r}")
        return call

    jpeg_like = np.frombuffer(np.random.default_rng(0).bytes(100_000), np.uint8)
    slot = np.zeros(200_000, np.uint8)
    memmove_keep = ctypes.PyDLL(None).memmove
    memmove_keep.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]

    return {
        "python (no C call)": lambda: sum(range(20)),
        "NumPy slice copy, 100 KB": lambda: slot.__setitem__(slice(0, jpeg_like.size), jpeg_like),
        "PyDLL memmove, 100 KB": lambda: memmove_keep(slot.ctypes.data, jpeg_like.ctypes.data, jpeg_like.size),
        "cupy kernel launch": lambda: kernel((4,), (256,), (x, n), stream=stream),
        "ctypes.CDLL cuLaunchKernel": launch_ctypes(libcuda_free),
        "ctypes.PyDLL cuLaunchKernel": launch_ctypes(libcuda_keep),
        "memcpyAsync 256 B": lambda: cp.cuda.runtime.memcpyAsync(dev.data.ptr, pinned.ctypes.data, 256,
                                                                 cp.cuda.runtime.memcpyHostToDevice, stream.ptr),
        "Event() + record": lambda: cp.cuda.Event(disable_timing=True).record(stream),
        "completed event.synchronize": done.synchronize,
        "cp.empty (pool)": lambda: cp.empty(256, cp.uint8),
        "numpy add, 4096 floats": lambda: np.add(host, 1.0),
    }, stream


def _spin(stop):
    while not stop[0]:
        sum(range(200))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--intervals", default="0.0002,0.00005")
    a = ap.parse_args()
    import cupy as cp
    import numpy as np

    cases, stream = _cases(cp, np)
    for interval in [float(v) for v in a.intervals.split(",")]:
        sys.setswitchinterval(interval)
        print(f"== switch interval {interval * 1e3:g} ms: us per call, alone / beside a Python thread", flush=True)
        for name, call in cases.items():
            row = []
            for beside in (False, True):
                stop = [False]
                t = threading.Thread(target=_spin, args=(stop,), daemon=True)
                if beside:
                    t.start()
                    time.sleep(0.02)
                for _ in range(50):
                    call()
                t0 = time.perf_counter()
                for _ in range(a.calls):
                    call()
                dt = (time.perf_counter() - t0) / a.calls
                stop[0] = True
                if beside:
                    t.join()
                stream.synchronize()
                row.append(dt * 1e6)
            print(f"   {name:32s} {row[0]:8.1f} {row[1]:8.1f}", flush=True)


if __name__ == "__main__":
    main()
