"""``select``: apply one of several augmentations to each sample, chosen per sample."""

from __future__ import annotations

from collections.abc import Sequence

from stoker.pipeline import conditionals


def select(ops: Sequence, selected_op_idx, *op_args, **op_kwargs):
    """Apply ``ops[selected_op_idx]`` to each sample, as if by ``ops[i](*op_args, **op_kwargs)``.

    ``selected_op_idx`` is a batch of indices in ``[0, len(ops) - 1]`` (or an int). The batch is
    split among the ops with a binary tree of per-sample conditionals (``idx <= mid``), so each op
    runs only on its samples; DataNodes among the arguments are split along. Works whether or not
    the pipeline enables conditionals (it calls :mod:`stoker.pipeline.conditionals` directly).
    """
    if not ops:
        raise ValueError("select: the list of ops is empty")

    def pick(lo: int, hi: int, args: tuple, kwargs: dict):
        if lo == hi:
            return ops[lo](*args, **kwargs)
        mid = (lo + hi) // 2

        def low(*state):
            return (pick(lo, mid, args, kwargs),)

        def high(*state):
            return (pick(mid + 1, hi, args, kwargs),)

        out, = conditionals.if_stmt(selected_op_idx <= mid, low, high, (None,), ("output",),
                                    f"select among ops {lo}..{hi}")
        return out

    return pick(0, len(ops) - 1, op_args, op_kwargs)
