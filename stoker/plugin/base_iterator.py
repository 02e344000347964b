"""The framework-neutral part of stoker's iterators: epochs, the last batch, shards, reset.

A stoker (or DALI) pipeline never stops at the end of an epoch: its readers
run on into the next one. The iterator is what cuts that stream into epochs.
It counts the samples it hands out and decides, from the reader's metadata
(``pipe.reader_meta(reader_name)``) or from ``size``, where an epoch ends and
what happens to the batch that straddles the boundary:

* ``LastBatchPolicy.FILL`` returns it whole. Without ``pad_last_batch`` on the
  reader its tail already holds the first samples of the next epoch; with it,
  the reader repeated the epoch's last sample.
* ``LastBatchPolicy.DROP`` does not return it (the pipeline still produced it,
  so ``reset()`` pulls it out and throws it away).
* ``LastBatchPolicy.PARTIAL`` returns only the samples of this epoch.

With several pipelines (one per GPU, each reading one shard), shards may
differ in size by one sample; the counters below keep every rank on the same
number of batches, and follow the shards as readers rotate them each epoch
(unless ``stick_to_shard``). The arithmetic follows DALI's iterators exactly,
so a training script sees the same batches after porting.

With ``on_error="skip"`` a pass delivers fewer samples than the reader lists,
so with ``reader_name`` the epochs follow the reader's passes instead of a
count: every good sample once per epoch, the last-batch policy applied to the
good samples (:mod:`stoker.plugin._pass_tracking`).
Without ``reader_name`` epochs are counted and drift: the iterator warns.

Framework plugins subclass :class:`BaseIterator` and implement
:meth:`BaseIterator._convert` (one pipeline's outputs -> a dict of framework
tensors).
"""

from __future__ import annotations

import json
import logging
import math
import warnings
from collections import Counter
from enum import Enum, unique

import numpy as np

from stoker.errors import CheckpointError, printable
from stoker.pipeline import checkpoint as checkpoint_format
from stoker.plugin import resharded_epoch
from stoker.plugin._pass_tracking import PassTracker, bound_passes, may_skip, skips_samples

__all__ = ["LastBatchPolicy", "BaseIterator"]

_log = logging.getLogger("stoker")


@unique
class LastBatchPolicy(Enum):
    """What the iterator does with the last batch of an epoch when the epoch does not fill it.

    * ``FILL``: return a full batch; the tail comes from the next epoch, or repeats the last
      sample when the reader has ``pad_last_batch=True``.
    * ``DROP``: do not return it.
    * ``PARTIAL``: return only the samples that belong to this epoch.
    """

    FILL = 0
    DROP = 1
    PARTIAL = 2


def _parse_auto_reset(value) -> bool:
    if value is None or value is False or value == "no":
        return False
    if value is True or value == "yes":
        return True
    raise ValueError(f"iterator: auto_reset must be True, False, 'yes' or 'no', got {value!r}")


