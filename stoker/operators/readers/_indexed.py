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

A sample that cannot be read raises ``OSError`` (or ``ValueError`` for a record
that is malformed) naming its source; the executor applies ``on_error``.
"""

from __future__ import annotations

import hashlib
import threading

from stoker.errors import CheckpointError, PipelineBuildError
from stoker.operators.base import Reader
from stoker.operators.readers._listing import ListingError
from stoker.operators.readers._order import ShardedOrder


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
        """The outputs of sample ``i`` (a tuple of NumPy arrays, one per output)."""
        raise NotImplementedError

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

    def _label(self) -> str:
        return self.schema.name + (f" '{self.args['name']}'" if self.args.get("name") else "")

    def _arg_error(self, arg: str, message: str) -> PipelineBuildError:
        where = f"\n  operator created at {self.origin}" if self.origin else ""
        return PipelineBuildError(f"{self._label()}: argument '{arg}': {message}{where}")

    def bind_pipeline(self, pipe) -> None:
        self._batch_size = max(1, pipe.batch_size)

    def prepare(self) -> None:
        if not self.args.get("lazy_init"):
            self._ensure_listed()

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

    def load(self, ref) -> tuple:
        return self.load_sample(ref)

    def source_of(self, ref) -> str:
        return self.sample_source(ref)

    def meta(self) -> dict:
        order = self._ensure_listed()
        a = self.args
        return {"epoch_size": order.n, "epoch_size_padded": order.epoch_size_padded(),
                "number_of_shards": a["num_shards"], "shard_id": a["shard_id"],
                "pad_last_batch": int(a.get("pad_last_batch", False)),
                "stick_to_shard": int(a.get("stick_to_shard", False))}

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
