"""The common part of every reader whose data set is listed once as ``n`` samples.

A subclass lists its data set (``list_samples``), says where sample ``i`` comes
from (``sample_source``) and reads it (``load_sample``). This base gives it
the file reader's guarantees without more code:

* DALI's sharding, padding and shard rotation, and stoker's O(1) shuffling
  (:class:`._order.ShardedOrder`);
* ``lazy_init``; ``reader_meta()`` / ``epoch_size``;
* checkpoints (``state`` / ``set_state``, a restore before listing waits for it)
  and a fingerprint of the listing, so a checkpoint of another data set is
  refused;
* argument errors naming the reader, the argument and the user's line.

A subclass whose samples are byte ranges of local files (or LMDB records) says so
(``reads_ranges``), where each lies (``sample_range``, or ``helper_entry``) and how its bytes
become outputs (``parse_sample``);
with 4 or more pipeline threads its batches are then read by the I/O helper process,
one batch ahead (:mod:`._batch_read`), instead of sample by sample on the thread pool.

A sample that cannot be read raises ``OSError`` (or ``ValueError`` for a record
that is malformed) naming its source; the executor applies ``on_error``.
"""

from __future__ import annotations

import hashlib
import logging
import threading

import numpy as np

from stoker.errors import CheckpointError, PipelineBuildError
from stoker.operators.base import Reader
from stoker.operators.readers import storage
from stoker.operators.readers._batch_read import RangeReads, locate
from stoker.operators.readers._listing import ListingError
from stoker.operators.readers._order import ShardedOrder
from stoker.tensors import ReadHints, TensorListCPU

_log = logging.getLogger("stoker")


