"""The CUDA side: device selection, the pipeline's stream, events, and CuPy access.

Imported lazily: a CPU-only user never imports CuPy.
"""

from __future__ import annotations

import contextlib
import functools


@functools.lru_cache(maxsize=None)
def _cupy():
    import cupy

    return cupy


def unavailable_reason(device_id: int) -> str | None:
    """Why GPU ``device_id`` cannot be used here, or None if it can."""
    try:
        cp = _cupy()
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


class GpuContext:
    """One pipeline's GPU: its device and its own non-blocking CUDA stream."""

    def __init__(self, device_id: int):
        cp = _cupy()
        self.device_id = device_id
        self.device = cp.cuda.Device(device_id)
        with self.device:
            self.stream = cp.cuda.Stream(non_blocking=True)

    @contextlib.contextmanager
    def activate(self):
        with self.device, self.stream:
            yield self

    def record_event(self):
        ev = _cupy().cuda.Event(disable_timing=True)
        ev.record(self.stream)
        return ev
