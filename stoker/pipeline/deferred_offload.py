"""One batch operator's helper round trip overlapping the GPU nodes' host halves, in the CPU-stage
lanes (:mod:`stoker.pipeline.cpu_lanes`).

Why: a lane that sends a batch to the batch-operator helper (:mod:`stoker.pipeline.batch_offload`)
waits for the answer before it goes on. In the SSD pipeline on an H100, ``box_encoder`` took 7.3 ms
of wall time per batch of 256 that way, and the mixed decoder's host half, which the lane runs next
in its hand-over turn, another 6.4 ms of Python: together with ``random_bbox_crop``'s round trip
they set the pace of the two lanes and left the GPU's JPEG engines idle part of each batch
(benchmarks/RESULTS.md). Nothing of the host half needs ``box_encoder``'s outputs, so the two can
run at once: the helper computes while the lane prepares.

Which operator: the last batch-offloaded operator of the CPU stage's steps (:func:`deferrable`),
where no operator reads its outputs (the pipeline's outputs only) and it is in no conditional
branch. Its batch goes to a helper when its turn in the steps comes; the lane goes on, and the
answer is taken (:func:`collect`) after the GPU nodes' host halves, before the iteration goes to
the GPU stage. One such operator, after every other offloaded one, so a lane that holds a helper
never asks for another: with two lanes and two helpers, no lane waits for a helper held by a lane
that waits for its turn.

Results: the helper computes what the pipeline's process would, so outputs are bit-identical
(tests/pipeline/test_deferred_offload.py). Lanes run only under ``on_error="raise"``: where the
helper cannot answer, the batch is computed here at collection, and an error raises as it would
have, naming the operator (the node runs through the executor's usual path then).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class Pending:
    """A batch sent to a helper whose answer is taken at the hand-over."""

    node: Any
    conn: Any  # the helper (BatchOffload.submit's handle)


def _ops_in_order(steps) -> list:
    """The operator nodes of the CPU steps in the order they run (a fused step: hoisted, chain,
    deferred), with whether each is a step of its own."""
    out = []
    for step in steps:
        members = getattr(step, "chain", None)
        if members is None:
            out.append((step, True))
        else:
            out += [(n, False) for n in [*step.hoisted, *members, *step.deferred]]
    return out


def deferrable(graph, steps, offload) -> int | None:
    """The id of the node whose helper answer may be collected at the hand-over, or None."""
    if offload is None:
        return None
    offloaded = [(n, alone) for n, alone in _ops_in_order(steps)
                 if getattr(graph.instances[n.id], "offload_cpu", False)]
    if not offloaded:
        return None
    node, alone = offloaded[-1]
    if not alone or getattr(node, "scope", None) is not None:
        return None
    for other in [*graph.source_nodes, *graph.cpu_nodes, *graph.gpu_nodes]:
        if any(x.source.id == node.id for x in [*other.inputs, *other.arg_inputs.values()]):
            return None
    return node.id


def submit(ex, it, node, inst, ctx, inputs: list, arg_inputs: dict) -> bool:
    """Send ``node``'s batch to a helper and note it on ``it``; False where it must run now."""
    conn = ex.batch_offload.submit(inst, ctx, inputs, arg_inputs)
    if conn is None:
        return False
    it.deferred.append(Pending(node, conn))
    return True


def collect(ex, it) -> None:
    """Take the answers of ``it``'s deferred batches into its values (computing here any the
    helper could not). Always called once per lane iteration: an iteration that failed meanwhile
    still takes its answers, so that the helpers are free again."""
    pending, it.deferred = it.deferred or [], None
    for p in pending:
        outs = ex.batch_offload.result(p.conn)
        if it.error is not None or ex.closed:  # (nothing will read the outputs)
            continue
        if outs is None:  # the helper could not: the node runs here as it would have (its errors too)
            try:
                ex.run_node(p.node, it, gpu=False)
            except BaseException as e:  # noqa: BLE001 - handed to the consumer, who re-raises
                it.error = e
                _call_off_host_halves(it)
            continue
        for i, out in enumerate(outs):
            it.values[(p.node.id, i)] = out


def _call_off_host_halves(it) -> None:
    """The GPU stage skips a failed iteration: what its GPU nodes' host halves hold goes back now."""
    from stoker.pipeline.executor import cancel_prepared

    for value in it.prepared.values():
        cancel_prepared(value)
    it.prepared.clear()
