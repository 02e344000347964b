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


def predicate_mask(pred: TensorListCPU, what: str, operator: str = "if", origin: str = "") -> list[bool]:
    """The truth value of each sample of a predicate batch.

    Each sample must be a scalar (a 0-d tensor) of a boolean or numeric type;
    numbers are true when nonzero, as in Python and DALI.
    """
    samples = pred.samples()
    try:  # the usual case, every sample a numeric or boolean scalar, in one NumPy step
        flat = np.asarray(samples)
    except ValueError:
        flat = None
    if flat is not None and flat.shape == (len(samples),) and flat.dtype.kind in "biuf":
        return (flat != 0).tolist()
    mask = []
    for i, s in enumerate(samples):
        arr = np.asarray(s)
        if arr.ndim != 0 or arr.dtype.kind not in "biuf":
            kind = f"a {arr.ndim}-d input" if arr.ndim else f"a {arr.dtype} value"
            raise OperatorError(
                f"the condition of {what or 'a per-sample if'} must be a boolean scalar (a 0-d tensor) per "
                f"sample, got {kind} of shape {arr.shape}; reduce it first (e.g. fn.reductions.any, "
                "or compare it to a value)",
                operator=operator, origin=origin, sample_index=i,
                source=pred.source_info(i) if i < len(pred.source_info()) else "")
        mask.append(bool(arr))
    return mask


@register
class Split(Operator):
    """The samples of ``data`` for which ``predicate`` is ``branch`` (in order)."""

    schema = Schema(
        name="_conditional.split",
        doc="Keeps the samples whose predicate equals `branch` (one side of a per-sample if).",
        args=[Arg("branch", "bool", True, doc="True: the if branch; False: the else branch"), _WHAT],
        inputs=(2, 2),
        devices=("cpu", "gpu"),
    )

    def run_cpu(self, batch, inputs, arg_inputs):
        data, pred = inputs
        if len(data) != len(pred):
            raise OperatorError(f"the data has {len(data)} samples but the condition {len(pred)}",
                                operator=self.instance_name, origin=self.origin)
        mask = predicate_mask(pred, self.args["what"], self.instance_name, self.origin)
        keep = [i for i, m in enumerate(mask) if m == self.args["branch"]]
        samples, sources = data.samples(), data.source_info()
        return [batch_of_arrays([samples[i] for i in keep], data.layout(), [sources[i] for i in keep])]


@register
class Merge(Operator):
    """One batch from the two branches of a per-sample if, in the original sample order."""

    schema = Schema(
        name="_conditional.merge",
        doc="Interleaves the if-branch and else-branch batches back into one batch by the predicate.",
        args=[Arg("variable", "str", "", doc="(internal) the merged variable's name, for errors"), _WHAT],
        inputs=(3, 3),
        devices=("cpu", "gpu"),
    )

    def run_cpu(self, batch, inputs, arg_inputs):
        on_true, on_false, pred = inputs
        mask = predicate_mask(pred, self.args["what"], self.instance_name, self.origin)
        count = sum(mask)
        if (count, len(mask) - count) != (len(on_true), len(on_false)):
            raise OperatorError(
                f"variable '{self.args['variable']}': the branches gave {len(on_true)} and {len(on_false)} "
                f"samples for {count} true and {len(mask) - count} false conditions",
                operator=self.instance_name, origin=self.origin)
        self._check_alike(on_true, on_false)
        t, f = iter(on_true.samples()), iter(on_false.samples())
        ts, fs = iter(on_true.source_info()), iter(on_false.source_info())
        samples, sources = [], []
        for m in mask:
            samples.append(next(t) if m else next(f))
            sources.append(next(ts) if m else next(fs))
        layout = on_true.layout() if len(on_true) else on_false.layout()
        return [batch_of_arrays(samples, layout or on_true.layout() or on_false.layout(), sources)]

    def _check_alike(self, a: TensorListCPU, b: TensorListCPU) -> None:
        """Both branches must give the same element type, dimensionality and layout (as DALI)."""
        if not len(a) or not len(b):
            return
        sa, sb = a.samples()[0], b.samples()[0]
        problem = None
        if sa.dtype != sb.dtype:
            problem = f"types differ: {sa.dtype} in the if branch, {sb.dtype} in the else branch"
        elif sa.ndim != sb.ndim:
            problem = (f"numbers of dimensions differ: {sa.ndim} in the if branch (shape {sa.shape}), "
                       f"{sb.ndim} in the else branch (shape {sb.shape})")
        elif a.layout() and b.layout() and a.layout() != b.layout():
            problem = f"layouts differ: '{a.layout()}' in the if branch, '{b.layout()}' in the else branch"
        if problem:
            raise OperatorError(
                f"variable '{self.args['variable']}' of {self.args['what'] or 'a per-sample if'} is merged "
                f"from both branches into one batch, but its {problem}. Make both branches produce the "
                "same type and dimensionality (e.g. fn.cast, fn.reshape)",
                operator=self.instance_name, origin=self.origin)


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
