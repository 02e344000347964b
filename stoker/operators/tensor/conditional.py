"""The operators behind per-sample conditionals (``@pipeline_def(enable_conditionals=True)``).

``stoker.pipeline.conditionals`` rewrites ``if``/``and``/``or``/``not`` on DataNodes
into these: ``_conditional.split`` keeps the samples of a batch whose predicate is
true (or false), ``_conditional.merge`` puts the results of the two branches back
into one batch in the original sample order, and ``_conditional.to_bool`` /
``_conditional.not`` turn predicates into boolean scalars. They are internal (the
leading underscore keeps them out of ``fn`` and ``ops``).
"""

from __future__ import annotations

import numpy as np

from stoker.errors import OperatorError
from stoker.operators.base import Operator
from stoker.operators.schema import Arg, Schema, register
from stoker.tensors import TensorListCPU, batch_of_arrays

_WHAT = Arg("what", "str", "", doc="(internal) the user's statement and line, for error messages")


def _scalar_values(pred: TensorListCPU, what: str, operator: str, origin: str) -> np.ndarray:
    """Each sample of a predicate batch as one number (checks that every sample is a numeric or
    boolean scalar, a 0-d tensor)."""
    dense = getattr(pred, "_dense", None)  # (a whole-batch operator's output: no per-sample step)
    if dense is not None and dense.ndim == 1 and len(dense) == len(pred) and dense.dtype.kind in "biuf":
        return dense
    samples = pred.samples()
    try:  # the usual case, every sample a numeric or boolean scalar, in one NumPy step
        flat = np.asarray(samples)
    except ValueError:
        flat = None
    if flat is not None and flat.shape == (len(samples),) and flat.dtype.kind in "biuf":
        return flat
    values = []
    for i, s in enumerate(samples):
        arr = np.asarray(s)
        if arr.ndim != 0 or arr.dtype.kind not in "biuf":
            kind = f"a {arr.ndim}-d input" if arr.ndim else f"a {arr.dtype} value"
            subject = what if what.startswith("argument") else f"the condition of {what or 'a per-sample if'}"
            raise OperatorError(
                f"{subject} must be a boolean scalar (a 0-d tensor) per "
                f"sample, got {kind} of shape {arr.shape}; reduce it first (e.g. fn.reductions.any, "
                "or compare it to a value)",
                operator=operator, origin=origin, sample_index=i,
                source=pred.source_info(i) if i < len(pred.source_info()) else "")
        values.append(arr.item())
    return np.asarray(values)


def predicate_mask(pred: TensorListCPU, what: str, operator: str = "if", origin: str = "") -> list[bool]:
    """The truth value of each sample of a predicate batch.

    Each sample must be a scalar (a 0-d tensor) of a boolean or numeric type;
    numbers are true when nonzero, as in Python and DALI.
    """
    return (_scalar_values(pred, what, operator, origin) != 0).tolist()


def case_indices(index: TensorListCPU, cases: int, what: str, operator: str = "select",
                 origin: str = "") -> np.ndarray:
    """Which of ``cases`` branches each sample of an index batch takes (an int64 array).

    The index is clamped to ``[0, cases - 1]``; a fractional index ``x`` takes case ``ceil(x)``
    and NaN the last case. That is where a binary tree of ``index <= middle`` conditions sends
    each value, so an n-way select gives what nested two-way ifs would.
    """
    return case_numbers(_scalar_values(index, what, operator, origin), cases)


def case_numbers(values: np.ndarray, cases: int) -> np.ndarray:
    """:func:`case_indices` of an array of numbers (one per sample)."""
    if values.dtype.kind == "f":
        values = np.where(np.isnan(values), cases - 1, np.ceil(values))
    return np.clip(values, 0, cases - 1).astype(np.int64)


