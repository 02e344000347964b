"""``readers.numpy`` with ``device="gpu"``: the arrays land in GPU memory.

Two halves, as the executor stages GPU operators:

* host half (:func:`prepare`, in the CPU stage, overlapping the previous
  batch's GPU work): every sample's header and region are planned, then the
  elements are read straight into one pinned staging buffer (``readinto``,
  no intermediate copy) where the file holds the output as it is (whole
  array, C order, native byte order); other samples (a region, Fortran order,
  big-endian) are read by the CPU path and copied in. Bad samples follow
  ``on_error`` as on the CPU (skipped and refilled, or substituted).
* device half (:func:`run_gpu`, in the GPU stage): one asynchronous copy of
  the staging buffer per batch into one device buffer, and a flat
  ``TensorListGPU`` over it (samples back to back, 256-byte aligned).

GPUDirect Storage: with ``STOKER_NUMPY_GDS=1`` and ``kvikio`` importable, the
whole-array samples are read by kvikio into a device staging buffer (then one
device-to-device copy on the pipeline's stream) instead of through pinned
memory; kvikio itself falls back to POSIX reads where the file system has no
GDS support. Any other value, or no kvikio, takes the pinned path.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from stoker import settings
from stoker.operators.base import HostHalf
from stoker.operators.gpu_registry import register_gpu
from stoker.operators.readers import storage
from stoker.operators.readers.numpy import read_window

_log = logging.getLogger("stoker")
_ALIGN = 256
_MAX_FREE = 8  # staging buffers kept for reuse (one per batch in flight is enough)


def gds_wanted() -> bool:
    """Whether GPUDirect Storage reads are asked for (``STOKER_NUMPY_GDS=1``) and kvikio imports."""
    if not settings.get().numpy_gds:
        return False
    try:
        import kvikio  # noqa: F401
    except ImportError:
        _log.warning("readers.numpy: STOKER_NUMPY_GDS=1 but kvikio is not installed; reading through pinned memory")
        return False
    return True


class _Staging:
    """Staging buffers (pinned host, or device for GDS) handed out per batch and taken back once
    the copy that reads them is queued; a buffer is written again only after that copy's event."""

    def __init__(self, device: bool):
        self.device = device
        self._free: list = []  # [(buffer as uint8 array, event or None)]
        self._lock = threading.Lock()

    def acquire(self, nbytes: int):
        from stoker.backend.cuda import cupy

        with self._lock:
            fits = [k for k, (buf, _) in enumerate(self._free) if buf.size >= nbytes]
            picked = self._free.pop(min(fits, key=lambda k: self._free[k][0].size)) if fits else None
        if picked is not None:
            buf, ev = picked
            if ev is not None:
                ev.synchronize()  # (the copy that read it: long done, as a rule)
            return buf
        cp = cupy()
        size = 1 << max(20, (max(nbytes, 1) - 1).bit_length())
        if self.device:
            return cp.empty(size, cp.uint8)
        return np.frombuffer(cp.cuda.alloc_pinned_memory(size), np.uint8, size)

    def release(self, buf, event=None) -> None:
        with self._lock:
            self._free.append((buf, event))
            if len(self._free) > _MAX_FREE:
                self._free.sort(key=lambda x: x[0].size)
                self._free.pop(0)


def _staging(op, device: bool) -> _Staging:
    key = "_gpu_staging_dev" if device else "_gpu_staging"
    st = op.__dict__.get(key)
    if st is None:
        st = op.__dict__.setdefault(key, _Staging(device))
    return st


def batch_refs(op, ctx) -> list:
    """The batch's references as the executor now holds the batch: samples skipped since the last
    call are gone (refills were appended by ``advance``), substituted ones (``None``) take the
    nearest good sample before them (else after), as the executor substitutes; a batch the
    executor completed with padding repeats its last sample."""
    refs = op._gpu_refs[ctx.iteration]
    n = ctx.batch_size
    if len(refs) > n and None not in refs:
        del refs[:len(refs) - n]  # the executor dropped the padding it advanced over first
    if None in refs:
        good = [k for k, r in enumerate(refs) if r is not None]
        if good:
            for k, r in enumerate(refs):
                if r is None:
                    before = [g for g in good if g < k]
                    refs[k] = refs[before[-1] if before else good[0]]
    while refs and len(refs) < n:
        refs.append(refs[-1])
    return refs


