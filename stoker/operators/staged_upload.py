"""``_to_gpu``'s host half in the CPU stage (``STOKER_STAGE_UPLOADS=1``; off: the GPU speech front
end ran slower with it at small batches, its GPU stage then waiting inside the spectrogram; figures
in benchmarks/RESULTS.md).

``.gpu()`` packs a host batch into pinned memory and queues one copy. By default both happen in the
GPU stage, whose thread then spends the packing (several MB a batch of decoded audio: a third of
that thread's busy time in the GPU speech front end) away from launching the batch's kernels. With
the setting on, a batch of at least :data:`MIN_BYTES` is packed by the CPU stage, ahead of its GPU
stage, into pinned memory of its own, and the GPU stage only allocates the device buffer and queues
the copy. The pinned buffers are reused batch after batch (:class:`PinnedBuffers`): a buffer is
written again only once an event recorded after its copy has completed. (Pinned memory asked of
CUDA for every batch costs milliseconds a batch, and CuPy's pinned pool, keyed by exact size, finds
nothing to reuse when every batch has another size.) The device batch has the forms
``upload_batch`` gives: one dense array when every sample has one shape, else one flat buffer
(256-byte aligned samples).
"""

from __future__ import annotations

import collections
import threading

import numpy as np

from stoker.operators.base import HostHalf

MIN_BYTES = 1 << 20  # smaller batches (per-sample arguments, masks) are copied by the GPU stage as before
ALIGN = 256  # (PinnedRing.upload_many's alignment of ragged samples)
# From this size on, the pipeline's threads pack a batch together: one thread copies a few GB/s
# (NumPy lets go of the GIL while it copies), so a speech batch of 10+ MB would take milliseconds.
PARALLEL_BYTES = 4 << 20
PIECE_BYTES = 1 << 20  # the copies are cut into pieces of at most this many bytes, shared out evenly



class PinnedBuffers:
    """Pinned host buffers of power-of-two sizes, taken for one batch each and taken again once the
    event recorded after that batch's copy has completed (or its staging was called off)."""

    KEEP = 8  # free buffers kept at most (the smallest go first)

    def __init__(self):
        self._free: list = []  # (size, pinned memory, uint8 view)
        self._in_flight: collections.deque = collections.deque()  # (event, buffer) until the copy is done
        self._lock = threading.Lock()

    def take(self, nbytes: int):
        """A free buffer of at least ``nbytes``: (pinned memory, its uint8 view of ``nbytes``)."""
        with self._lock:
            while self._in_flight and self._in_flight[0][0].done:
                self._free.append(self._in_flight.popleft()[1])
            fits = [b for b in self._free if b[0] >= nbytes]
            if fits:
                buf = min(fits, key=lambda b: b[0])
                self._free.remove(buf)
                return buf[1], buf[2][:nbytes]
        from stoker.backend import cuda

        size = 1 << (max(nbytes, MIN_BYTES) - 1).bit_length()
        mem = cuda.cupy().cuda.alloc_pinned_memory(size)
        return mem, np.frombuffer(mem, np.uint8, size)[:nbytes]

    def give_back(self, mem, event=None) -> None:
        """``mem`` (from :meth:`take`) free again, at once or once ``event`` has completed."""
        full = np.frombuffer(mem, np.uint8)  # (the whole buffer, as take made it)
        buf = (full.size, mem, full)
        with self._lock:
            if event is None:
                self._free.append(buf)
            else:
                self._in_flight.append((event, buf))
            if len(self._free) > self.KEEP:
                self._free.remove(min(self._free, key=lambda b: b[0]))


_buffers = PinnedBuffers()


class StagedUpload(HostHalf):
    """A host batch packed into pinned memory: the bytes, where each sample lies, and its form."""

    def __init__(self, mem, view: np.ndarray, dense_shape, dtype, offsets, shapes, layout: str, sources):
        self.mem, self.view = mem, view
        self.dense_shape, self.dtype, self.offsets, self.shapes = dense_shape, dtype, offsets, shapes
        self.layout, self.sources = layout, sources

    def cancel(self) -> None:
        if self.mem is not None:  # (no copy was queued from it: the memory is free at once)
            _buffers.give_back(self.mem)
        self.mem = self.view = None


