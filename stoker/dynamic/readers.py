"""Readers as objects in eager mode: ``ndd.readers.File(file_root=...)``.

A reader keeps its place between epochs (shard rotation, shuffling per epoch)
exactly as inside a pipeline, because it *is* the pipeline's reader operator::

    reader = ndd.readers.File(file_root="images/", random_shuffle=True, seed=1)
    for epoch in range(3):
        for jpegs, labels in reader.next_epoch(batch_size=64):
            images = ndd.decoders.image(jpegs)

As in DALI's dynamic mode, epoch ``e`` is ``ceil(shard_size / batch_size)``
full batches of the reader's endless stream, for the shard read in that epoch
(shards rotate unless ``stick_to_shard``): the last batch finishes with the
next epoch's first samples, or with repeats of the last sample when
``pad_last_batch=True``. ``next_epoch(..., last_batch_policy=LastBatchPolicy.PARTIAL)``
reads each shard exactly once instead. Without a batch size the epoch yields
single samples.
"""

from __future__ import annotations

from stoker.errors import PipelineBuildError
from stoker.operators.base import BatchContext, Reader
from stoker.operators.schema import get_operator, registered
from stoker.pipeline.data_node import user_origin
from stoker.random_state import mix_seed

from ._data import Batch, Tensor
from ._invoke import convert_args, thread_pool

__all__ = ["ReaderObject"]

_SAMPLE_CHUNK = 16


class _BatchSizeHolder:
    """What a reader asks of its pipeline when it is bound (only the batch size)."""

    def __init__(self, batch_size: int):
        self.batch_size = batch_size
        self.max_batch_size = batch_size


