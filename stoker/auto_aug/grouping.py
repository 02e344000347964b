"""One branch for the geometric augmentations of a ``select`` (see :mod:`stoker.auto_aug.warp_group`).

:func:`grouped_select` is ``select``'s n-way choice with the suite's shear_x, shear_y, translate_x,
translate_y (in pixels) and rotate (keeping the size) sharing one branch, where
``_auto_aug.warp_group`` reads each sample's op index and magnitude row. Each of them gets the
parameter table its own branch would index (``Augmentation._param``'s rows, in the same order), so
the results are the same; where that cannot be told at build time (a magnitude bin that is neither
an int, a batch nor a SignedBin of them; a random sign the op would draw inside its branch; a custom
``mag_to_param`` whose values are not a pair / an angle), the select stays as it was.
"""

from __future__ import annotations

import numpy as np

from stoker.auto_aug.warp_group import NOT_A_WARP, ROTATION, SHEAR, TRANSLATION
from stoker.pipeline.data_node import DataNode, invoke

GROUP_WARPS = True  # False: every augmentation in its own branch (tests compare the two)


def warp_kind(aug) -> int | None:
    """SHEAR, TRANSLATION or ROTATION for the suite's geometric augmentations, else None."""
    from stoker.auto_aug import augmentations as a

    kinds = {a.shear_x.op: SHEAR, a.shear_y.op: SHEAR, a.translate_x_no_shape.op: TRANSLATION,
             a.translate_y_no_shape.op: TRANSLATION, a.rotate.op: ROTATION}
    return kinds.get(getattr(aug, "op", None))


def _row_source(magnitude_bin):
    """``(kind of bin, the per-sample row DataNode or None)``: "signed int", "signed batch",
    "batch" or "int"; None where the group cannot index the tables."""
    from stoker.auto_aug.core.augmentation import SignedBin

    if isinstance(magnitude_bin, SignedBin):
        if isinstance(magnitude_bin.bin, (int, np.integer)):
            return "signed int", magnitude_bin.random_sign
        if isinstance(magnitude_bin.bin, DataNode):
            return "signed batch", magnitude_bin.signed_index
        return None
    if isinstance(magnitude_bin, DataNode):
        return "batch", magnitude_bin
    if isinstance(magnitude_bin, (int, np.integer)) and not isinstance(magnitude_bin, bool):
        return "int", None
    return None


def _magnitude_rows(aug, how: str, magnitude_bin, bins) -> np.ndarray | None:
    """The magnitudes of the rows the op's own branch would index, in its order."""
    from stoker.auto_aug.core.augmentation import SignedBin

    mags = aug.magnitudes(bins)
    negated = -mags if aug.randomly_negate else mags
    if how == "signed batch":
        return np.stack([mags, negated], axis=1).reshape(-1)
    if how == "batch":
        return mags
    k = int(magnitude_bin.bin if isinstance(magnitude_bin, SignedBin) else magnitude_bin)
    if not 0 <= k < len(mags):
        return None  # (its own branch raises the error)
    return np.array([mags[k], negated[k]]) if how == "signed int" else mags[k:k + 1]


def _parameter_pairs(aug, kind: int, magnitudes) -> np.ndarray | None:
    """(rows, 2) float64 parameters: shear factors or offsets, or (angle, 0)."""
    try:
        params = np.asarray(aug.param_table(magnitudes))
    except (TypeError, ValueError):
        return None
    if params.dtype.kind not in "biuf":
        return None
    params = params.astype(np.float64).reshape(len(magnitudes), -1)
    if kind == ROTATION and params.shape[1] == 1:
        return np.column_stack([params, np.zeros(len(params))])
    return params if kind != ROTATION and params.shape[1] == 2 else None


def _warp_table(ops, op_kwargs: dict):
    """``(kinds per op, (ops, rows, 2) table, row DataNode or None)`` of the ops that can share the
    warp branch, or None where fewer than two can."""
    source = _row_source(op_kwargs.get("magnitude_bin"))
    if source is None:
        return None
    how, row = source
    keep_size = op_kwargs.get("rotate_keep_size", True) is True
    kinds = [warp_kind(op) for op in ops]
    kinds = [k if k is not None and (k != ROTATION or keep_size) else NOT_A_WARP for k in kinds]
    if how in ("batch", "int"):  # (an op that negates would draw its sign inside its own branch)
        kinds = [NOT_A_WARP if getattr(op, "randomly_negate", False) else k for op, k in zip(ops, kinds)]
    tables = {}
    for i, (op, kind) in enumerate(zip(ops, kinds)):
        if kind == NOT_A_WARP:
            continue
        try:
            mags = _magnitude_rows(op, how, op_kwargs.get("magnitude_bin"), op_kwargs.get("num_magnitude_bins"))
        except ValueError:
            mags = None
        pairs = None if mags is None else _parameter_pairs(op, kind, mags)
        if pairs is None:
            kinds[i] = NOT_A_WARP
        else:
            tables[i] = pairs
    if len(tables) < 2 or len({len(t) for t in tables.values()}) != 1:
        return None
    rows = len(next(iter(tables.values())))
    table = np.zeros((len(ops), rows, 2))
    for i, pairs in tables.items():
        table[i] = pairs
    return kinds, table, row


def grouped_select(ops, index, op_args: tuple, op_kwargs: dict, what: str):
    """``select(ops, index, *op_args, **op_kwargs)`` with the geometric augmentations in one branch;
    None where they cannot share it (then every op keeps its own branch)."""
    from stoker.pipeline import conditionals

    if not GROUP_WARPS or len(op_args) != 1 or not isinstance(index, DataNode) or index.device != "cpu":
        return None
    planned = _warp_table(ops, op_kwargs)
    if planned is None:
        return None
    kinds, table, row = planned
    data = op_args[0]
    warp_args = {"kinds": kinds, "params": table.reshape(-1).tolist(), "rows": table.shape[1], "op_index": index,
                 "fill_value": op_kwargs.get("fill_value", 128)}
    if row is not None:
        warp_args["row"] = row
    if op_kwargs.get("interp_type") is not None:
        warp_args["interp_type"] = op_kwargs["interp_type"]

    def case(op):
        return lambda: (op(*op_args, **op_kwargs),)

    def warp_branch():
        return (invoke("_auto_aug.warp_group", [data], warp_args),)

    first = next(i for i, k in enumerate(kinds) if k != NOT_A_WARP)
    branches, branch_of = [], []
    for i, (op, kind) in enumerate(zip(ops, kinds)):
        if kind != NOT_A_WARP and i != first:
            branch_of.append(branch_of[first])
            continue
        branch_of.append(len(branches))
        branches.append(warp_branch if i == first else case(op))
    group = invoke("_auto_aug.case_group", [index], {"groups": branch_of})
    out, = conditionals.select_stmt(group, branches, (), ("output",), what)
    return out
