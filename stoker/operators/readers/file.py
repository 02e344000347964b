"""``fn.readers.file``: file contents and integer labels from a folder tree, a list file or a list of paths.

Outputs per sample: the file's bytes (1D uint8) and its label (int32, shape (1,)).
The sample's ``source_info`` is the path as DALI reports it (relative to
``file_root`` when there is one); errors name the full path.

``file_root``, ``file_list`` and ``files`` may be fsspec URLs (``s3://``, ``gs://``,
``http(s)://``): listing, the list file and the samples are then read through
:mod:`.storage` (retries, the local cache: see :mod:`.remote`). Local files are read by
the I/O helper process when it is on (:mod:`.io_worker`); remote files are read in this
process instead, each batch fetched concurrently in one call while the next batch is
fetched ahead on a thread of its own (the helper is plain Python without fsspec, and a
batch of remote reads waits on the network, not on the GIL).

Order, shard boundaries, padding, shard rotation and ``reader_meta()`` match
DALI; shuffling is a per-pass permutation (see :mod:`._order`) instead of
DALI's ``initial_fill`` buffer, so that a checkpoint is O(1).
"""

from __future__ import annotations

import logging
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from stoker import settings
from stoker.errors import printable
from stoker.operators.base import Reader
from stoker.operators.readers import storage
from stoker.operators.readers._indexed import IndexedReader
from stoker.operators.readers._listing import (
    DEFAULT_FILE_FILTERS,
    ListingError,
    list_class_folders,
    read_file_list,
)
from stoker.operators.readers._order import ShardedOrder
from stoker.operators.readers.io_worker import ReadWorker
from stoker.operators.schema import Arg, Schema, register
from stoker.tensors import ReadHints, TensorListCPU

_log = logging.getLogger("stoker")


def wants_io_process(num_threads: int) -> bool:
    """Whether files are read by the I/O helper process: ``STOKER_READER_PROCESS`` = 1 / 0, or
    "auto" (default): with 4 or more pipeline threads on Linux, where the GIL traffic of
    reading in the pipeline's own process costs the most (measured on an H100, see io_worker)."""
    mode = settings.get().reader_process  # None: auto
    if not hasattr(os, "memfd_create") or mode is False:
        return False
    return mode is True or num_threads >= 4

# Arguments every sharded reader takes (DALI's reader arguments).
READER_ARGS = (
    Arg("shard_id", "int", 0, doc="index of the shard to read"),
    Arg("num_shards", "int", 1, doc="number of parts the data set is split into (one per GPU/process)"),
    Arg("random_shuffle", "bool", False,
        doc="shuffle the samples of each pass; stoker uses a full permutation of the shard that is a "
            "function of (seed, pass), not DALI's initial_fill buffer, so a checkpoint is O(1)"),
    Arg("initial_fill", "int", 1024, doc="accepted for compatibility (stoker shuffles whole shards)"),
    Arg("shuffle_after_epoch", "bool", False,
        doc="permute the whole data set at every pass, identically on every shard"),
    Arg("shuffle_after_epoch_seed", "int", None, doc="seed of shuffle_after_epoch (default: fixed)"),
    Arg("stick_to_shard", "bool", False, doc="read the same shard every pass instead of rotating"),
    Arg("pad_last_batch", "bool", False,
        doc="pad each pass with its last sample up to a whole batch; the next pass starts a new batch"),
    Arg("read_ahead", "bool", False, doc="accepted for compatibility"),
    Arg("prefetch_queue_depth", "int", 1, doc="accepted for compatibility (the pipeline prefetches)"),
    Arg("lazy_init", "bool", False, doc="list the data set on first use instead of at build"),
    Arg("skip_cached_images", "bool", False, doc="accepted for compatibility (no decoder cache)"),
    Arg("dont_use_mmap", "bool", False, doc="accepted for compatibility (files are read, not mapped)"),
    Arg("tensor_init_bytes", "int", 1048576, doc="accepted for compatibility"),
)