def branch_labels(pred: TensorListCPU, cases: int, what: str, operator: str, origin: str) -> np.ndarray:
    """Per sample, the branch it takes: a bool array for an if (``cases == 0``), else case indices.

    Kept on the predicate batch (batches are not changed once made): every split of a
    conditional, and the executor's sample numbering, ask again for the same predicate.
    """
    cache = getattr(pred, "_branch_labels", None)
    if cache is None:
        cache = {}
        try:
            pred._branch_labels = cache
        except AttributeError:  # (a batch type without a __dict__: no cache)
            pass
    labels = cache.get(cases)
    if labels is None:
        if cases:
            labels = case_indices(pred, cases, what, operator, origin)
        else:
            labels = np.asarray(predicate_mask(pred, what, operator, origin), bool)
        labels.flags.writeable = False
        cache[cases] = labels
    return labels


DIRECT_PREDICATE = "argument 'predicate'"  # (the subject of a direct call's predicate errors)
_PREDICATE = Arg("predicate", "bool", None, tensor=True,
                 doc="DALI's form: the per-sample boolean scalars (an argument input; nonzero is true)")


def is_direct(args: dict) -> bool:
    """True for DALI's direct call ``split(x, predicate=p)`` (two outputs), False for the form a
    per-sample ``if`` records (``branch`` or ``cases`` given: one output)."""
    return args.get("branch") is None and not args.get("cases")


@register
class Split(Operator):
    """The samples of ``data`` for which ``predicate`` is ``branch`` (in order).

    DALI's form, ``fn._conditional.split(x, predicate=p)``, returns ``(true_part, false_part)``:
    the samples whose predicate is true, then those whose predicate is false, each batch in the
    original order (so each is smaller than the batch). Operators applied to a part run on its
    samples only; ``fn._conditional.merge`` puts two parts back into one batch.
    """

    schema = Schema(
        name="_conditional.split",
        doc="Splits a batch by a per-sample predicate: split(x, predicate=p) returns (true_part, "
            "false_part), the samples whose predicate is true / false, in order. (A per-sample if "
            "records it with `branch` and keeps one part.)",
        args=[_PREDICATE,
              Arg("branch", "bool", None, doc="(internal) keep one part: True the if branch, False the else"),
              Arg("cases", "int", 0, doc="(internal) 0: a two-way if; n: one of n cases of a select"),
              Arg("case", "int", 0, doc="(internal) with `cases`: the case whose samples are kept"),
              _WHAT],
        inputs=(1, 2),
        devices=("cpu", "gpu"),
        num_outputs=lambda a: 2 if is_direct(a) else 1,
    )

    def run_cpu(self, batch, inputs, arg_inputs):
        data, pred = inputs
        if len(data) != len(pred):
            raise OperatorError(f"{_pred_name(self)} has {len(pred)} samples but the input {len(data)}",
                                operator=self.instance_name, origin=self.origin)
        samples, sources = data.samples(), data.source_info()
        parts = split_parts(self, pred)
        return [batch_of_arrays([samples[i] for i in keep], data.layout(), [sources[i] for i in keep])
                for keep in (k.tolist() for k in parts)]


def _pred_name(op: Operator) -> str:
    return "argument 'predicate'" if not op.args.get("what") else "the condition"


def split_parts(op: Operator, pred) -> list[np.ndarray]:
    """The positions of the samples each output of a split (``op``) keeps, in order: one array
    (a branch of an if or a case of a select), or two (DALI's direct form: true, then false)."""
    if is_direct(op.args):
        labels = branch_labels(pred, 0, DIRECT_PREDICATE, op.instance_name, op.origin)
        return [np.flatnonzero(labels), np.flatnonzero(~labels)]
    return [split_positions(op, pred)]


def split_positions(op: Operator, pred: TensorListCPU) -> np.ndarray:
    """The positions of the samples a split (``op``) of a per-sample if or select keeps, in order."""
    a = op.args
    labels = branch_labels(pred, a.get("cases", 0), a["what"], op.instance_name, op.origin)
    return np.flatnonzero(labels == (a["case"] if a.get("cases", 0) else a["branch"]))


