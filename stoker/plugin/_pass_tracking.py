"""Epochs that follow the reader's passes when bad samples are skipped (``on_error="skip"``).

Without skips an epoch is a count of samples: the reader's file count cut into
batches (:mod:`stoker.plugin.base_iterator`). With skips a pass delivers fewer
samples than it lists, so counting would run each epoch on into the reader's
next pass, further every epoch. Instead the executor marks every sample with
the reader pass it was read in (:mod:`stoker.pipeline.tracking`), and with
``reader_name`` the iterator ends epoch ``e`` where the reader's pass ends:

* no batch holds samples of two passes: the iterator asks the pipelines to end
  their batches where the reader's passes end, even without ``pad_last_batch``
  (:meth:`stoker.pipeline.tracking.Tracker.bound_passes`); a pass's short last
  batch is padded with its last good sample, marked as padding. (A batch that
  held the end of one pass and the head of the next would lose that head when
  cut or dropped, or deliver it in the wrong epoch: issue 17.)
* ``PARTIAL``: every good sample of the pass exactly once in the epoch; the
  last batch holds only the pass's good samples (no padding);
* ``FILL``: the same, and the last batch is filled up by repeating the pass's
  last good sample;
* ``DROP``: the same, except that the last batch is not returned when the
  pass's good samples do not fill it (its samples are dropped, as DROP says).

A batch read entirely from the next pass (the pass's remaining files were all
bad) is kept for the next epoch instead of being returned. Several pipelines
(shards) may hold different numbers of bad files: the epoch ends when every
shard's pass has ended (FILL, PARTIAL: a shard that ended earlier returns full
batches of its next pass under FILL, which the next epoch does not repeat, and
empty ones under PARTIAL) or when the first shard cannot fill a batch (DROP).
``len(iterator)`` stays the count of listed files, an upper bound.
"""

from __future__ import annotations

import json

_MAX_STALE = 10_000  # batches of an older pass discarded in a row (DROP) before giving up


class _Item:
    """One pipeline's batch: its outputs, the reader-pass marks of its samples, and the reader's
    pass after it was read."""

    __slots__ = ("outputs", "marks", "after", "before_cp")

    def __init__(self, outputs, marks, after, before_cp):
        self.outputs = outputs
        self.marks = marks
        self.after = after
        self.before_cp = before_cp