@dataclass
class StagedBatch(HostHalf):
    """The host half's result for one batch (``batch.prepared`` in :func:`run_gpu`)."""

    op: Any = field(repr=False)
    """The reader, whose staging pools the buffers go back to."""
    host: np.ndarray | None
    """The pinned staging buffer (uint8), None once run_gpu took it or the batch was dropped."""
    dev: Any
    """The GDS device staging buffer, or None."""
    total: int
    """Bytes staged (samples back to back, each padded to 256 bytes)."""
    offsets: np.ndarray
    """Each sample's byte offset in the staging."""
    shapes: list
    """Each sample's shape."""
    dtype: np.dtype
    """The batch's element type (native byte order)."""
    sources: list
    """The samples' sources (file names)."""
    gds: list
    """The samples read into the device staging (not into the host one)."""
    sizes: np.ndarray
    """Each sample's size in bytes (unpadded)."""

    def take_host(self) -> np.ndarray:
        """The host staging, handed to run_gpu's copy (a later :meth:`cancel` then does nothing)."""
        host, self.host = self.host, None
        return host

    def cancel(self) -> None:
        """The batch was dropped before its GPU stage: the staging buffers go back to their pools."""
        host = self.take_host()
        if host is not None:
            _staging(self.op, False).release(host)
            if self.dev is not None:
                _staging(self.op, True).release(self.dev)


def prepare(op, ctx, inputs, arg_inputs) -> StagedBatch | None:
    """Host half: plan and read the batch into pinned (or GDS device) staging. Returns the
    :class:`StagedBatch` for :func:`run_gpu`, or None where samples failed (``ctx.failures``: the
    executor drops them and prepares the batch again)."""
    refs = batch_refs(op, ctx)
    n = len(refs)
    ctx.sources = [op.sample_source(r) for r in refs]
    policy = op.args.get("on_error") or ctx.on_error
    plans = op.map_samples(ctx, n, lambda k: op.plan(refs[k], op.sample_args(arg_inputs, k)))
    # Samples that failed here are still staged as empty ones and the others read, so that every
    # bad sample of the batch is found in this one call (the executor then repairs the batch once).
    good = [k for k in range(n) if plans[k] is not None]
    headers = [plans[k][0] for k in good]
    shapes = [() if p is None else tuple(p[0].shape) if p[1] is None else tuple(p[1][0]) for p in plans]
    dtype = headers[0].dtype.newbyteorder("=") if headers else np.dtype(np.uint8)
    if any(h.dtype.newbyteorder("=") != dtype or len(h.shape) != len(headers[0].shape) for h in headers):
        op.check_batch([np.empty((0,) * len(h.shape), h.dtype.newbyteorder("=")) for h in headers],
                       [refs[k] for k in good])  # (raises, naming two files that differ)
    sizes = np.asarray([0 if p is None else int(np.prod(s, dtype=np.int64)) * dtype.itemsize
                        for p, s in zip(plans, shapes)], np.int64)
    padded = (sizes + _ALIGN - 1) // _ALIGN * _ALIGN
    offsets = np.zeros(n, np.int64)
    np.cumsum(padded[:-1], out=offsets[1:])
    total = int(padded.sum())
    direct = [p is not None and p[1] is None and not p[0].fortran and p[0].dtype.isnative for p in plans]
    use_gds = getattr(op, "_gds", None)
    if use_gds is None:
        use_gds = op._gds = gds_wanted()
    host = _staging(op, False).acquire(total)
    dev = _staging(op, True).acquire(total) if use_gds and any(direct) else None
    paths = [op.full_paths[r] for r in refs]

    def fill(k):
        lo, size = int(offsets[k]), int(sizes[k])
        if plans[k] is None or size == 0:
            return True
        h, w = plans[k]
        if direct[k] and dev is not None:
            _gds_read(paths[k], h, dev, lo, size)
        elif direct[k]:
            _read_into(paths[k], h.offset, host[lo:lo + size])
        else:
            arr = read_window(paths[k], h, w, op.args["fill_value"])
            host[lo:lo + size] = np.ascontiguousarray(arr).reshape(-1).view(np.uint8)
        return True

    op.map_samples(ctx, n, fill)
    if ctx.failures:
        _staging(op, False).release(host)
        if dev is not None:
            _staging(op, True).release(dev)
        return record_failures(op, ctx, refs, policy)
    return StagedBatch(op, host, dev, total, offsets, shapes, dtype, list(ctx.sources),
                       [k for k in range(n) if direct[k] and dev is not None], sizes)


