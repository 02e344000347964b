"""The geometric augmentations of one ``select`` as one operator (issue 16).

A suite's shear_x, shear_y, translate_x, translate_y and rotate all resample the image through an
affine matrix, with the same fill value and interpolation. Run as separate branches of a
per-sample ``select``, each costs a split, an operator call (and on the GPU a launch) and a share of
the merge for the few samples that chose it; on the GPU each call's host cost is what a batch
pays (benchmarks/RESULTS.md has the before and after). :func:`stoker.auto_aug.core.select` sends the samples
of all of them to one branch instead, where ``_auto_aug.warp_group`` looks up each sample's
augmentation and parameter in a table and warps the batch in one step.

The results are those of the separate operators, sample for sample: the CPU implementation calls
``transforms.shear`` / ``transforms.translation``, ``warp_affine`` (``inverse_map=False``) and
``rotate`` (``keep_size=True``) itself, and the GPU one (``gpu_warp_group``) computes the matrices
with those operators' own batch planners and launches the warp kernel they launch.

``_auto_aug.case_group`` maps a select's op index (clamped as ``select`` clamps it) to the branch
that runs the op.
"""

from __future__ import annotations

import numpy as np

from stoker import types
from stoker.errors import arg_error
from stoker.operators.base import Operator
from stoker.operators.detection.transforms import Shear, Translation
from stoker.operators.image.crop import LayoutAware
from stoker.operators.image.rotate import Rotate
from stoker.operators.image.warp_affine import WarpAffine
from stoker.operators.schema import REQUIRED, Arg, Schema, register
from stoker.operators.tensor.conditional import case_indices, case_numbers
from stoker.tensors import batch_of_rows

SHEAR, TRANSLATION, ROTATION = 0, 1, 2  # the kinds of warp_group's table
NOT_A_WARP = -1


def _no_tensors(value) -> bool:
    return False


def _sub_operator(cls, given: dict, parent: Operator):
    """An operator instance of ``cls`` with arguments ``given``, named after ``parent`` (so that its
    errors name the operator the user's pipeline holds)."""
    static, _ = cls.schema.bind(given, _no_tensors)
    return cls(static, "cpu", op_seed=parent.op_seed, origin=parent.origin, name=parent.instance_name)


@register
class WarpGroup(LayoutAware):
    """Warps each sample by the geometric augmentation its op index picks (see the module)."""

    schema = Schema(
        name="_auto_aug.warp_group",
        doc="Shear, translation or rotation (keeping the size) of uint8/float HWC images, each sample's kind "
            "and parameter looked up in a table by its op index and row (the geometric branch of "
            "stoker.auto_aug.core.select).",
        args=[Arg("kinds", "int_list", REQUIRED, doc="per op index: 0 shear, 1 translation, 2 rotation, -1 none"),
              Arg("params", "float_list", REQUIRED,
                  doc="the parameters, (ops, rows, 2) flattened: shear factors, offsets, or the angle and 0"),
              Arg("rows", "int", 1, doc="rows of the table per op"),
              Arg("op_index", "float", REQUIRED, tensor=True,
                  doc="each sample's op index (clamped as select clamps it)"),
              Arg("row", "int", 0, tensor=True, doc="each sample's row of its op's parameters"),
              Arg("fill_value", "float", None, doc="value outside the input (default: repeat the border)"),
              Arg("interp_type", "interp", types.INTERP_LINEAR, doc="INTERP_NN or INTERP_LINEAR")],
        inputs=(1, 1),
    )

    def setup(self):
        kinds = np.asarray(self.args["kinds"], np.int64)
        rows = self.args["rows"]
        params = np.asarray(self.args["params"], np.float64)
        if rows < 1 or params.size != kinds.size * rows * 2:
            raise arg_error(self.schema.name, "params", f"needs {kinds.size} x {rows} x 2 values, got {params.size}")
        if not np.isin(kinds, (NOT_A_WARP, SHEAR, TRANSLATION, ROTATION)).all() or (kinds == NOT_A_WARP).all():
            raise arg_error(self.schema.name, "kinds", f"must hold 0, 1, 2 or -1 (and one warp), got {kinds.tolist()}")
        self._kinds, self._table = kinds, params.reshape(kinds.size, rows, 2)
        common = {"fill_value": self.args["fill_value"], "interp_type": self.args["interp_type"]}
        self.warp = _sub_operator(WarpAffine, {"inverse_map": False, **common}, self)
        self.rotate = _sub_operator(Rotate, {"keep_size": True, **common}, self)
        self._shear, self._translation = _sub_operator(Shear, {}, self), _sub_operator(Translation, {}, self)

    def choices(self, op_index: np.ndarray, row: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(kinds (n,), parameters (n, 2) float64)`` of samples with these op indices and rows;
        ValueError for a row outside the table or an index that picks no warp."""
        ops = case_numbers(np.asarray(op_index).reshape(-1), self._kinds.size)
        rows = np.asarray(row).reshape(-1)
        if rows.size != ops.size or rows.dtype.kind not in "biu" and not (np.mod(rows, 1) == 0).all():
            raise ValueError(f"argument 'row' must be one whole number per sample, got {rows!r}")
        rows = rows.astype(np.int64)
        if ((rows < 0) | (rows >= self._table.shape[1])).any():
            raise ValueError(f"argument 'row' must be in [0, {self._table.shape[1] - 1}], got {rows.tolist()}")
        kinds = self._kinds[ops]
        if (kinds == NOT_A_WARP).any():
            raise ValueError(f"op indices {sorted(set(ops[kinds == NOT_A_WARP].tolist()))} pick no warp")
        return kinds, self._table[ops, rows]

    def matrices(self, kinds: np.ndarray, params: np.ndarray) -> np.ndarray:
        """The (n, 2, 3) float32 matrices of shear and translation samples, as ``transforms.shear`` /
        ``transforms.translation`` make them for the whole batch."""
        out = np.empty((len(kinds), 2, 3), np.float32)
        for kind, op, name in ((SHEAR, self._shear, "shear"), (TRANSLATION, self._translation, "offset")):
            pick = kinds == kind
            if pick.any():
                out[pick] = op.own_batch({name: params[pick]}, int(pick.sum())).astype(np.float32)
        return out

    def run_sample(self, inputs, args, ctx):
        kinds, params = self.choices(args.get("op_index"), args.get("row"))
        kind, param = int(kinds[0]), params[0]
        if kind == ROTATION:
            return self.rotate.run_sample(inputs, {**self.rotate.args, "angle": param[0],
                                                   "__layout": args.get("__layout")}, ctx)
        transform = self._shear if kind == SHEAR else self._translation
        name = "shear" if kind == SHEAR else "offset"
        matrix = transform.run_sample((), {**transform.args, name: param}, ctx)
        return self.warp.run_sample(inputs, {**self.warp.args, "matrix": matrix,
                                             "__layout": args.get("__layout")}, ctx)


@register
class CaseGroup(Operator):
    """Each sample's branch: ``groups[op index]``, the index clamped as ``select`` clamps it."""

    schema = Schema(
        name="_auto_aug.case_group",
        doc="The branch of each sample of a select whose ops share branches: groups[index] (int32), the index "
            "clamped to the ops as select clamps it.",
        args=[Arg("groups", "int_list", REQUIRED, doc="the branch of each op index")],
        inputs=(1, 1),
    )

    def run_cpu(self, batch, inputs, arg_inputs):
        groups = np.asarray(self.args["groups"], np.int32)
        ops = case_indices(inputs[0], groups.size, "the op index of select", self.instance_name, self.origin)
        return [batch_of_rows(groups[ops], "", inputs[0].source_info())]
