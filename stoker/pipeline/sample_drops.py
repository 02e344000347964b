"""Taking failed samples out of an iteration under ``on_error="skip"/"substitute"``: every value
computed so far loses them, whole-batch values and each conditional branch's alike, and each one
gets a report. Split from the executor (:meth:`Executor.drop_samples
<stoker.pipeline.executor.Executor.drop_samples>`), which keeps the order of the stages."""

from __future__ import annotations

import bisect

from stoker.errors import printable
from stoker.operators.base import BatchContext
from stoker.pipeline import conditionals
from stoker.tensors import TensorListCPU


def drop_failed(graph, it, node, ctx: BatchContext, n: int) -> None:
    """Remove the samples that failed in ``node`` (``ctx.failures``) from everything computed so
    far in iteration ``it`` of ``graph``, record their reports and shrink ``it.batch_size``; ``n``
    is the size of the batch ``node`` ran on."""
    if node.scope is not None or it.scopes:  # the batch is split by a conditional
        failures = _drop_split(graph, it, node, ctx)
        n = it.batch_size  # the whole batch's size, before the drop
    else:
        failures = ctx.failures
        keep = [i for i in range(n) if i not in failures]
        for key, value in list(it.values.items()):
            if len(value) == n:
                it.values[key] = take(value, keep)
    policy = graph.instances[node.id].args.get("on_error") or ctx.on_error
    tr = it.track
    for i, err in sorted(failures.items()):
        ordinal = tr.slots[i] if tr is not None and len(tr.slots) == n else None
        if policy == "substitute" and ordinal is not None:
            tr.substitutes.append(ordinal)
        if ordinal is not None and tr.is_padding(ordinal):
            continue  # pad_last_batch repeats the pass's last sample: reported once already
        # Names and reasons go to logs: escaped where they hold control characters (printable).
        it.reports.append({"source": printable(err.source) if err.source else err.source,
                           "operator": err.operator, "reason": printable(err.reason),
                           "iteration": it.index, "action": "substituted" if policy == "substitute"
                           else "skipped",
                           "epoch": tr.epoch_of(ordinal) if ordinal is not None else None})
    if tr is not None and len(tr.slots) == n:
        tr.slots = [tr.slots[i] for i in range(n) if i not in failures]
    it.batch_size = n - len(failures)
    it.dropped += len(failures)


def _drop_split(graph, it, node, ctx: BatchContext) -> dict:
    """:func:`drop_failed` once a conditional has split the batch: ``node`` may have run on one
    branch's samples. Its failures are mapped to positions in the whole batch, and those
    samples leave every value computed so far: whole-batch values, and each branch's values
    (a branch holds its samples in batch order, :func:`conditionals.scope_sample_ids`). The
    branches' cached sample indices are renumbered as the whole batch's are, so that the
    operators still to run see one consistent numbering. Returns {position: error}."""
    by_id = {x.id: x for x in graph.nodes}
    scopes = {by_id[key[0]].scope for key in it.values if key[0] in by_id}
    scopes.discard(None)
    if node.scope is not None:
        scopes.add(node.scope)
    # every branch's samples, taken before anything changes (their predicates are values too)
    where = {sc: [i - it.offset for i in conditionals.scope_sample_ids(sc, it)] for sc in scopes}
    if node.scope is None:
        failures = dict(ctx.failures)
    else:
        failures = {where[node.scope][i]: err for i, err in ctx.failures.items()}
    size = it.batch_size
    for key, value in list(it.values.items()):
        if key[0] not in by_id:
            continue
        scope = by_id[key[0]].scope
        positions = where[scope] if scope is not None else range(size)
        if len(value) == len(positions):
            it.values[key] = take(value, [k for k, p in enumerate(positions) if p not in failures])
    gone = sorted(failures)
    for scope_id, ids in list(it.scopes.items()):
        it.scopes[scope_id] = [i - bisect.bisect_left(gone, i - it.offset) for i in ids
                               if i - it.offset not in failures]
    return failures


def take(tl, indices: list[int]) -> TensorListCPU:
    """The samples ``indices`` of batch ``tl`` (with their source info), as a new batch."""
    samples = tl.samples()
    sources = tl.source_info()
    return TensorListCPU([samples[i] for i in indices], tl.layout(), [sources[i] for i in indices])


def concat(a, b) -> TensorListCPU:
    """Batch ``a``'s samples followed by ``b``'s (a refill appended to its batch)."""
    return TensorListCPU(a.samples() + b.samples(), a.layout() or b.layout(),
                         list(a.source_info()) + list(b.source_info()))