class BaseIterator:
    """Shared logic of stoker's framework iterators (see the module docstring).

    Arguments (the same as DALI's iterators):
      pipelines: one pipeline or a list (one per GPU / shard); all with the same batch size.
      size: samples per epoch over all pipelines; -1 (default) with ``reader_name`` or for a
        single pipeline that ends its epochs itself (an external source raising StopIteration).
      reader_name: the ``name`` of the reader whose metadata defines the epoch (recommended).
      auto_reset: True/"yes" to start the next epoch automatically after StopIteration.
      fill_last_batch: deprecated; True means FILL, False means PARTIAL.
      last_batch_padded: without ``reader_name``: whether the reader has ``pad_last_batch``.
      last_batch_policy: a :class:`LastBatchPolicy`.
      prepare_first_batch: run the pipelines and convert the first batch right away.
    """

    def __init__(self, pipelines, size=-1, reader_name=None, auto_reset=False, fill_last_batch=None,
                 last_batch_padded=False, last_batch_policy=LastBatchPolicy.FILL, prepare_first_batch=True):
        if pipelines is None:
            raise ValueError("iterator: give at least one pipeline")
        pipes = list(pipelines) if isinstance(pipelines, (list, tuple)) else [pipelines]
        if not pipes:
            raise ValueError("iterator: give at least one pipeline")
        self._pipes = pipes
        self._num_gpus = len(pipes)
        # Frameworks expect a public batch_size on their data iterators.
        self.batch_size = pipes[0].max_batch_size
        sizes = [p.max_batch_size for p in pipes]
        if any(s != self.batch_size for s in sizes):
            raise ValueError(f"iterator: all pipelines must have the same batch size, got {sizes}")
        self._size = int(size)
        self._auto_reset = _parse_auto_reset(auto_reset)
        self._prepare_first_batch = prepare_first_batch
        if fill_last_batch is not None:
            warnings.warn("iterator: fill_last_batch is deprecated; pass last_batch_policy instead",
                          DeprecationWarning, stacklevel=3)
            last_batch_policy = LastBatchPolicy.FILL if fill_last_batch else LastBatchPolicy.PARTIAL
        if not isinstance(last_batch_policy, LastBatchPolicy):
            raise ValueError(f"iterator: last_batch_policy must be a LastBatchPolicy (FILL, DROP or PARTIAL), "
                             f"got {last_batch_policy!r}")
        self._last_batch_policy = last_batch_policy
        self._last_batch_padded = bool(last_batch_padded)
        if self._size == 0:
            raise ValueError("iterator: size cannot be 0")
        if self._size < 0 and not reader_name and self._num_gpus > 1:
            raise ValueError("iterator: with several pipelines give reader_name (recommended) or size")
        if reader_name and self._size > 0:
            raise ValueError("iterator: give either reader_name or size, not both")
        if reader_name and last_batch_padded:
            raise ValueError("iterator: with reader_name, last_batch_padded comes from the reader's "
                             "pad_last_batch; do not pass it")
        if self._size < 0 and not reader_name:
            # The pipeline itself ends the epoch: there is no last batch to fill, drop or trim.
            self._last_batch_policy = LastBatchPolicy.FILL
            self._last_batch_padded = False
        if self._size > 0 and not reader_name:
            warnings.warn("iterator: prefer reader_name over size/last_batch_padded: with them set by hand, "
                          "shards that rotate between epochs can skip or repeat samples", stacklevel=3)
        self._counter = 0
        for p in self._pipes:
            p.build()
        self._reader_name = reader_name
        if reader_name:
            self._read_reader_meta()
        self._ever_scheduled = False
        self._ever_consumed = False
        self._stopped = [False] * self._num_gpus  # pipelines that raised StopIteration
        self._first_batch = None
        self._epoch = 0  # epochs ended so far (for the error summary)
        self._reported = [0] * self._num_gpus  # per pipeline: error entries already summarized
        self._summarized = False  # this epoch's summary was logged
        self._passes: PassTracker | None = None
        self._after_resharded: tuple | None = None  # (resharded_epoch: the sizes after a resumed pass)
        self._resharded_next = False  # (resharded_epoch: that pass is the next epoch)
        self._track_passes(reader_name)
        self._set_up_checkpoints()

    def _track_passes(self, reader_name) -> None:
        """Under on_error="skip" epochs follow the reader's passes, not a count (_pass_tracking)."""
        if reader_name:
            skipping = [skips_samples(p, reader_name) for p in self._pipes]
            if any(skipping) and not all(skipping):
                raise ValueError("iterator: either all pipelines or none may skip bad samples "
                                 "(on_error='skip'), so that their epochs end alike")
            if all(skipping):
                self._passes = PassTracker(self, reader_name)
                # No batch may hold two passes: PARTIAL would cut off, DROP drop, and FILL move
                # into this epoch the next pass's head, so that epoch would lack those good samples.
                for p in self._pipes:
                    bound_passes(p, reader_name)
        elif any(may_skip(p) for p in self._pipes):
            warnings.warn("iterator: the pipelines skip bad samples (on_error='skip') but the iterator has no "
                          "reader_name: epochs are counted in samples, so they drift against the reader's "
                          "passes and good samples can move between epochs or, with PARTIAL/DROP, be lost. "
                          "Give reader_name for every good sample exactly once per epoch", stacklevel=4)

    def _set_up_checkpoints(self) -> None:
        flags = {bool(getattr(p, "_enable_checkpointing", False)) for p in self._pipes}
        if len(flags) > 1:
            raise ValueError("iterator: all pipelines must agree on enable_checkpointing")
        self._enable_checkpointing = flags.pop()
        if self._enable_checkpointing:
            saved = [_restored_iterator_data(p) for p in self._pipes]
            if any(s is not None for s in saved):
                if any(s != saved[0] for s in saved):
                    warnings.warn("iterator: the pipelines were restored from checkpoints with different "
                                  "iterator states; using the first one", stacklevel=4)
                self._restore_state(saved[0])
            # Taken now, before the first batch is prepared, so that a checkpoint taken before
            # anything is consumed resumes from the very start.
            self._initial_checkpoints = [self._pipe_checkpoint(p) for p in self._pipes]

    # --- reader metadata and shard accounting ------------------------------------
    def _read_reader_meta(self) -> None:
        metas = [p.reader_meta(self._reader_name) for p in self._pipes]

        def same(key, what):
            values = [m[key] for m in metas]
            if any(v != values[0] for v in values):
                raise ValueError(f"iterator: reader '{self._reader_name}' must have the same {what} in every "
                                 f"pipeline, got {values}")
            return values[0]

        def all_or_none(key, what):
            values = [bool(m[key]) for m in metas]
            if any(values) and not all(values):
                raise ValueError(f"iterator: reader '{self._reader_name}' must have {what} set in all "
                                 f"pipelines or in none, got {values}")
            return values[0]

        self._size_no_pad = int(same("epoch_size", "epoch size"))
        self._shards_num = int(same("number_of_shards", "num_shards"))
        self._last_batch_padded = all_or_none("pad_last_batch", "pad_last_batch")
        self._is_stick_to_shard = all_or_none("stick_to_shard", "stick_to_shard")
        self._shards_id = np.array([m["shard_id"] for m in metas], dtype=np.int64)
        if self._last_batch_policy == LastBatchPolicy.DROP:
            self._size = self._size_no_pad // self._shards_num
        elif self._last_batch_padded:
            # The reader pads every shard to the same whole number of batches.
            self._size = int(metas[0]["epoch_size_padded"]) // self._shards_num
        else:
            # Enough whole batches to cover the largest shard.
            largest = math.ceil(self._size_no_pad / self._shards_num)
            self._size = math.ceil(largest / self.batch_size) * self.batch_size
        # How far into its shard each shard position starts this epoch: with FILL and no padding
        # the tail of one epoch's last batch is the head of the next, so this varies by epoch.
        self._counter_per_gpu = np.zeros(self._shards_num, dtype=np.int64)
        self._shard_sizes_per_gpu = self._shard_sizes(np.arange(self._shards_num))
        self._shard_sizes_per_gpu_initial = self._shard_sizes_per_gpu.copy()
        # each pipeline's pass resumed at another world size, if it is one (resharded_epoch.start)
        self._resharded_metas = [m.get("resharded_pass") for m in metas]

    def _shard_sizes(self, shard_ids: np.ndarray) -> np.ndarray:
        # Readers split N samples into S shards at floor(k * N / S).
        begin = np.floor(shard_ids * self._size_no_pad / self._shards_num).astype(np.int64)
        end = np.floor((shard_ids + 1) * self._size_no_pad / self._shards_num).astype(np.int64)
        return end - begin

    # --- running the pipelines -------------------------------------------------
    def _schedule_runs(self, release_outputs: bool = True) -> None:
        self._ever_scheduled = True
        for p in self._pipes:
            if release_outputs:
                p.release_outputs()
            p.schedule_run()

    def _get_outputs(self) -> list:
        """One batch of outputs per pipeline, or StopIteration at the end of the epoch."""
        if not self._ever_scheduled:
            self._schedule_runs(release_outputs=False)
        if self._size > 0 and self._counter >= self._size:
            self._end_iteration()
        outputs = []
        for i, p in enumerate(self._pipes):
            try:
                outputs.append(p.share_outputs())
            except StopIteration:
                self._stopped[i] = True
                self._summarize_errors()
                if self._size < 0 and self._auto_reset:
                    self.reset()
                raise
        if self._reader_name or self._size != -1:
            for i, outs in enumerate(outputs):
                for o in outs:
                    if len(o) != self.batch_size:
                        raise RuntimeError(
                            f"iterator: pipeline {i} returned a batch of {len(o)} samples, expected "
                            f"{self.batch_size}; variable batch sizes need size=-1 and no reader_name")
        return outputs

    def _end_iteration(self):
        self._summarize_errors()
        if self._auto_reset:
            self.reset()
        raise StopIteration

    def _advance_and_check_drop_last(self, dry_run: bool = False, end_iteration: bool = True) -> bool:
        """Count one more batch; with DROP, end the epoch if that batch would overflow a shard."""
        counter = self._counter
        should_end = False
        if self._reader_name:
            counter += self.batch_size
            if self._last_batch_policy == LastBatchPolicy.DROP:
                should_end = bool(np.any(self._counter_per_gpu + counter > self._shard_sizes_per_gpu))
        else:
            counter += self._num_gpus * self.batch_size
            if self._last_batch_policy == LastBatchPolicy.DROP:
                should_end = counter > self._size
        if not dry_run:
            self._counter = counter
            if should_end and end_iteration:
                self._end_iteration()
        return should_end

    def _trim_partial(self, batches: list[dict]) -> list[dict]:
        """With PARTIAL, cut the samples of the next epoch (or the padding) off the last batch."""
        if self._last_batch_policy != LastBatchPolicy.PARTIAL:
            return batches
        if self._reader_name:
            shard_sizes = self._shard_sizes_per_gpu_initial[self._shards_id]
            left = self.batch_size - (self._counter - shard_sizes)
            if not np.any(left < self.batch_size):
                return batches
            return [{k: v[0:int(n)] for k, v in b.items()} for b, n in zip(batches, left)]
        if self._size > 0 and self._counter > self._size:
            wanted = self._num_gpus * self.batch_size - (self._counter - self._size)
            pipes_used = int(math.ceil(wanted / self.batch_size))
            last_count = wanted % self.batch_size or self.batch_size
            out = batches[:pipes_used]
            out[-1] = {k: v[0:last_count] for k, v in out[-1].items()}
            return out
        return batches

    def _convert(self, pipe_index: int, outputs: tuple) -> dict:
        """One pipeline's outputs as a dict of framework tensors (implemented by each plugin)."""
        raise NotImplementedError

    def _prepare(self) -> None:
        """Called at the end of a subclass's __init__: buffers the first batch if asked to."""
        self._first_batch = None
        if self._passes is not None and any(_restored_iterator_data(p) is not None for p in self._pipes):
            # Restored: the next batch may end the epoch (it is read again), and that StopIteration
            # belongs to the caller's next(), not to this buffering.
            return
        if self._prepare_first_batch:
            try:
                self._first_batch = BaseIterator.__next__(self)
                self._ever_consumed = False
            except StopIteration:
                self._ever_consumed = False  # (a restored epoch that had ended: the caller's next() ends it)
                if not any(_restored_iterator_data(p) is not None for p in self._pipes):
                    raise RuntimeError(
                        "iterator: the pipeline produced no data. With LastBatchPolicy.PARTIAL this happens "
                        "when the batch size exceeds the shard size.") from None

    # --- iterator protocol ---------------------------------------------------
    def __next__(self) -> list[dict]:
        self._ever_consumed = True
        if self._first_batch is not None:
            batch, self._first_batch = self._first_batch, None
            return batch
        if self._passes is not None:
            return self._passes.next()
        outputs = self._get_outputs()
        batches = [self._convert(i, outs) for i, outs in enumerate(outputs)]
        self._schedule_runs()
        self._advance_and_check_drop_last()
        return self._trim_partial(batches)

    def next(self) -> list[dict]:
        """The next batch (a list with one dict per pipeline)."""
        self._ever_consumed = True
        return self.__next__()

    def __iter__(self):
        # iter() on a fresh iterator must not start a second epoch's bookkeeping.
        started = self._passes.steps if self._passes is not None else self._counter
        if started != 0 and self._ever_consumed:
            self.reset()
        return self

    def reset(self) -> None:
        """Start the next epoch. Has no effect (but a warning) before the current epoch ended."""
        if self._passes is not None:
            if not self._passes.reset():
                warnings.warn("iterator: reset() before the end of the epoch is ignored", stacklevel=2)
            self._summarized = False
            return
        if self._last_batch_policy == LastBatchPolicy.DROP:
            # The user may stop at len(iterator) batches while the dropped batch is still inside
            # the pipeline: take it out so that the next epoch starts at its first sample.
            should_end = self._advance_and_check_drop_last(dry_run=True, end_iteration=False)
            already_ended = self._size > 0 and self._counter >= self._size
            if should_end and not already_ended:
                self._get_outputs()
                self._schedule_runs()
                self._advance_and_check_drop_last(end_iteration=False)

        if not (self._counter >= self._size or self._size < 0):
            warnings.warn("iterator: reset() before the end of the epoch is ignored", stacklevel=2)
            return
        fill_unpadded = self._last_batch_policy == LastBatchPolicy.FILL and not self._last_batch_padded
        if fill_unpadded:
            if self._reader_name:
                # Samples each shard position read this epoch beyond its shard are the head of the
                # next epoch: carry them over.
                self._counter -= int(min(self._counter_per_gpu))
                self._counter_per_gpu = self._counter_per_gpu + self._counter - self._shard_sizes_per_gpu
                self._counter = int(min(self._counter_per_gpu))
            else:
                self._counter = self._counter % self._size
        else:
            self._counter = 0
        if self._reader_name:
            if not self._is_stick_to_shard:
                self._shards_id = (self._shards_id + 1) % self._shards_num
            resharded_epoch.at_reset(self)  # (a pass resumed at another world size begins or ends)
            if fill_unpadded:
                if not self._is_stick_to_shard:
                    self._shard_sizes_per_gpu = np.roll(self._shard_sizes_per_gpu, 1)
                remaining = self._shard_sizes_per_gpu - self._counter_per_gpu
                self._size = math.ceil(int(max(remaining)) / self.batch_size) * self.batch_size
                if self._size == 0:
                    # Every shard was read to its end already: the next epoch is a fresh one.
                    self._counter_per_gpu = np.zeros(self._shards_num, dtype=np.int64)
                    self._counter = 0
                    self._shard_sizes_per_gpu = np.roll(self._shard_sizes_per_gpu, 1)
                    self._size = math.ceil(int(max(self._shard_sizes_per_gpu)) / self.batch_size) * self.batch_size
        self._summarized = False
        for i, p in enumerate(self._pipes):
            # Only a pipeline that ended by itself is reset: resetting a stoker pipeline discards the
            # batches it already prepared, and those belong to the next epoch.
            if self._stopped[i]:
                p.reset()
                self._stopped[i] = False
            if _pipe_empty(p):
                p.schedule_run()

    # --- bad samples ------------------------------------------------------------
    def error_report(self) -> list[dict]:
        """Samples the pipelines skipped or substituted so far (``on_error="skip"/"substitute"``).

        Entries are those of ``Pipeline.error_report()`` (``source``, ``operator``, ``reason``,
        ``iteration``, ``action``) plus ``pipeline``, the pipeline's index in this iterator. Each
        pipeline keeps its latest 10,000 entries; ``error_count()`` counts them all.
        """
        out = []
        for i, p in enumerate(self._pipes):
            report = getattr(p, "error_report", None)  # DALI pipelines have none
            if report is not None:
                out.extend({**r, "pipeline": i} for r in report())
        return out

    def error_count(self) -> int:
        """How many samples the pipelines skipped or substituted so far."""
        return sum(p.error_count() if hasattr(p, "error_count") else len(getattr(p, "error_report", list)())
                   for p in self._pipes)

    def _summarize_errors(self) -> None:
        """At the end of an epoch, log once how many samples were skipped/substituted since the last
        summary. The pipelines run ahead of the iterator, so a few of them may belong to the
        prefetched head of the next epoch."""
        if self._summarized:
            return
        self._summarized = True
        epoch, self._epoch = self._epoch, self._epoch + 1
        new: list[dict] = []
        total = 0
        for i, p in enumerate(self._pipes):
            if not hasattr(p, "error_report"):  # a DALI pipeline
                continue
            report = p.error_report()  # the latest entries only, in a long run
            count = p.error_count() if hasattr(p, "error_count") else len(report)
            fresh, self._reported[i] = count - self._reported[i], count
            total += fresh
            new.extend(report[len(report) - min(fresh, len(report)):])
        if not total:
            return
        counts = Counter(r["action"] for r in new)
        what = ", ".join(f"{n} sample(s) {action}" for action, n in sorted(counts.items()))
        if len(new) < total:
            what += f" ({total} in all)"
        examples = "; ".join(f"{printable(r['source'] or '?')} ({r['operator']}: {printable(r['reason'])})"
                             for r in new[:3])
        more = f" and {total - 3} more" if total > 3 else ""
        _log.warning("stoker iterator: epoch %d: %s: %s%s (see iterator.error_report())",
                     epoch, what, examples, more)

    @property
    def size(self) -> int:
        """Samples per epoch (per shard with reader_name), as used for the epoch's end."""
        return self._size

    def __len__(self) -> int:
        per_step = self.batch_size if self._reader_name else self._num_gpus * self.batch_size
        if self._last_batch_policy != LastBatchPolicy.DROP:
            return math.ceil(self.size / per_step)
        return self.size // per_step

    # --- checkpoints ---------------------------------------------------------
    _CHECKPOINTED = ("_counter", "_counter_per_gpu", "_shard_sizes_per_gpu", "_shards_id", "_size")

    def _save_state(self) -> dict:
        state = {}
        for name in self._CHECKPOINTED:
            if hasattr(self, name):
                v = getattr(self, name)
                state[name] = v.tolist() if isinstance(v, np.ndarray) else int(v)
        if self._passes is not None:
            state["passes"] = self._passes.state()
        if self._reader_name:
            state["num_shards"] = self._shards_num
        if self._after_resharded is not None:
            state["resharded"] = resharded_epoch.saved(self)
        return state

    def _restore_state(self, state: dict) -> None:
        if isinstance(state, dict) and "resharded_from" in state:
            resharded_epoch.start(self, state["resharded_from"])
            return
        saved_shards = state.get("num_shards") if isinstance(state, dict) else None
        if saved_shards is not None and self._reader_name and saved_shards != self._shards_num:
            # Positions and per-shard counters mean nothing under another split of the data set:
            # resuming would repeat or skip samples, so it is refused (see plugin/README.md).
            raise CheckpointError(
                f"iterator: the checkpoint was taken with num_shards={saved_shards} for reader "
                f"'{self._reader_name}', this run has num_shards={self._shards_num}; one rank's checkpoint "
                f"resumes only at the world size it was saved with. At another, give every new rank the list "
                f"of all {saved_shards} old ranks' checkpoints (Pipeline(checkpoint=[...]), with the reader's "
                "pad_last_batch=True)")
        try:
            for name in self._CHECKPOINTED:
                if name in state and hasattr(self, name):
                    v = state[name]
                    setattr(self, name, np.asarray(v, dtype=np.int64) if isinstance(v, list) else int(v))
            if self._passes is not None and "passes" in state:
                self._passes.set_state(state["passes"])
            if "resharded" in state:  # (saved during a pass resumed at another world size)
                resharded_epoch.restore(self, state["resharded"])
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise CheckpointError(f"iterator: the checkpoint's iterator state does not fit this iterator "
                                  f"({type(e).__name__}: {e}): {printable(json.dumps(state)[:160])}") from None

    def _pipe_checkpoint(self, p) -> str:
        # A batch the iterator fetched for the next epoch is not consumed: resume before it.
        held = self._passes.pipe_checkpoint(self._pipes.index(p)) if self._passes is not None else None
        data = json.loads(held or p.checkpoint())
        data["iterator"] = self._save_state()
        return json.dumps(data)

    def checkpoints(self) -> list[str]:
        """One checkpoint per pipeline, with this iterator's position inside.

        Build the pipelines again with ``checkpoint=...`` and wrap them in a new iterator with the
        same arguments: it continues with the batch after the last one consumed here.
        """
        if not self._enable_checkpointing:
            raise ValueError("iterator: checkpoints need pipelines made with enable_checkpointing=True")
        if not self._ever_consumed:
            return list(self._initial_checkpoints)
        return [self._pipe_checkpoint(p) for p in self._pipes]

    def state_dict(self) -> dict:
        """The iterator's and its pipelines' position, as a small dict (``torch.save`` friendly)."""
        return {"checkpoints": self.checkpoints()}

    def load_state_dict(self, state: dict) -> None:
        """Continue from ``state`` (from :meth:`state_dict`): batches already prepared are discarded."""
        if not self._enable_checkpointing:
            raise ValueError("iterator: load_state_dict needs pipelines made with enable_checkpointing=True")
        cps = state.get("checkpoints") if isinstance(state, dict) else None
        if not isinstance(cps, list) or not all(isinstance(cp, (str, bytes, dict)) for cp in cps):
            raise CheckpointError("iterator: load_state_dict expects the dict state_dict() returns, "
                                  "{'checkpoints': [one checkpoint per pipeline]}, got "
                                  f"{printable(repr(state)[:120])}")
        parsed = [checkpoint_format.parse(cp) for cp in cps]  # all checked before any pipeline moves
        if len(cps) != self._num_gpus:
            raise ValueError(f"iterator: the state holds {len(cps)} pipeline checkpoints, this iterator has "
                             f"{self._num_gpus} pipelines")
        for p, cp in zip(self._pipes, parsed):
            if not hasattr(p, "restore_checkpoint"):
                raise TypeError(f"iterator: load_state_dict needs stoker pipelines, got {type(p).__name__}; "
                                "build the pipelines with checkpoint=... instead")
            if "fingerprint" in cp:  # every pipeline's checked before the first one moves
                checkpoint_format.verify(cp, p.fingerprint())
        for p, cp in zip(self._pipes, cps):
            p.restore_checkpoint(cp)
        self._restore_state(parsed[0].get("iterator") or {})
        self._stopped = [False] * self._num_gpus
        self._ever_scheduled = False
        self._ever_consumed = False
        self._initial_checkpoints = list(cps)
        self._prepare()


def _restored_iterator_data(p) -> dict | None:
    cp = getattr(p, "_checkpoint", None)
    if isinstance(cp, dict):
        return cp.get("iterator")
    return None


def _pipe_empty(p) -> bool:
    if hasattr(p, "empty"):
        return p.empty()
    ex = getattr(p, "_executor", None)
    return ex is None or ex.pending == 0