@register
class FileReader(IndexedReader):
    """Reads whole files and their labels (``fn.readers.file`` / ``ops.readers.File`` / ``ops.FileReader``)."""

    schema = Schema(
        name="readers.file",
        doc="Reads file contents (1D uint8) and labels (int32, shape (1,)). The files are the contents of "
            "the sub-folders of ``file_root`` (label = rank of the sorted folder name), the lines "
            "'path label' of ``file_list``, or ``files`` with ``labels``.",
        args=[
            Arg("file_root", "str", None, doc="folder of class sub-folders, or the root of relative paths"),
            Arg("file_list", "str", None, doc="text file with one 'path label' per line"),
            Arg("files", "str_list", None, doc="paths to read (relative to file_root if given)"),
            Arg("labels", "int_list", None, doc="labels of ``files``; default: their positions"),
            Arg("file_filters", "str_list", list(DEFAULT_FILE_FILTERS),
                doc="glob patterns of the file names listed under file_root"),
            Arg("case_sensitive_filter", "bool", False, doc="match file_filters/dir_filters case-sensitively"),
            Arg("dir_filters", "str_list", None, doc="glob patterns of the class folders to use"),
            *READER_ARGS,
        ],
        inputs=(0, 0),
        num_outputs=2,
        legacy_name="FileReader",
    )

    def setup(self):
        super().setup()  # shards, shuffling and the listing state (IndexedReader)
        a = self.args
        if a["files"] is not None and a["file_list"] is not None:
            raise self._arg_error("files", "give either files or file_list, not both")
        if a["files"] is None and a["file_list"] is None and a["file_root"] is None:
            raise self._arg_error("file_root", "is required unless files or file_list is given")
        if a["labels"] is not None:
            if a["files"] is None:
                raise self._arg_error("labels", "is used only together with files")
            if len(a["labels"]) != len(a["files"]):
                raise self._arg_error("labels", f"has {len(a['labels'])} labels for {len(a['files'])} files")
        self._broken: dict[int, str] = {}
        self._use_worker = False  # read through the I/O helper process (see io_worker)
        self._worker = None
        self._worker_thread = None  # waits on the helper for the next batch's files
        self._pending_read = None  # (paths, future) of the batch read ahead
        self.remote = False  # some files are URLs: read with storage.read_many, never by the helper

    def bind_pipeline(self, pipe) -> None:
        """At build, and again for each trial of num_threads="auto" (stoker.pipeline.tuning): a
        helper no longer wanted is stopped; one wanted starts on the next batch."""
        self._batch_size = max(1, pipe.batch_size)
        self._use_worker = wants_io_process(getattr(pipe, "num_threads", 1) or 1)
        # the mixed decoders' JPEG structure check (strict), done by the I/O process when wanted
        from stoker.backend.jpeg_scan_check import structure_check_wanted

        self._check_structure = getattr(pipe, "device_id", None) is not None and \
            structure_check_wanted(True, getattr(pipe, "on_error", None))
        if not self._use_worker and self._worker is not None:
            self.close()

    # --- listing ------------------------------------------------------------
    def prepare(self) -> None:
        if not self.args["lazy_init"]:
            self._ensure_listed()
        if self._use_worker:
            # The I/O helper process starts now, at build, so that its start-up runs beside the
            # rest of the build (CuPy, the decoders) instead of in front of the first batch.
            self._io()

    def _list(self) -> None:
        a = self.args
        root = a["file_root"]
        broken: dict[int, str] = {}  # entries listed that cannot be read: index -> why (see _listing)
        try:
            if a["files"] is not None:
                paths = list(a["files"])
                labels = list(a["labels"]) if a["labels"] is not None else list(range(len(paths)))
                if not paths:
                    raise ListingError("files", "is empty")
                base = root
            elif a["file_list"] is not None:
                storage.require(a["file_list"])
                paths, labels = read_file_list(a["file_list"])
                base = root if root is not None else storage.parent(a["file_list"])
            else:
                storage.require(root)
                paths, labels, broken = list_class_folders(root, a["file_filters"], a["dir_filters"],
                                                           a["case_sensitive_filter"])
                base = root
            # (a file:// path is read as the local path it names, also by the I/O helper process)
            full_paths = [q if storage.is_remote(q) else storage.local_path(q)
                          for q in (storage.join(base, p) for p in paths)]
            self._require_drivers(full_paths)
        except ListingError as e:
            raise self._arg_error(e.arg, str(e)) from None
        except storage.StorageUnavailableError as e:
            raise self._arg_error(self._remote_arg(), str(e)) from None
        if len(paths) < a["num_shards"]:
            raise self._arg_error("num_shards", f"{a['num_shards']} shards for only {len(paths)} files")
        self.paths = paths
        self.full_paths = full_paths
        self.remote = any(storage.is_remote(p) for p in full_paths)
        self._broken = broken
        if broken:
            shown = "; ".join(f"{printable(paths[i])}: {printable(why)}" for i, why in list(broken.items())[:3])
            more = f" and {len(broken) - 3} more" if len(broken) > 3 else ""
            _log.warning("%s: %d entr%s under file_root cannot be read and will fail as bad samples: %s%s",
                         self._label(), len(broken), "y" if len(broken) == 1 else "ies", shown, more)
        self.labels = np.asarray(labels, dtype=np.int32)
        self._order = ShardedOrder(
            len(paths), num_shards=a["num_shards"], shard_id=a["shard_id"], stick_to_shard=a["stick_to_shard"],
            pad_last_batch=a["pad_last_batch"], random_shuffle=a["random_shuffle"], shuffle_seed=self.op_seed,
            shuffle_after_epoch=a["shuffle_after_epoch"], shuffle_after_epoch_seed=a["shuffle_after_epoch_seed"],
            batch_size=self._batch_size)
        if self._pending_state is not None:
            pending, self._pending_state = self._pending_state, None
            self.set_state(pending)

    @staticmethod
    def _require_drivers(full_paths: list[str]) -> None:
        """Fail at build, not at the first sample, when a URL's scheme has no driver installed."""
        seen = set()
        for p in full_paths:
            scheme = p.partition("://")[0] if storage.is_remote(p) else None
            if scheme is not None and scheme not in seen:
                seen.add(scheme)
                storage.require(p)

    def _remote_arg(self) -> str:
        """The argument that brought in the URLs (for errors)."""
        a = self.args
        for arg in ("file_root", "file_list"):
            if a[arg] is not None and storage.is_remote(a[arg]):
                return arg
        return "files" if a["files"] is not None else ("file_list" if a["file_list"] is not None else "file_root")

    def _maybe_remote(self) -> bool:
        """Whether files are URLs (known before listing from the arguments, for lazy_init)."""
        if self._order is not None:
            return self.remote
        a = self.args
        given = [a["file_root"], a["file_list"], *(a["files"] or ())]
        return any(p is not None and storage.is_remote(p) for p in given)

    def load(self, ref) -> tuple:
        path = self.full_paths[ref]
        if ref in self._broken:  # found unreadable when listed: fails like a corrupt file
            raise OSError(f"cannot read file {path!r}: {self._broken[ref]}")
        raw = storage.read_bytes(path)  # (OSError naming the path, or URL after retries)
        # A read-only view of the bytes object: no second copy (encoded data is never written).
        return np.frombuffer(raw, dtype=np.uint8), self.labels[ref:ref + 1].copy()

    def source_of(self, ref) -> str:
        return self.paths[ref]

    # --- reading through the I/O helper process -------------------------------------------------
    def _io(self):
        if self._worker is None and self._use_worker and not self._maybe_remote():
            try:
                self._worker = ReadWorker()
                self._worker_thread = ThreadPoolExecutor(1, thread_name_prefix="stoker-read")
            except OSError as e:
                _log.warning("readers.file: no I/O helper process (%s); reading in this process", e)
                self._use_worker = False
        return self._worker

    def run_cpu(self, batch, inputs, arg_inputs):
        """Read the batch's files: through the I/O helper process when it is on (see
        :mod:`.io_worker`), reading the next batch ahead; URLs concurrently, also reading the
        next batch ahead; else on the thread pool."""
        if self.remote:
            return self._run_remote(batch)
        worker = self._io()
        if worker is None:
            return Reader.run_cpu(self, batch, inputs, arg_inputs)  # (file by file on the pool)
        refs = batch.prepared
        paths = [self.full_paths[r] for r in refs]
        batch.sources = [self.paths[r] for r in refs]
        pending, self._pending_read = self._pending_read, None
        try:
            if pending is not None and pending[0] == paths:
                samples, errors, hints, located = pending[1].result()
            else:
                samples, errors, hints, located = worker.read(
                    paths, check_structure=getattr(self, "_check_structure", False))
        except (OSError, EOFError) as e:  # the helper is gone: read in this process from now on
            _log.warning("readers.file: the I/O helper process failed (%s); reading in this process", e)
            self.close()
            self._use_worker = False
            return Reader.run_cpu(self, batch, inputs, arg_inputs)  # (file by file on the pool)
        self._read_ahead(len(refs), self._worker.read)
        return self._assemble(batch, refs, paths, samples, errors, hints, located)

    def _run_remote(self, batch):
        """A batch of URLs: fetched in one concurrent call (:func:`.storage.read_many`), and the
        next batch's fetch started on the read-ahead thread before this one is handed on."""
        refs = batch.prepared
        paths = [self.full_paths[r] for r in refs]
        batch.sources = [self.paths[r] for r in refs]
        if self._worker_thread is None:
            self._worker_thread = ThreadPoolExecutor(1, thread_name_prefix="stoker-read")
        pending, self._pending_read = self._pending_read, None
        if pending is not None and pending[0] == paths:
            got = pending[1].result()
        else:
            got = storage.read_many(paths)
        self._read_ahead(len(refs), storage.read_many)
        samples = [np.frombuffer(g, dtype=np.uint8) if isinstance(g, bytes) else None for g in got]
        errors = {i: g for i, g in enumerate(got) if not isinstance(g, bytes)}
        return self._assemble(batch, refs, paths, samples, errors)

    def _assemble(self, batch, refs, paths, samples, errors, hints=None, located=None):
        """The outputs of a batch read outside the thread pool: ``samples`` (None where reading
        failed), ``errors`` {position: reason text or OSError}; failed samples go through the
        error policy (on_error) as in the per-sample path."""
        sources = batch.sources
        for i, r in enumerate(refs):
            if r in self._broken:  # (the helper read the entry's path as it stands, e.g. a folder)
                samples[i], errors[i] = None, self._broken[r]
        labels = self.labels[np.asarray(refs, dtype=np.int64)].reshape(-1, 1)
        if not errors:  # every file read: no per-sample step
            data = TensorListCPU(samples, "", sources)
            if hints is not None or located is not None:
                # Each file's JPEG frame header, scanned by the helper: the mixed decoders read these
                # instead of scanning in this process (stoker/operators/decoders/mixed/hardware.py).
                data.read_hints = ReadHints(frame_hints=hints, located=located)
            return [data, TensorListCPU(labels, "", sources)]

        def one(i):
            if samples[i] is None:
                why = errors.get(i)
                raise why if isinstance(why, OSError) else OSError(f"cannot read file {paths[i]!r}: {why}")
            return samples[i], labels[i]

        pool, batch.pool = batch.pool, None  # nothing left to parallelize
        try:
            results = self.map_samples(batch, len(refs), one)
        finally:
            batch.pool = pool
        kept = [i for i in range(len(refs)) if results[i] is not None]
        if len(kept) == len(refs):
            return [TensorListCPU([r[0] for r in results], "", sources), TensorListCPU(labels, "", sources)]
        return [TensorListCPU([results[i][k] for i in kept], "", [sources[i] for i in kept]) for k in range(2)]

    def _read_ahead(self, count: int, read) -> None:
        """Start ``read`` (the helper's, or the remote one) of the next ``count`` files now on the
        read-ahead thread (the stream is peeked, not advanced)."""
        order = self._order
        saved = order.epoch, order.position
        try:
            refs = [i for i, _ in order.take(count)]
        finally:
            order.epoch, order.position = saved
        paths = [self.full_paths[r] for r in refs]
        self._pending_read = (paths, self._worker_thread.submit(read, paths))

    def close(self) -> None:
        """Stop the I/O helper process and the read-ahead thread (``Pipeline.close``)."""
        worker, self._worker = self._worker, None
        thread, self._worker_thread = self._worker_thread, None
        self._pending_read = None
        if thread is not None:
            thread.shutdown(wait=True)
        if worker is not None:
            worker.close()

    def output_layouts(self, input_layouts):
        return ["", ""]

    def fingerprint(self) -> dict:
        """What a checkpoint's position means for this reader: the data set's size and a hash of
        its file list (paths and labels), so that a checkpoint of another data set is refused
        (:mod:`stoker.pipeline.checkpoint`)."""
        import hashlib

        order = self._ensure_listed()
        digest = hashlib.sha256("\0".join(self.paths).encode("utf-8", "surrogateescape"))
        digest.update(np.ascontiguousarray(self.labels, dtype="<i4").tobytes())
        return {"epoch_size": order.n, "files": digest.hexdigest()[:16]}
