"""Moving batches between host and device: ``_to_gpu`` (``.gpu()``) and ``_to_cpu`` (``.cpu()``).

``_to_gpu`` runs in the GPU stage ("mixed"): the host samples are packed into
one pinned staging buffer and copied with a single asynchronous copy on the
pipeline's stream. A dense batch lands as one contiguous ``(N, ...)`` device
array; a ragged one as views into one device buffer.
"""

from __future__ import annotations

import numpy as np

from stoker.operators.base import BatchContext, Operator
from stoker.operators.schema import Schema, register
from stoker.tensors import TensorListCPU


def upload_batch(host, batch: BatchContext):
    """A ``TensorListCPU`` copied to the device on ``batch.stream``, through pinned staging."""
    from stoker.backend import cuda
    from stoker.tensors_gpu import TensorListGPU

    stream = cuda.current_stream(batch)
    ring = pinned_ring(batch)
    dense = getattr(host, "_dense", None)  # (set by operators that make their batch as one array)
    if dense is not None and len(dense) == len(host):
        return TensorListGPU(ring.upload(dense, stream), host.layout(), host.source_info())
    # np.asarray(order="C"), not ascontiguousarray: that one turns 0-d samples (scalars, masks)
    # into shape (1,).
    samples = [np.asarray(s, order="C") for s in host.samples()]
    sources = host.source_info()
    if not samples:
        return TensorListGPU([], host.layout(), sources)
    if len({s.shape for s in samples}) == 1:
        # packed straight into pinned memory (np.stack made one more copy, and let go of the GIL
        # around each sample's: benchmarks/host_copy_contention.py)
        dense = cuda.cupy().empty((len(samples), *samples[0].shape), samples[0].dtype)
        ring.upload_packed(samples, dense.data.ptr, stream)
        return TensorListGPU(dense, host.layout(), sources)
    buf, offsets = ring.upload_many(samples, stream)
    dtype = samples[0].dtype
    if all(s.dtype == dtype and s.ndim == samples[0].ndim for s in samples) and buf.size % dtype.itemsize == 0:
        # One flat batch (the decoders' form): kernels read its placement as arrays and no
        # per-sample device view is made (upload_many aligns every sample to 256 bytes).
        shapes = np.asarray([s.shape for s in samples], np.int64).reshape(len(samples), -1)
        elements = np.asarray(offsets, np.int64) // dtype.itemsize
        return TensorListGPU.from_flat(buf.view(dtype), elements, shapes, host.layout(), sources)
    return TensorListGPU(device_views(buf, offsets, samples), host.layout(), sources, keep_alive=buf)


def device_views(buf, offsets, arrays) -> list:
    """Views of the flat uint8 device buffer ``buf`` shaped and typed as the host ``arrays`` that
    were uploaded at ``offsets`` (:meth:`PinnedRing.upload_many`)."""
    from stoker.backend import cuda

    cp = cuda.cupy()
    return [(buf[off:off + a.nbytes].view(a.dtype) if a.nbytes else cp.empty(0, a.dtype)).reshape(a.shape)
            for a, off in zip(arrays, offsets)]


_rings: dict = {}


def pinned_ring(batch: BatchContext):
    """The pinned host staging ring of the batch's device (one per device, made on first use)."""
    from stoker.backend.cuda import PinnedRing

    dev = batch.device_id or 0
    ring = _rings.get(dev)
    if ring is None:
        ring = _rings[dev] = PinnedRing(dev, slots=8)
    return ring


_arenas: dict = {}


def table_arena(batch: BatchContext):
    """The device's ring of pinned memory for small per-batch tables (``cuda.TableArena``)."""
    from stoker.backend.cuda import TableArena

    dev = batch.device_id or 0
    arena = _arenas.get(dev)
    if arena is None:
        arena = _arenas.setdefault(dev, TableArena())
    return arena


def seal_tables(device_id: int | None) -> None:
    """Guard the tables a GPU stage uploaded with one event (``cuda.TableArena.seal``)."""
    arena = _arenas.get(device_id or 0)
    if arena is not None:
        arena.seal()


@register
class ToGpu(Operator):
    """Copies a host batch to the GPU (what ``DataNode.gpu()`` records)."""

    schema = Schema(name="_to_gpu", doc="Copies a CPU batch to the GPU.", devices=("mixed", "gpu"))

    def prepare_host(self, batch, inputs, arg_inputs):
        """With ``STOKER_STAGE_UPLOADS=1``, a large host batch is packed into pinned memory here, in
        the CPU stage (:mod:`stoker.operators.staged_upload`); None otherwise."""
        from stoker import settings

        x = inputs[0] if inputs else None
        if not settings.get().stage_uploads or not isinstance(x, TensorListCPU):
            return None
        from stoker.operators.staged_upload import stage

        return stage(x, batch.pool)

    def run_gpu(self, batch, inputs, arg_inputs):
        from stoker.tensors_gpu import TensorListGPU

        x = inputs[0]
        if isinstance(x, TensorListGPU):
            return [x]
        prepared = batch.prepared
        if prepared is not None and getattr(prepared, "view", None) is not None:
            from stoker.operators.staged_upload import finish

            return [finish(prepared, batch)]
        return [upload_batch(x, batch)]


@register
class ToCpu(Operator):
    """Copies a GPU batch back to the host (what ``DataNode.cpu()`` records)."""

    schema = Schema(name="_to_cpu", doc="Copies a GPU batch to the CPU.", devices=("cpu",))

    def run_gpu(self, batch, inputs, arg_inputs):
        x = inputs[0]
        if not hasattr(x, "as_cpu"):
            return [x]
        if batch.stream is not None:
            batch.stream.synchronize()
        return [x.as_cpu()]

    def run_cpu(self, batch, inputs, arg_inputs):
        return [inputs[0].as_cpu() if hasattr(inputs[0], "as_cpu") else inputs[0]]