def record_failures(op, ctx, refs, policy):
    """Record the failed samples for the executor (it reports, refills or substitutes them and
    prepares the batch again): skipped ones leave the references, substituted ones become None."""
    for k in sorted(ctx.failures, reverse=True):
        if policy == "substitute":
            refs[k] = None
        else:
            del refs[k]
    return None


def _read_into(path: str, offset: int, out: np.ndarray) -> None:
    """Read ``out.size`` bytes of ``path`` from ``offset`` straight into ``out`` (pinned memory)."""
    view = memoryview(out)
    with storage.open_binary(path) as f:
        f.seek(offset)
        got = 0
        while got < out.size:
            k = f.readinto(view[got:])
            if not k:
                raise OSError(f"cannot read file {path!r}: {out.size} bytes wanted at offset {offset}, "
                              f"the file ends after {got}")
            got += k


def _gds_read(path: str, h, dev, lo: int, size: int) -> None:
    """Read a sample's elements with kvikio (GPUDirect Storage where the file system has it)."""
    import kvikio

    if storage.is_remote(path):
        raise OSError(f"cannot read file {path!r} with GPUDirect Storage: not a local file")
    try:
        with kvikio.CuFile(path, "r") as f:
            got = f.pread(dev[lo:lo + size], size, h.offset).get()
    except (RuntimeError, OSError) as e:
        raise OSError(f"cannot read file {path!r} with kvikio: {e}") from None
    if got != size:
        raise OSError(f"cannot read file {path!r}: {size} bytes wanted at offset {h.offset}, got {got}")


@register_gpu("readers.numpy", devices=("gpu",), prepare=prepare)
def run_gpu(op, batch, inputs, arg_inputs):
    """Device half: one asynchronous copy of the staged batch, a flat ``TensorListGPU`` over it."""
    from stoker.backend import cuda
    from stoker.operators.gpu_registry import host_fallback
    from stoker.tensors_gpu import TensorListGPU

    plan = batch.prepared
    if not isinstance(plan, StagedBatch):  # (no host half ran: read on the host, then copy)
        return host_fallback(op, batch, inputs, arg_inputs)
    op._gpu_refs.pop(batch.iteration, None)
    cp = cuda.cupy()
    stream = cuda.current_stream(batch)
    total, host, dev = plan.total, plan.take_host(), plan.dev
    out = cp.empty(max(total, _ALIGN), cp.uint8)
    rt = cp.cuda.runtime
    if total:
        rt.memcpyAsync(out.data.ptr, host.ctypes.data, total, rt.memcpyHostToDevice, stream.ptr)
    for k in plan.gds:  # (these bytes of the host staging were not written)
        lo, size = int(plan.offsets[k]), int(plan.sizes[k])
        rt.memcpyAsync(out.data.ptr + lo, dev.data.ptr + lo, size, rt.memcpyDeviceToDevice, stream.ptr)
    ev = cp.cuda.Event(disable_timing=True)
    ev.record(stream)
    _staging(op, False).release(host, ev)
    if dev is not None:
        _staging(op, True).release(dev, ev)
    dtype = plan.dtype
    shapes = np.asarray(plan.shapes, np.int64).reshape(len(plan.shapes), -1)
    usable = out[:(out.size // dtype.itemsize) * dtype.itemsize]
    elements = plan.offsets // dtype.itemsize
    return [TensorListGPU.from_flat(usable.view(dtype), elements, shapes, "", plan.sources)]