@register
class Merge(Operator):
    """One batch from the two branches of a per-sample if, in the original sample order.

    DALI's form is ``fn._conditional.merge(true_part, false_part, predicate=p)``; the predicate
    then becomes the third input when the call is recorded (it has the whole batch's size, the
    parts fewer samples)."""

    schema = Schema(
        name="_conditional.merge",
        doc="Merges two parts of a batch into one by a per-sample predicate: merge(true_part, "
            "false_part, predicate=p) takes sample i from the next sample of true_part where p[i] is "
            "true, else of false_part (the inverse of split).",
        args=[_PREDICATE, Arg("variable", "str", "", doc="(internal) the merged variable's name, for errors"),
              _WHAT],
        inputs=(2, 3),
        devices=("cpu", "gpu"),
    )

    def run_cpu(self, batch, inputs, arg_inputs):
        on_true, on_false, pred = inputs
        what = self.args["what"] or DIRECT_PREDICATE
        mask = branch_labels(pred, 0, what, self.instance_name, self.origin).tolist()
        count = sum(mask)
        check_merge_counts(self, len(on_true), len(on_false), count, len(mask) - count)
        check_alike(self, on_true, on_false)
        return [_interleave([on_true, on_false], np.where(mask, 0, 1))]


def check_merge_counts(op: Operator, n_true: int, n_false: int, want_true: int, want_false: int) -> None:
    """A merge's inputs must hold as many samples as the predicate has true and false values."""
    if (n_true, n_false) == (want_true, want_false):
        return
    if op.args.get("variable") or op.args.get("what"):
        msg = (f"variable '{op.args['variable']}': the branches gave {n_true} and {n_false} samples for "
               f"{want_true} true and {want_false} false conditions")
    else:
        msg = (f"the inputs have {n_true} and {n_false} samples, but argument 'predicate' has {want_true} "
               f"true and {want_false} false values: pass the two outputs of _conditional.split made "
               "with the same predicate")
    raise OperatorError(msg, operator=op.instance_name, origin=op.origin)


def check_alike(op: Operator, a, b) -> None:
    """Both branches (merge's two inputs) must give the same element type, dimensionality and
    layout (as DALI)."""
    if not len(a) or not len(b):
        return
    sa, sb = a.samples()[0], b.samples()[0]
    direct = not (op.args.get("variable") or op.args.get("what"))
    one, other = ("the first input", "the second input") if direct else ("the if branch", "the else branch")
    problem = None
    if sa.dtype != sb.dtype:
        problem = f"types differ: {sa.dtype} in {one}, {sb.dtype} in {other}"
    elif sa.ndim != sb.ndim:
        problem = (f"numbers of dimensions differ: {sa.ndim} in {one} (shape {sa.shape}), "
                   f"{sb.ndim} in {other} (shape {sb.shape})")
    elif a.layout() and b.layout() and a.layout() != b.layout():
        problem = f"layouts differ: '{a.layout()}' in {one}, '{b.layout()}' in {other}"
    if not problem:
        return
    if direct:
        msg = (f"the inputs are merged into one batch, but their {problem}. Give both the same type and "
               "dimensionality (e.g. fn.cast, fn.reshape)")
    else:
        msg = (f"variable '{op.args['variable']}' of {op.args['what'] or 'a per-sample if'} is merged "
               f"from both branches into one batch, but its {problem}. Make both branches produce the "
               "same type and dimensionality (e.g. fn.cast, fn.reshape)")
    raise OperatorError(msg, operator=op.instance_name, origin=op.origin)