class PassTracker:
    """The epoch bookkeeping of a :class:`BaseIterator` whose epochs follow reader passes."""

    def __init__(self, iterator, reader_name: str):
        self.it = iterator
        self.name = reader_name
        n = iterator._num_gpus
        self.passes: list[int | None] = [None] * n  # the pass this epoch covers, per pipeline
        self.seen: list[int] = [-1] * n  # latest reader pass after a batch, per pipeline
        self.done = [False] * n  # this pipeline's pass has ended
        self.held: list[_Item | None] = [None] * n  # a batch of the next epoch, fetched already
        self.ended = False  # the epoch ended; reset() starts the next
        self.steps = 0  # batches returned in this epoch

    # --- fetching ------------------------------------------------------------
    def _fetch(self, i: int) -> _Item:
        if self.held[i] is not None:
            item, self.held[i] = self.held[i], None
            return item
        it = self.it
        p = it._pipes[i]
        before = p.checkpoint() if it._enable_checkpointing else None
        outputs = p.share_outputs()
        p.release_outputs()
        p.schedule_run()
        track = getattr(p, "_last_track", None)
        marks = track.sample_marks().get(self.name) if track is not None else None
        state = (getattr(p, "_last_state", None) or {}).get("sources", {}).get(self.name, {})
        if marks is None or "epoch" not in state:
            raise RuntimeError(f"iterator: reader '{self.name}' gave no pass marks; with on_error='skip' the "
                               "reader must be a stoker reader in a stoker pipeline")
        return _Item(outputs, marks, int(state["epoch"]), before)

    def _counts(self, i: int, item: _Item) -> tuple[int, int]:
        """(samples of this epoch's pass or older, of which real) at the batch's head."""
        if self.passes[i] is None:
            self.passes[i] = item.marks[0][0] if item.marks else item.after
        cur = real = 0
        for e, is_real in item.marks:
            if e is None or e > self.passes[i]:
                break
            cur += 1
            real += bool(is_real)
        return cur, real

    # --- one step --------------------------------------------------------------
    def next(self) -> list[dict]:
        from stoker.plugin.base_iterator import LastBatchPolicy

        it = self.it
        if not it._ever_scheduled:
            it._schedule_runs(release_outputs=False)
        if self.ended:
            it._end_iteration()
        policy = it._last_batch_policy
        items, counts = [], []
        for i in range(it._num_gpus):
            item = self._fetch(i)
            cur, real = self._counts(i, item)
            stale = 0
            # DROP ended the epoch before this shard's pass did: the rest of that pass is dropped.
            while policy == LastBatchPolicy.DROP and cur == len(item.marks) and self._older(i, item) \
                    and stale < _MAX_STALE:
                item, stale = self._fetch(i), stale + 1
                cur, real = self._counts(i, item)
            self.seen[i] = item.after
            items.append(item)
            counts.append((cur, real))
        if all(cur == 0 for cur, _ in counts):
            # Every shard's pass ended with the previous step: these batches open the next epoch.
            self._hold_all(items)
            self._finish()
        if policy == LastBatchPolicy.DROP and any(real < len(item.marks) for item, (_, real) in zip(items, counts)):
            for i, (item, (cur, _)) in enumerate(zip(items, counts)):
                if cur == 0:
                    self.held[i] = item  # all next pass: kept for the next epoch
            self._finish()
        batches = []
        for i, (item, (cur, real)) in enumerate(zip(items, counts)):
            if cur == 0 or item.after > self.passes[i]:
                self.done[i] = True
            batch = it._convert(i, item.outputs)
            if policy == LastBatchPolicy.PARTIAL:
                if cur == 0:
                    self.held[i] = item
                if real < len(item.marks):
                    batch = {k: v[0:real] for k, v in batch.items()}
            batches.append(batch)
        if all(self.done):
            self.ended = True
        self.steps += 1
        return batches

    def _older(self, i: int, item: _Item) -> bool:
        return bool(item.marks) and all(e is not None and e < self.passes[i] for e, _ in item.marks)

    def _hold_all(self, items) -> None:
        for i, item in enumerate(items):
            self.held[i] = item

    def _finish(self):
        self.ended = True
        self.it._end_iteration()

    # --- epochs ------------------------------------------------------------------
    def reset(self) -> bool:
        """Start the next epoch; False (nothing done) while the current one runs."""
        if not self.ended:
            return False
        self.ended = False
        self.steps = 0
        for i in range(len(self.passes)):
            if self.passes[i] is not None:
                self.passes[i] += 1
            self.done[i] = self.passes[i] is not None and self.seen[i] > self.passes[i] and self.held[i] is None
        return True

    # --- checkpoints ---------------------------------------------------------------
    def pipe_checkpoint(self, i: int) -> str | None:
        """The checkpoint of pipeline ``i`` before a batch this iterator holds (None: none held)."""
        item = self.held[i]
        return item.before_cp if item is not None else None

    def state(self) -> dict:
        return {"passes": list(self.passes), "seen": list(self.seen), "done": list(self.done),
                "ended": self.ended}

    def set_state(self, state: dict) -> None:
        self.passes = list(state["passes"])
        self.seen = list(state["seen"])
        self.done = list(state["done"])
        self.ended = bool(state["ended"])
        self.held = [None] * len(self.passes)


def skips_samples(pipe, reader_name: str) -> bool:
    """Whether ``pipe`` may skip samples (on_error="skip" on it or an operator) and marks the passes
    of ``reader_name``."""
    ex = getattr(pipe, "_executor", None)
    tracker = getattr(ex, "tracker", None)
    if tracker is None or reader_name not in tracker.readers:
        return False
    graph = pipe._graph
    return pipe.on_error == "skip" or any(n.args.get("on_error") == "skip" for n in graph.nodes)


def may_skip(pipe) -> bool:
    """Whether ``pipe`` skips bad samples (on_error="skip" on it or on one of its operators)."""
    graph = getattr(pipe, "_graph", None)
    if getattr(pipe, "on_error", None) == "skip":
        return True
    return graph is not None and any(n.args.get("on_error") == "skip" for n in graph.nodes)


def bound_passes(pipe, reader_name: str) -> bool:
    """Ask ``pipe`` to end its batches where the passes of ``reader_name`` end (see the module
    docstring); False where it cannot (not a stoker pipeline). Batches the pipeline prepared
    before (a pipeline run before the iterator was made) are not changed."""
    tracker = getattr(getattr(pipe, "_executor", None), "tracker", None)
    return tracker is not None and tracker.bound_passes(reader_name)


def load_json(text):
    return json.loads(text) if isinstance(text, (str, bytes)) else text
