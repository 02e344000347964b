"""A framework iterator's first epoch after ``Pipeline(checkpoint=[...])``: the rest of the pass
the ranks of another world size were reading, spread over this run's ranks by the readers
(:func:`stoker.operators.readers._order.resharded_state`).

That epoch's length is the resumed pass's, padded to whole batches and the same on every rank;
``LastBatchPolicy.PARTIAL`` cuts each pipeline's last batch to the samples its part holds, so
over the ranks every sample of the pass is read exactly once, by the old run or the new. The
epochs after it are this run's own, as if it had started at that epoch. What it needs: the
reader's ``pad_last_batch=True`` (equal step counts on every rank), PARTIAL or FILL, and no
skipped samples; anything else is refused with a CheckpointError.
"""

from __future__ import annotations

import numpy as np

from stoker.errors import CheckpointError


def start(it, old_states: list) -> None:
    """Set iterator ``it``'s bookkeeping for the resumed pass (its pipelines' reader metadata says
    each one's shard, length and real samples). ``old_states``: the old ranks' iterator states.
    Where their epoch had ended (the checkpoint taken after its last batch), this iterator ends
    its current epoch at once and the resumed pass is the next one."""
    from stoker.plugin.base_iterator import LastBatchPolicy

    metas = getattr(it, "_resharded_metas", None)
    if not it._reader_name or not metas or any(m is None for m in metas):
        raise CheckpointError("iterator: the pipelines were resumed from another world size's checkpoints, "
                              "which needs reader_name (the resharded reader's name)")
    if not it._last_batch_padded or it._last_batch_policy == LastBatchPolicy.DROP or it._passes is not None:
        raise CheckpointError("iterator: resuming at another world size needs the reader's pad_last_batch=True, "
                              "LastBatchPolicy.PARTIAL or FILL, and no skipped samples (on_error='raise'); "
                              "resume with the same number of ranks, or start the new world size without a "
                              "checkpoint (at an epoch boundary)")
    if len({m["length"] for m in metas}) != 1:
        raise CheckpointError(f"iterator: the pipelines' resumed passes differ in length "
                              f"{sorted({m['length'] for m in metas})}")
    ended = any(isinstance(s, dict) and int(s.get("_size", 0)) > 0 and int(s.get("_counter", 0)) >= int(s["_size"])
                for s in old_states)
    if ended:
        it._counter = it._size  # (the first next() ends the epoch; reset() then begins the pass)
        it._resharded_next = True
        return
    _begin(it, metas)


def _begin(it, metas: list) -> None:
    it._after_resharded = (it._size, it._shard_sizes_per_gpu_initial.copy())
    it._size = metas[0]["length"]  # (padded to whole batches: the epoch's step count)
    it._counter = 0
    it._counter_per_gpu = np.zeros(it._shards_num, dtype=np.int64)
    it._shards_id = np.array([m["shard"] for m in metas], dtype=np.int64)
    sizes = it._shard_sizes_per_gpu_initial.copy()
    for shard, meta in zip(it._shards_id.tolist(), metas):
        sizes[shard] = meta["real"]  # (what PARTIAL keeps of each pipeline's last batch)
    it._shard_sizes_per_gpu_initial = sizes
    it._shard_sizes_per_gpu = sizes.copy()


def at_reset(it) -> None:
    """At ``reset()``, after the usual step: the resumed pass begins (its epoch was the next one) or
    is over (the sizes of this run's own epochs hold again)."""
    if it._resharded_next:
        it._resharded_next = False
        _begin(it, it._resharded_metas)
    elif it._after_resharded is not None:
        end(it)


def end(it) -> None:
    """The resumed pass is over (``reset()``): the sizes of this run's own epochs hold again."""
    it._size, it._shard_sizes_per_gpu_initial = it._after_resharded
    it._shard_sizes_per_gpu = it._shard_sizes_per_gpu_initial.copy()
    it._after_resharded = None


def saved(it) -> dict:
    """What a checkpoint taken during the resumed pass carries of it."""
    size, sizes = it._after_resharded
    return {"sizes": it._shard_sizes_per_gpu_initial.tolist(), "size_after": int(size), "sizes_after": sizes.tolist()}


def restore(it, state: dict) -> None:
    """Back in the resumed pass, from :func:`saved`'s record."""
    it._shard_sizes_per_gpu_initial = np.asarray(state["sizes"], np.int64)
    it._after_resharded = (int(state["size_after"]), np.asarray(state["sizes_after"], np.int64))