@register
class MergeCases(Operator):
    """One batch from the n cases of a per-sample select, in the original sample order."""

    schema = Schema(
        name="_conditional.merge_cases",
        doc="Interleaves the batches of the n cases of a select (inputs: case 0 .. n-1, then the "
            "index batch) back into one batch by each sample's case.",
        args=[Arg("variable", "str", "", doc="(internal) the merged variable's name, for errors"), _WHAT],
        inputs=(3, 999),
        devices=("cpu", "gpu"),
    )

    def run_cpu(self, batch, inputs, arg_inputs):
        *cases, index = inputs
        labels = case_labels_for_merge(self, cases, index)
        check_cases_alike(self, [(c.samples()[0], c.layout()) if len(c) else None for c in cases])
        return [_interleave(cases, labels)]


def _interleave(branches: list, labels: np.ndarray) -> TensorListCPU:
    """One batch of the branches' samples in the original order: ``branches[k]`` holds, in order,
    the samples whose label is k (the host counterpart of gpu_conditional's merge)."""
    samples, sources = np.empty(labels.size, object), np.empty(labels.size, object)
    for k, b in enumerate(branches):
        where = np.flatnonzero(labels == k)
        for i, s, src in zip(where.tolist(), b.samples(), b.source_info()):
            samples[i], sources[i] = s, src
    layout = next((b.layout() for b in branches if len(b) and b.layout()), "") or \
        next((b.layout() for b in branches if b.layout()), "")
    return batch_of_arrays(list(samples), layout, list(sources))


def case_labels_for_merge(op: Operator, cases: list, index) -> np.ndarray:
    """Each sample's case for a merge of ``cases``; checks that every case gave its samples."""
    labels = branch_labels(index, len(cases), op.args["what"], op.instance_name, op.origin)
    counts = np.bincount(labels, minlength=len(cases))
    got = [len(c) for c in cases]
    if counts.tolist() != got:
        raise OperatorError(f"variable '{op.args['variable']}': the cases gave {got} samples for "
                            f"{counts.tolist()} selections", operator=op.instance_name, origin=op.origin)
    return labels


def check_cases_alike(op: Operator, firsts: list) -> None:
    """Every case that has samples gives one element type, dimensionality and layout (as an if's
    branches must). ``firsts``: per case, (an array-like first sample, layout) or None when empty."""
    present = [(k, f) for k, f in enumerate(firsts) if f is not None]
    for k, (sample, layout) in present[1:]:
        k0, (first, layout0) = present[0]
        problem = None
        if sample.dtype != first.dtype:
            problem = f"types differ: {first.dtype} in case {k0}, {sample.dtype} in case {k}"
        elif sample.ndim != first.ndim:
            problem = f"numbers of dimensions differ: {first.ndim} in case {k0}, {sample.ndim} in case {k}"
        elif layout and layout0 and layout != layout0:
            problem = f"layouts differ: '{layout0}' in case {k0}, '{layout}' in case {k}"
        if problem:
            raise OperatorError(
                f"variable '{op.args['variable']}' of {op.args['what'] or 'a per-sample select'} is merged "
                f"from every case into one batch, but its {problem}. Make every case produce the same type "
                "and dimensionality (e.g. fn.cast, fn.reshape)", operator=op.instance_name, origin=op.origin)


@register
class ToBool(Operator):
    """A predicate as a boolean scalar per sample (checks that each sample is a scalar)."""

    schema = Schema(
        name="_conditional.to_bool",
        doc="Converts scalar predicates to booleans (nonzero is true), for and/or.",
        args=[_WHAT],
    )

    def run_cpu(self, batch, inputs, arg_inputs):
        pred, = inputs
        mask = predicate_mask(pred, self.args["what"], self.instance_name, self.origin)
        return [TensorListCPU([np.array(m) for m in mask], "", pred.source_info())]


@register
class Not(Operator):
    """Logical negation of a scalar predicate per sample (Python ``not``)."""

    schema = Schema(name="_conditional.not", doc="Per-sample logical not of a scalar predicate.", args=[_WHAT])

    def run_cpu(self, batch, inputs, arg_inputs):
        pred, = inputs
        mask = predicate_mask(pred, self.args["what"], self.instance_name, self.origin)
        return [TensorListCPU([np.array(not m) for m in mask], "", pred.source_info())]
