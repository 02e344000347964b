"""``external_source(device="gpu")``: data that is already on the GPU goes straight to the GPU stage.

What the source (or ``feed_input``) gives may be device arrays (CuPy, torch CUDA
tensors, anything with ``__cuda_array_interface__`` or a CUDA DLPack capsule,
stoker's own GPU tensors) or host arrays:

* device data is kept as device arrays, never brought to the host; a dense batch
  (one array with a leading sample axis) stays one array. Without ``no_copy`` it
  is copied on the pipeline's stream when the batch runs (the caller may then
  reuse its buffer); with ``no_copy=True`` the pipeline reads the caller's memory.
* host data is uploaded once per batch, through the pinned staging the ``.gpu()``
  copy uses.

Ordering: the caller produced the device data on some stream. When the data is
taken (at ``feed_input``, or when the source returns it) an event is recorded on
that stream (``cuda_stream``; default the legacy default stream, where torch and
CuPy work unless told otherwise), and the pipeline's stream waits for the event
on the device before reading; the host never blocks.
"""

from __future__ import annotations

import contextlib

from stoker.backend.cuda import cupy

_DLPACK_CUDA = (2, 13)  # kDLCUDA, kDLCUDAManaged
_DLPACK_CPU = (1, 3)  # kDLCPU, kDLCUDAHost


class DeviceSamples(list):
    """One output's samples as device arrays; ``dense`` is the whole batch as one array when the
    source gave one, ``event`` what the pipeline's stream waits for before reading them."""

    dense = None
    event = None


def cupy_ndarray() -> type:
    """CuPy's array type (imported on first use)."""
    return cupy().ndarray


def device_array(x):
    """``x`` as a CuPy array when it lives on the GPU (no copy), else None."""
    cp = cupy()
    if isinstance(x, cp.ndarray):
        return x
    if type(x).__name__ == "TensorGPU":
        return x.as_array()
    dl_device = getattr(x, "__dlpack_device__", None)
    if dl_device is not None:
        try:
            kind = int(dl_device()[0])
        except Exception:  # noqa: BLE001 - a broken exporter: treat as host data, which says why
            return None
        if kind in _DLPACK_CPU:
            return None
        if kind in _DLPACK_CUDA and hasattr(x, "__dlpack__"):
            return cp.from_dlpack(x)  # (the exporter orders its stream before CuPy's current one)
    try:
        x.__cuda_array_interface__  # noqa: B018 - raises for host data (torch CPU tensors)
    except (AttributeError, RuntimeError, TypeError, ValueError):
        return None
    return cp.asarray(x)


def device_batch(batch):
    """A dense device batch (one array, or a stoker ``TensorListGPU``) as DeviceSamples, else None."""
    if type(batch).__name__ == "TensorListGPU":
        out = DeviceSamples(batch.samples())
        out.dense = batch.dense() if batch.is_dense_tensor() else None
        return out
    if isinstance(batch, (list, tuple)):
        return None
    arr = device_array(batch)
    if arr is None:
        return None
    if arr.ndim == 0:
        raise TypeError("a batch needs a leading sample dimension, got a 0-d device array")
    out = DeviceSamples(arr[i] for i in range(arr.shape[0]))
    out.dense = arr
    return out


def producer_event(cuda_stream=None):
    """An event recorded now on the stream the caller's data was made on (``cuda_stream``: a raw
    handle, a CuPy stream, a torch stream; None: the legacy default stream)."""
    cp = cupy()
    handle = cuda_stream
    if handle is None:
        handle = 0
    elif not isinstance(handle, int):
        handle = getattr(handle, "cuda_stream", None) or getattr(handle, "ptr", None) or 0
    ev = cp.cuda.Event(disable_timing=True)
    cp.cuda.runtime.eventRecord(ev.ptr, int(handle))
    return ev


def mark_ready(outs: list, cuda_stream=None) -> list:
    """Give the device outputs of one batch the event that orders them (see the module doc)."""
    device = [o for o in outs if isinstance(o, DeviceSamples)]
    if device:
        ev = producer_event(cuda_stream)
        for o in device:
            o.event = ev
    return outs


def to_device(samples, layout: str, batch, copy: bool):
    """One output's samples as a ``TensorListGPU`` on the pipeline's stream ``batch.stream``."""
    from stoker.operators.transfer import upload_batch
    from stoker.tensors import TensorListCPU
    from stoker.tensors_gpu import TensorListGPU

    if not isinstance(samples, DeviceSamples):
        return upload_batch(TensorListCPU(list(samples), layout), batch)
    if samples.event is not None and batch.stream is not None:
        batch.stream.wait_event(samples.event)
    with batch.stream if batch.stream is not None else contextlib.nullcontext():
        if samples.dense is not None:
            return TensorListGPU(samples.dense.copy() if copy else samples.dense, layout)
        cp = cupy()
        arrays = [s if isinstance(s, cp.ndarray) else cp.asarray(s) for s in samples]  # (host ones: copied)
        return TensorListGPU([a.copy() for a in arrays] if copy else arrays, layout)
