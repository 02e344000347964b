"""A batch of byte ranges read by the I/O helper process, parsed, and the next batch read ahead.

Why: the container readers (TFRecord, webdataset, RecordIO, ``.npy`` files, and the LMDB and
COCO readers) used to read each
sample with its own ``open``/``seek``/``read`` on the thread pool, in the CPU stage. On an H100
(16 threads, batch 256) that per-sample Python waited for the GIL and the stage ran 3-6x slower
than the file reader, which reads through :mod:`.io_worker` one batch ahead. This module gives
every :class:`._indexed.IndexedReader` that can say where a sample's bytes lie
(``sample_range``) the same path: one request per batch to the helper process (ranges of one
file share a descriptor and are read with ``preadv`` into one shared mapping), then the
reader's ``parse_sample`` over views of that mapping, both on a thread of their own one batch
ahead, so that the CPU stage only picks up the result.

The batch's samples lie in one buffer, so each 1-D uint8 output carries ``read_hints``
(:class:`stoker.tensors.ReadHints`: the samples' addresses and sizes, and the buffer): the mixed
decoders stage it with one copy and compute the JPEG frame hints in bulk
(:func:`stoker.backend.jpeg_header_bulk.frame_hints`).
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from stoker.operators.readers.io_worker import ReadWorker

_log = logging.getLogger("stoker")


class ParsedBatch:
    """A batch read and parsed: per sample its outputs (a tuple) or the exception it raised."""

    __slots__ = ("refs", "results", "base")

    def __init__(self, refs: list, results: list, base):
        self.refs, self.results, self.base = refs, results, base


class RangeReads:
    """The I/O helper process and the read-ahead thread of one reader.

    ``ranges(refs)`` gives the samples' entries (whole files, (path, offset, size) ranges or
    LMDB records: see :meth:`.io_worker.ReadWorker.read`); ``parse(ref, raw)`` turns
    one sample's bytes (a read-only uint8 view) into its outputs."""

    def __init__(self, ranges, parse):
        self.ranges, self.parse = ranges, parse
        self.worker = ReadWorker()
        self.thread = ThreadPoolExecutor(1, thread_name_prefix="stoker-read")
        self.pending = None  # (refs, future) of the batch read ahead

    def _read(self, refs: list) -> ParsedBatch:
        entries = self.ranges(refs)
        samples, errors, _, _ = self.worker.read(entries, scan_frames=False)
        results: list = [None] * len(refs)
        base = None
        for i, (r, raw) in enumerate(zip(refs, samples)):
            if raw is None:
                results[i] = OSError(f"cannot read {_describe(entries[i])}: {errors.get(i, 'unknown error')}")
                continue
            if base is None:
                base = raw.base
            try:
                results[i] = self.parse(r, raw)
            except Exception as e:  # noqa: BLE001 - kept: the error policy judges it on the stage's thread
                results[i] = e
        return ParsedBatch(refs, results, base)

    def take(self, refs: list, next_refs: list | None) -> ParsedBatch:
        """The parsed batch of ``refs`` (read ahead when it was asked for last time), and the read
        of ``next_refs`` started. OSError/EOFError when the helper process is gone."""
        pending, self.pending = self.pending, None
        if pending is not None and pending[0] == refs:
            batch = pending[1].result()
        else:
            batch = self._read(refs)
        if next_refs:
            self.pending = (next_refs, self.thread.submit(self._read, next_refs))
        return batch

    def close(self) -> None:
        thread, self.thread = self.thread, None
        self.pending = None
        if thread is not None:
            thread.shutdown(wait=True)
        self.worker.close()


def _describe(entry) -> str:
    """An entry of the helper as an error names it: the file (as :mod:`.storage` does), or the
    LMDB database and key (as the LMDB readers' ``source_info`` does)."""
    if isinstance(entry, str):
        return f"file {entry!r}"
    if isinstance(entry[1], bytes):
        return f"{entry[0]} at key {entry[1].decode('utf-8', 'backslashreplace')}"
    return f"file {entry[0]!r}"


def locate(samples: list, base) -> tuple | None:
    """(addresses, sizes) as two uint64 arrays when every sample is a 1-D uint8 view of ``base``
    (then the decoders stage them as one span and scan their headers in bulk); else None."""
    if base is None or not samples:
        return None
    lo = base.ctypes.data
    hi = lo + base.nbytes
    addrs = np.fromiter((s.ctypes.data if s.dtype == np.uint8 and s.ndim == 1 else 0 for s in samples),
                        np.uint64, len(samples))
    sizes = np.fromiter((s.nbytes for s in samples), np.uint64, len(samples))
    if addrs.min() < lo or (addrs + sizes).max() > hi:
        return None
    return addrs, sizes