class ReaderObject:
    """An eager reader: one instance of a ``readers.*`` operator with its position in the data set."""

    op_name: str = ""

    def __init__(self, batch_size: int | None = None, *, rng=None, **kwargs):
        cls = get_operator(self.op_name)
        if not issubclass(cls, Reader):
            raise TypeError(f"{self.op_name} is not a reader")
        kwargs.pop("device", None)
        static, per_sample = convert_args(self.op_name, cls.schema, kwargs)
        if per_sample:
            raise PipelineBuildError(f"{self.op_name}: arguments {sorted(per_sample)} must be constants")
        if static.get("seed") is not None and static["seed"] >= 0:
            op_seed = mix_seed(static["seed"], 0x0505)
        else:
            from stoker.dynamic.random import resolve_rng

            op_seed = resolve_rng(rng).next_key()
        self._op = cls(static, "cpu", op_seed=op_seed, origin=user_origin(), name=static.get("name") or self.op_name)
        self._batch_size = batch_size
        self._bound = False
        self._iteration = 0
        self._open = None  # samples left in an epoch not read to its end
        self._epochs_started = 0

    def _bind(self, batch_size: int) -> None:
        if self._bound:
            return
        # Padding (pad_last_batch) is to a multiple of the first batch size used.
        if hasattr(self._op, "bind_pipeline"):
            self._op.bind_pipeline(_BatchSizeHolder(batch_size))
        self._op.prepare()
        self._bound = True
        self._bound_batch_size = batch_size

    def meta(self) -> dict:
        """epoch_size, epoch_size_padded, number_of_shards, shard_id, pad_last_batch, stick_to_shard."""
        self._bind(self._batch_size or 1)
        return self._op.meta()

    def state(self) -> dict:
        """The reader's position (to restore with :meth:`set_state`)."""
        return self._op.state()

    def set_state(self, state: dict) -> None:
        self._op.set_state(state)

    def next_epoch(self, batch_size: int | None = None, ctx=None, *, last_batch_policy=None):
        """An iterator over the next epoch: Batches (a tuple of them for several outputs), or single
        samples (Tensors) when no batch size was given here or at construction.

        As in DALI's dynamic mode, by default (``LastBatchPolicy.FILL``) epoch ``e`` is
        ``ceil(shard_size / batch_size)`` full batches of the reader's stream (the shard read in that
        epoch): the last one finishes with the next epoch's first samples, or with repeats of the last
        sample when ``pad_last_batch=True``. stoker extensions: ``last_batch_policy=PARTIAL`` reads the
        rest of the current shard exactly once (the last batch may be smaller); ``DROP`` does the same
        but leaves out the incomplete batch.
        """
        from stoker.plugin.base_iterator import LastBatchPolicy

        policy = LastBatchPolicy.FILL if last_batch_policy is None else last_batch_policy
        if not isinstance(policy, LastBatchPolicy):
            raise ValueError(f"next_epoch: last_batch_policy must be a LastBatchPolicy, got {policy!r}")
        size = batch_size or self._batch_size
        batched = size is not None
        size = size or 1
        self._bind(size)
        if self._open is not None:
            # DALI requires an epoch to be read to its end before the next one; stoker skips the rest.
            self._op.next_refs(self._open)
            self._open = None
        epoch, self._epochs_started = self._epochs_started, self._epochs_started + 1
        if policy == LastBatchPolicy.FILL:
            counts = [size] * -(-self._epoch_length(epoch) // size)
        else:
            left = self._left_in_pass()
            counts = [size] * (left // size)
            if left % size and policy == LastBatchPolicy.PARTIAL:
                counts.append(left % size)
            skip = left % size if policy == LastBatchPolicy.DROP else 0
            if skip:
                counts.append(-skip)  # negative: advance the stream without loading
        if not batched:
            # Single samples: read them in chunks so the pool still loads them in parallel.
            total = sum(counts)
            full, rest = divmod(total, _SAMPLE_CHUNK)
            counts = [_SAMPLE_CHUNK] * full + ([rest] if rest else [])
        return self._epoch(counts, batched)

    def _epoch_length(self, epoch: int) -> int:
        """Samples in epoch ``epoch``: the size of the shard read then (shards rotate unless
        stick_to_shard), or the padded length with pad_last_batch."""
        meta = self._op.meta()
        n, shards = int(meta["epoch_size"]), max(1, int(meta["number_of_shards"]))
        if meta.get("pad_last_batch"):
            largest = -(-n // shards)
            return -(-largest // self._bound_batch_size) * self._bound_batch_size
        shard = int(meta["shard_id"])
        if not meta.get("stick_to_shard"):
            shard = (shard + epoch) % shards
        return n * (shard + 1) // shards - n * shard // shards

    def _left_in_pass(self) -> int:
        """Samples left in the reader's current pass over its shard (padding included)."""
        meta = self._op.meta()
        state = self._op.state()
        n, shards = int(meta["epoch_size"]), max(1, int(meta["number_of_shards"]))
        shard = int(state.get("shard", meta["shard_id"]))
        if meta.get("pad_last_batch"):
            largest = -(-n // shards)
            length = -(-largest // self._bound_batch_size) * self._bound_batch_size
        else:
            length = n * (shard + 1) // shards - n * shard // shards
        return length - int(state.get("position", 0))

    def _epoch(self, counts: list[int], batched: bool):
        self._open = sum(abs(c) for c in counts)
        for k in counts:
            if k < 0:
                self._op.next_refs(-k)
                self._open -= -k
                continue
            outs = self._read_batch(k)
            self._open -= k
            if batched:
                batches = tuple(Batch(o) for o in outs)
                yield batches if len(batches) > 1 else batches[0]
            else:
                for i in range(len(outs[0])):
                    sample = tuple(Tensor(o[i], o.layout()) for o in outs)
                    yield sample if len(sample) > 1 else sample[0]
        self._open = None

    def _read_batch(self, batch_size: int) -> list:
        ctx = BatchContext(batch_size, self._iteration, pool=thread_pool())
        ctx.prepared = self._op.advance(ctx)
        outs = self._op.run_cpu(ctx, [], {})
        self._iteration += 1
        return outs

    def __repr__(self) -> str:
        return f"stoker.dynamic.readers.{type(self).__name__}({self.op_name})"


def _reader_names() -> dict[str, str]:
    """CamelCase class name -> operator name, for every registered reader ("File" -> "readers.file")."""
    out = {}
    for name in registered():
        if name.startswith("readers."):
            short = name[len("readers."):]
            out[short.replace("_", "").lower()] = name
    return out


_classes: dict[str, type] = {}


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)
    op_name = _reader_names().get(name.replace("_", "").lower())
    if op_name is None:
        raise AttributeError(f"stoker.dynamic.readers has no reader {name!r} "
                             f"(available: {sorted(_reader_names().values())})")
    cls = _classes.get(op_name)
    if cls is None:
        doc = f"Eager ``{op_name}`` reader; ``next_epoch(batch_size=...)`` reads one epoch.\n\n"
        cls = type(name, (ReaderObject,), {"op_name": op_name, "__doc__": doc + (get_operator(op_name).__doc__ or ""),
                                           "__module__": __name__})
        _classes[op_name] = cls
    return cls