def stage(host, pool=None) -> StagedUpload | None:
    """Pack ``host`` (a TensorListCPU) into pinned memory, or None when it is smaller than
    :data:`MIN_BYTES` or empty (then the GPU stage copies it as before). With ``pool`` (the
    pipeline's thread pool) a batch of :data:`PARALLEL_BYTES` or more is packed by several threads."""
    dense = getattr(host, "_dense", None)  # (set by operators that make their batch as one array)
    if dense is not None and len(dense) == len(host):
        samples, dense_shape = [np.ascontiguousarray(dense)], tuple(dense.shape)
    else:
        # np.asarray(order="C"), not ascontiguousarray: that one turns 0-d samples into shape (1,)
        samples = [np.asarray(s, order="C") for s in host.samples()]
        if not samples:
            return None
        same = len({s.shape for s in samples}) == 1 and len({s.dtype for s in samples}) == 1
        dense_shape = (len(samples), *samples[0].shape) if same else None
    sizes = np.array([s.nbytes for s in samples], np.int64)
    if dense_shape is not None:
        offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        total = int(sizes.sum())
    else:
        padded = -(-sizes // ALIGN) * ALIGN
        offsets = np.concatenate([[0], np.cumsum(padded)[:-1]]).astype(np.int64)
        total = int(padded.sum())
    if total < MIN_BYTES:
        return None
    mem, view = _buffers.take(total)
    pack(view, samples, offsets.tolist(), pool if total >= PARALLEL_BYTES else None)
    shapes = None if dense_shape is not None else [s.shape for s in samples]
    return StagedUpload(mem, view, dense_shape, samples[0].dtype, offsets, shapes, host.layout(),
                        host.source_info())


def pack(view: np.ndarray, samples: list, offsets: list, pool=None) -> None:
    """Copy each C-contiguous array of ``samples`` into the uint8 ``view`` at its byte offset. With
    ``pool`` the copies are cut into pieces of :data:`PIECE_BYTES` and shared out in contiguous runs
    of about equal bytes, one run on this thread and the rest on the pool's threads."""
    pieces = []  # (destination, source) byte views
    for s, off in zip(samples, offsets):
        src = s.reshape(-1).view(np.uint8)
        step = PIECE_BYTES if pool is not None else max(src.size, 1)
        for start in range(0, src.size, step):
            piece = src[start:start + step]
            pieces.append((view[off + start:off + start + piece.size], piece))
    runs = min(len(pieces), getattr(pool, "_max_workers", 1) + 1)
    if pool is None or runs <= 1:
        _copy(pieces)
        return
    ends = np.cumsum([p[1].size for p in pieces])
    cuts = np.searchsorted(ends, ends[-1] * np.arange(1, runs) / runs, side="left") + 1
    groups = [g for g in np.split(np.arange(len(pieces)), cuts) if g.size]
    futures = [pool.submit(_copy, [pieces[i] for i in g]) for g in groups[1:]]
    _copy([pieces[i] for i in groups[0]])
    for f in futures:
        f.result()


def _copy(pieces) -> None:
    for dst, src in pieces:
        dst[...] = src


def finish(prep: StagedUpload, batch):
    """The device batch of a staged upload: its buffer allocated and its one copy queued on the
    batch's stream (the host does not wait)."""
    from stoker.backend import cuda
    from stoker.tensors_gpu import TensorListGPU

    cp = cuda.cupy()
    stream = cuda.current_stream(batch)
    total = prep.view.size
    out = cp.empty(prep.dense_shape, prep.dtype) if prep.dense_shape is not None else cp.empty(total, cp.uint8)
    cp.cuda.runtime.memcpyAsync(out.data.ptr, prep.view.ctypes.data, total, cp.cuda.runtime.memcpyHostToDevice,
                                stream.ptr)
    event = cp.cuda.Event(disable_timing=True)
    event.record(stream)
    _buffers.give_back(prep.mem, event)
    prep.mem = prep.view = None
    if prep.dense_shape is not None:
        return TensorListGPU(out, prep.layout, prep.sources)
    # (ragged: a flat buffer; its size is a multiple of 256, so of any element size)
    dtype = np.dtype(prep.dtype)
    shapes = np.asarray(prep.shapes, np.int64).reshape(len(prep.shapes), -1)
    return TensorListGPU.from_flat(out.view(dtype), prep.offsets // dtype.itemsize, shapes, prep.layout,
                                   prep.sources)