class IndexedReader(Reader):
    """Base of the readers of a data set of ``n`` samples known after listing."""

    # DALI refuses random_shuffle together with shuffle_after_epoch in its file readers but takes
    # both in its container readers (TFRecord, webdataset); there shuffle_after_epoch's whole
    # permutation of each pass applies and random_shuffle adds nothing.
    allows_both_shuffles = False

    # --- what a subclass provides ---------------------------------------------------------------
    def list_samples(self) -> int:
        """List the data set; return its number of samples. Raise ``ListingError(arg, message)``
        for a problem with the arguments or the data set description."""
        raise NotImplementedError

    def load_sample(self, i: int) -> tuple:
        """The outputs of sample ``i`` (a tuple of NumPy arrays, one per output). By default its
        byte range read here and parsed (``sample_range`` and ``parse_sample``)."""
        path, offset, size = self.sample_range(i)
        raw = storage.read_bytes(path, offset, size) if size is not None else storage.read_bytes(path)
        return self.parse_sample(i, np.frombuffer(raw, np.uint8))

    def reads_ranges(self) -> bool:
        """Whether every sample is one byte range of a local file (``sample_range``) or one
        record the helper can read (``helper_entry``), so that batches may be read by the I/O
        helper process (:mod:`._batch_read`)."""
        return False

    def helper_entry(self, i: int):
        """What the I/O helper process reads for sample ``i``: by default its ``sample_range``
        (a path, or (path, offset, size)); an LMDB reader gives (database path, key, read_ahead)."""
        path, offset, size = self.sample_range(i)
        return path if size is None else (path, offset, size)

    def sample_range(self, i: int) -> tuple[str, int, int | None]:
        """(path, offset, size) of sample ``i``'s bytes; size None: the whole file."""
        raise NotImplementedError

    def parse_sample(self, i: int, raw: np.ndarray) -> tuple:
        """The outputs of sample ``i`` from its bytes ``raw`` (a read-only 1-D uint8 array): views
        of ``raw`` where the data is stored as is, so that it is not copied."""
        raise NotImplementedError

    def check_samples(self, results: list, refs: list) -> None:
        """Raise an OperatorError naming the files when the batch's samples (``results``: their
        output tuples) cannot form one batch; by default nothing is checked."""

    def output_source(self, i: int, j: int) -> str:
        """``source_info`` of output ``j`` of sample ``i`` (by default the sample's source)."""
        return self.sample_source(i)

    def sample_source(self, i: int) -> str:
        """Where sample ``i`` comes from, as errors and ``source_info`` show it."""
        return str(i)

    def listing_digest(self, digest) -> None:
        """Feed what identifies the listed data set (names, offsets, labels) into ``digest``
        (a hashlib object), for the checkpoint fingerprint."""
        for i in range(self._order.n):
            digest.update(self.sample_source(i).encode("utf-8", "surrogateescape") + b"\0")

    # --- set-up ------------------------------------------------------------------------------
    def setup(self) -> None:
        a = self.args
        if a["num_shards"] < 1:
            raise self._arg_error("num_shards", f"must be at least 1, got {a['num_shards']}")
        if not 0 <= a["shard_id"] < a["num_shards"]:
            raise self._arg_error("shard_id", f"must be in [0, num_shards={a['num_shards']}), got {a['shard_id']}")
        if a.get("shuffle_after_epoch") and a.get("random_shuffle") and not self.allows_both_shuffles:
            raise self._arg_error("shuffle_after_epoch", "cannot be combined with random_shuffle")
        if a.get("shuffle_after_epoch") and a.get("stick_to_shard"):
            raise self._arg_error("shuffle_after_epoch", "cannot be combined with stick_to_shard")
        self._batch_size = 1
        self._order: ShardedOrder | None = None
        self._pending_state: dict | None = None
        self._list_lock = threading.Lock()  # lazy_init: reader_meta() and the executor may list at once
        self._use_helper = False  # batches read by the I/O helper process (see _batch_read)
        self._reads: RangeReads | None = None

    def _label(self) -> str:
        return self.schema.name + (f" '{self.args['name']}'" if self.args.get("name") else "")

    def _arg_error(self, arg: str, message: str) -> PipelineBuildError:
        where = f"\n  operator created at {self.origin}" if self.origin else ""
        return PipelineBuildError(f"{self._label()}: argument '{arg}': {message}{where}")

    def bind_pipeline(self, pipe) -> None:
        from stoker.operators.readers.file import wants_io_process

        self._batch_size = max(1, pipe.batch_size)
        self._use_helper = wants_io_process(getattr(pipe, "num_threads", 1) or 1)
        reads = self._reads
        if not self._use_helper and reads is not None:  # (bound again by num_threads="auto"'s trials)
            self._reads = None
            reads.close()

    def prepare(self) -> None:
        if not self.args.get("lazy_init"):
            self._ensure_listed()
            # (started at build, as the file reader's: its start-up runs beside the rest of the build)
            self._range_reads()

    def _ensure_listed(self) -> ShardedOrder:
        if self._order is not None:
            return self._order
        with self._list_lock:
            if self._order is None:
                self._list()
        return self._order

    def _list(self) -> None:
        a = self.args
        try:
            n = self.list_samples()
        except ListingError as e:
            raise self._arg_error(e.arg, str(e)) from None
        if n == 0:
            raise PipelineBuildError(f"{self._label()}: the data set is empty (no samples were found)")
        if n < a["num_shards"]:
            raise self._arg_error("num_shards", f"{a['num_shards']} shards for only {n} samples")
        self._order = ShardedOrder(
            n, num_shards=a["num_shards"], shard_id=a["shard_id"], stick_to_shard=a.get("stick_to_shard", False),
            pad_last_batch=a.get("pad_last_batch", False), random_shuffle=a.get("random_shuffle", False),
            shuffle_seed=self.op_seed, shuffle_after_epoch=a.get("shuffle_after_epoch", False),
            shuffle_after_epoch_seed=a.get("shuffle_after_epoch_seed"), batch_size=self._batch_size)
        if self._pending_state is not None:
            pending, self._pending_state = self._pending_state, None
            self.set_state(pending)

    # --- the Reader contract --------------------------------------------------------------------
    def epoch_size(self, padded: bool = False) -> int:
        order = self._ensure_listed()
        return order.epoch_size_padded() if padded else order.n

    def next_refs(self, n: int) -> list:
        order = self._ensure_listed()
        return [i for i, _ in order.take(n)]

    def _peek_refs(self, n: int) -> list:
        """The next ``n`` references, without advancing the stream (for the read ahead)."""
        order = self._order
        saved = order.epoch, order.position
        try:
            return [i for i, _ in order.take(n)]
        finally:
            order.epoch, order.position = saved

    def _range_reads(self) -> RangeReads | None:
        if self._reads is None and self._use_helper and self._order is not None and self.reads_ranges():
            try:
                self._reads = RangeReads(self._helper_ranges, self.parse_sample)
            except OSError as e:
                _log.warning("%s: no I/O helper process (%s); reading in this process", self._label(), e)
                self._use_helper = False
        return self._reads

    def _helper_ranges(self, refs: list) -> list:
        return [self.helper_entry(r) for r in refs]

    def run_cpu(self, batch, inputs, arg_inputs):
        """Read the batch: through the I/O helper process one batch ahead when this reader reads
        byte ranges (see :mod:`._batch_read`), else sample by sample on the thread pool."""
        refs = batch.prepared
        sources = [self.sample_source(r) for r in refs]
        batch.sources = sources
        parsed = None
        reads = self._range_reads()
        if reads is not None:
            try:
                parsed = reads.take(list(refs), self._peek_refs(len(refs)))
            except (OSError, EOFError) as e:  # the helper is gone: read in this process from now on
                _log.warning("%s: the I/O helper process failed (%s); reading in this process", self._label(), e)
                self._stop_helper()  # (not close(): a subclass's close also drops what reading here needs)
                self._use_helper = False
        if parsed is None:
            results = self.map_samples(batch, len(refs), lambda i: self.load_sample(refs[i]))
        else:
            results = self._with_policy(batch, parsed.results)
        kept = [i for i in range(len(refs)) if results[i] is not None]
        self.check_samples([results[i] for i in kept], [refs[i] for i in kept])
        layouts = self.output_layouts([])
        own = type(self).output_source is not IndexedReader.output_source
        outs = []
        for j in range(self.num_outputs):
            srcs = [self.output_source(refs[i], j) for i in kept] if own else [sources[i] for i in kept]
            samples = [results[i][j] for i in kept]
            out = TensorListCPU(samples, layouts[j], srcs)
            where = locate(samples, parsed.base) if parsed is not None else None
            if where is not None:  # (the mixed decoders' staging and bulk header scan use these)
                out.read_hints = ReadHints(located=where, base=parsed.base)
            outs.append(out)
        return outs

    def _with_policy(self, batch, results: list) -> list:
        """``results`` with the failed samples (exceptions) put through the error policy, as
        the per-sample path does."""
        if not any(isinstance(r, BaseException) for r in results):
            return results

        def one(i):
            if isinstance(results[i], BaseException):
                raise results[i]
            return results[i]

        pool, batch.pool = batch.pool, None  # nothing left to parallelize
        try:
            return self.map_samples(batch, len(results), one)
        finally:
            batch.pool = pool

    def close(self) -> None:
        """Stop the I/O helper process and the read-ahead thread (``Pipeline.close``)."""
        self._stop_helper()

    def _stop_helper(self) -> None:
        reads, self._reads = self._reads, None
        if reads is not None:
            reads.close()

    def load(self, ref) -> tuple:
        return self.load_sample(ref)

    def source_of(self, ref) -> str:
        return self.sample_source(ref)

    def meta(self) -> dict:
        order = self._ensure_listed()
        a = self.args
        meta = {"epoch_size": order.n, "epoch_size_padded": order.epoch_size_padded(),
                "number_of_shards": a["num_shards"], "shard_id": a["shard_id"],
                "pad_last_batch": int(a.get("pad_last_batch", False)),
                "stick_to_shard": int(a.get("stick_to_shard", False))}
        resumed = order.resumed_pass()
        if resumed is not None:  # (resumed at another world size: the iterator's first epoch is this pass)
            meta["resharded_pass"] = resumed
        return meta

    def state(self) -> dict:
        if self._order is None:
            return dict(self._pending_state or {"epoch": 0, "position": 0, "shard": self.args["shard_id"]})
        return self._order.state()

    def set_state(self, state: dict) -> None:
        if self._order is None:
            self._pending_state = dict(state)
            return
        try:
            self._order.set_state(state)
        except (KeyError, TypeError, ValueError) as e:
            what = f"missing key {e}" if isinstance(e, KeyError) else str(e)
            raise CheckpointError(f"{self.schema.name} '{self.instance_name}': cannot restore the checkpoint: "
                                  f"{what}") from None

    def fingerprint(self) -> dict:
        """The data set's size and a hash of its listing (see :mod:`stoker.pipeline.checkpoint`)."""
        order = self._ensure_listed()
        digest = hashlib.sha256()
        self.listing_digest(digest)
        return {"epoch_size": order.n, "files": digest.hexdigest()[:16]}
