"""``select``: apply one of several augmentations to each sample, chosen per sample."""

from __future__ import annotations

from collections.abc import Sequence

from stoker.pipeline import conditionals


def select(ops: Sequence, selected_op_idx, *op_args, **op_kwargs):
    """Apply ``ops[selected_op_idx]`` to each sample, as if by ``ops[i](*op_args, **op_kwargs)``.

    ``selected_op_idx`` is a batch of indices in ``[0, len(ops) - 1]`` (or an int; values outside
    are clamped). The batch is split among the ops in one n-way per-sample choice, so each op runs
    only on its samples and the results are gathered back in one copy; DataNodes among the
    arguments are split along. The suite's shears, translations and rotations share one branch
    (:mod:`stoker.auto_aug.grouping`), with the same results. Works whether or not the pipeline
    enables conditionals (it calls :mod:`stoker.pipeline.conditionals` directly).
    """
    if not ops:
        raise ValueError("select: the list of ops is empty")

    from stoker.auto_aug.grouping import grouped_select

    grouped = grouped_select(ops, selected_op_idx, op_args, op_kwargs, f"select among {len(ops)} ops")
    if grouped is not None:  # the geometric augmentations in one branch (stoker.auto_aug.warp_group)
        return grouped

    def case(op):
        return lambda: (op(*op_args, **op_kwargs),)

    out, = conditionals.select_stmt(selected_op_idx, [case(op) for op in ops], (), ("output",),
                                    f"select among {len(ops)} ops")
    return out
