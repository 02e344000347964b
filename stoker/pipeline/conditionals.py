"""Per-sample conditionals: ``if``/``elif``/``else``, ``and``, ``or``, ``not`` and ``a if c else b``
on DataNodes, as DALI's ``@pipeline_def(enable_conditionals=True)``.

How it works
------------
With ``enable_conditionals=True`` the pipeline function's source is rewritten
(:mod:`stoker.pipeline.conditionals_ast`): every ``if`` becomes two local functions,
one per branch, that take and return the variables the branches assign, and a
call of :func:`if_stmt`. ``and``/``or``/``not``/``x if c else y`` become calls of
:func:`and_`, :func:`or_`, :func:`not_`, :func:`if_exp`, and every call ``f(...)`` a call of
:func:`call`, which rewrites the user functions it reaches in the same way.

At trace time :func:`if_stmt` looks at the condition. A plain Python value keeps
Python's behaviour (only one branch runs). A DataNode (a per-sample predicate)
traces *both* branches, each inside a :class:`Scope`: while a branch is traced,
every operator that consumes a batch made outside the branch gets instead the
``_conditional.split`` of it (the samples whose predicate selects this branch,
in order), so the branch's operators run on a sub-batch. Afterwards each
variable the branches assigned is ``_conditional.merge``\\ d back into one batch in
the original sample order. Python numbers assigned in a branch become constant
batches; a variable assigned on only one path becomes an :class:`Undefined` that
raises a clear error where it is used (DALI rejects it the same way).

Operators without inputs inside a branch (``fn.random.coin_flip()``) run for the
branch's samples only; the executor asks :func:`scope_sample_ids` which samples
those are, and every per-sample random stream is keyed by the sample's index in
the whole batch, so a sample's random values do not depend on which other
samples took the branch, nor on ``num_threads``.

DALI's direct calls ``fn._conditional.split(x, predicate=p)`` (two parts) and
``fn._conditional.merge(t, f, predicate=p)`` need no rewrite and no scope: the parts are batches
of their own size (:func:`_direct_call`); an operator that mixes a part with another batch is
refused when it is recorded (:func:`_check_one_part`).

Limits: the condition must be a CPU batch (the data may be on the GPU:
:mod:`stoker.operators.tensor.gpu_conditional` splits and merges device batches); an ``if`` whose
branches contain ``return``, ``break``/``continue`` (of an outer loop), ``yield``,
``global`` or ``nonlocal`` stays a plain Python ``if`` (a per-sample condition there
raises an error saying so). Functions the pipeline calls are rewritten when called
(user code only: library code, lambdas, decorated wrappers, generators, methods using
zero-argument ``super()`` or private names run unchanged; library code such as
``stoker.auto_aug`` calls :func:`if_stmt` directly).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from stoker.errors import PipelineBuildError
from stoker.pipeline.data_node import DataNode, constant_node, invoke

_scope_ids = itertools.count(1)
_tls = threading.local()
_SPLIT, _MERGE, _MERGE_CASES = "_conditional.split", "_conditional.merge", "_conditional.merge_cases"


class UndefinedVariableError(PipelineBuildError, NameError):
    """A variable used after an ``if`` that assigned it on one path only."""


class Undefined:
    """The value of a variable that has no value on some path of an ``if``.

    Any use (as an operator input, an output, in arithmetic, as a condition)
    raises :class:`UndefinedVariableError` naming the variable and the ``if``.
    """

    def __init__(self, name: str, message: str):
        self._name = name
        self._message = message

    def _fail(self, *args, **kwargs):
        raise UndefinedVariableError(self._message)

    def __repr__(self) -> str:
        return f"<undefined variable {self._name!r}: {self._message}>"

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        self._fail()

    __bool__ = __array__ = __iter__ = __len__ = __call__ = __getitem__ = _fail
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __rtruediv__ = _fail
    __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = __pow__ = __rpow__ = __neg__ = __invert__ = _fail
    __and__ = __rand__ = __or__ = __ror__ = __xor__ = __rxor__ = __lt__ = __le__ = __gt__ = __ge__ = _fail


def _unbound(name: str) -> Undefined:
    return Undefined(name, f"variable '{name}' is used before it is assigned")


@dataclass(eq=False)
class Scope:
    """One branch of one per-sample conditional: the samples of ``parent`` whose
    ``predicate`` (a DataNode of the parent scope) equals ``branch``. In one of the ``cases``
    of an n-way :func:`select_stmt`, ``branch`` is the case number and ``predicate`` the index."""

    parent: Scope | None
    predicate: DataNode
    branch: bool | int
    what: str  # "the `if` at file:line", for messages
    cases: int = 0  # 0: one side of a two-way if
    id: int = field(default_factory=lambda: next(_scope_ids))
    splits: dict = field(default_factory=dict)  # (node id, output) -> the split DataNode

    def split_args(self) -> dict:
        """The arguments of the ``_conditional.split`` that brings a batch into this scope."""
        if self.cases:
            return {"cases": self.cases, "case": self.branch, "what": self.what}
        return {"branch": self.branch, "what": self.what}

    def encloses(self, other: Scope | None) -> bool:
        """True if ``other`` is this scope or one of its ancestors (None is the whole batch)."""
        s = self
        while s is not None:
            if s is other:
                return True
            s = s.parent
        return other is None


def current_scope() -> Scope | None:
    """The branch being traced on this thread (None outside per-sample conditionals)."""
    stack = getattr(_tls, "stack", None)
    return stack[-1] if stack else None


class _in_scope:
    def __init__(self, scope: Scope | None):
        self.scope = scope

    def __enter__(self):
        if not hasattr(_tls, "stack"):
            _tls.stack = []
        _tls.stack.append(self.scope)

    def __exit__(self, *exc):
        _tls.stack.pop()


def _scope_of(node: DataNode) -> Scope | None:
    return node.source.scope


def _check_cpu(node: DataNode, what: str) -> None:
    if node.device != "cpu":
        raise PipelineBuildError(
            f"{node!r} is a GPU batch used as the condition of {what}: a per-sample condition must be a "
            "CPU batch (the data it splits may be on the GPU). Compute it on the CPU, or bring it back "
            "with .cpu()")


def bring(node: DataNode, scope: Scope | None) -> DataNode:
    """``node`` as seen inside ``scope``: split down from the scope it was made in (cached)."""
    origin = _scope_of(node)
    if origin is scope:
        return node
    if scope is None or not scope.encloses(origin):
        made = origin.what if origin is not None else "outside any if"
        where = scope.what if scope is not None else "after it"
        raise PipelineBuildError(
            f"{node!r} was produced inside a branch of {made} and used {where} without being merged: "
            "assign it to a variable in both branches (or before the if) so it can be merged per sample")
    key = (node.source.id, node.index)
    got = scope.splits.get(key)
    if got is None:
        above = bring(node, scope.parent)
        with _in_scope(scope), _internal():
            got = invoke(_SPLIT, [above, scope.predicate], scope.split_args())
        scope.splits[key] = got
    return got


def scoped_inputs(op_name: str, inputs: list, arg_nodes: dict):
    """Called by ``invoke`` for every operator: inside a branch, inputs from outside are split
    into it, and an operator with no positional input waits for the branch's predicate (it runs
    for the branch's samples only). Returns (inputs, arg_nodes, scope, control_inputs)."""
    scope = current_scope()
    if op_name in (_SPLIT, _MERGE) and not getattr(_tls, "internal", 0):
        return _direct_call(op_name, inputs, arg_nodes, scope)
    if op_name not in (_SPLIT, _MERGE, _MERGE_CASES):
        _check_one_part(op_name, [*inputs, *arg_nodes.values()])
    if scope is None or op_name in (_SPLIT, _MERGE, _MERGE_CASES):
        return inputs, arg_nodes, scope, []
    inputs = [bring(x, scope) for x in inputs]
    arg_nodes = {k: bring(v, scope) for k, v in arg_nodes.items()}
    return inputs, arg_nodes, scope, ([] if inputs else [scope.predicate])


def _direct_call(op_name: str, inputs: list, arg_nodes: dict, scope: Scope | None):
    """DALI's direct ``_conditional.split(x, predicate=p)`` / ``merge(t, f, predicate=p)``: the
    predicate (required, a batch) becomes the last positional input, the form the operators run
    (as an argument input it would have to match the parts' smaller batch size). No scope is
    made: as in DALI, the parts are batches of their own size, used by any operator and checked
    for sizes when the graph runs. Inside a per-sample if, a split's inputs from outside the
    branch are split into it first, as every operator's are."""
    from stoker.errors import arg_error

    want = 1 if op_name == _SPLIT else 2
    pred = arg_nodes.get("predicate")
    if len(inputs) != want:
        raise arg_error(op_name, "predicate", f"takes {want} positional input{'s' if want > 1 else ''} and the "
                        f"predicate as a keyword argument (predicate=...), got {len(inputs)} positional inputs")
    if pred is None:
        raise arg_error(op_name, "predicate", "is required and must be a batch of per-sample boolean scalars "
                        "(a DataNode, e.g. a comparison or fn.random.coin_flip()), as DALI requires")
    rest = {k: v for k, v in arg_nodes.items() if k != "predicate"}
    if rest:
        raise arg_error(op_name, next(iter(rest)), "is not a per-sample argument")
    nodes = [*inputs, pred]
    if scope is not None and op_name == _SPLIT:
        nodes = [bring(x, scope) for x in nodes]
    if op_name == _SPLIT:
        _check_one_part(op_name, nodes)
    return nodes, {}, scope, []


class _internal:
    """While active, ``_conditional.split``/``merge`` calls are a per-sample if's own (its forms)."""

    def __enter__(self):
        _tls.internal = getattr(_tls, "internal", 0) + 1

    def __exit__(self, *exc):
        _tls.internal -= 1


def _part(node: DataNode):
    """Which part of the batch ``node`` holds, as far as direct splits go: None for the whole
    batch (or a per-sample if's branch), else ``(predicate, branch, part of the split input)``
    for an output of ``_conditional.split(x, predicate=p)`` and what is computed from it (two
    splits by one predicate give the same part). Kept on the operator node once computed."""
    src = node.source
    cached = getattr(src, "_direct_parts", None)
    if cached is None:
        if src.op_name == _SPLIT and len(src.inputs) == 2 and src.args.get("branch") is None \
                and not src.args.get("cases"):
            x, pred = src.inputs
            cached = [((pred.source.id, pred.index), k == 0, _part(x)) for k in range(2)]
        elif src.op_name in (_MERGE, _MERGE_CASES):
            cached = [_part(src.inputs[-1])] * len(src.outputs or [0])
        elif src.op_name == _SPLIT:
            cached = [_part(src.inputs[0])]
        else:
            parts = {_part(x) for x in [*src.inputs, *src.arg_inputs.values()]}
            cached = [parts.pop() if len(parts) == 1 else None] * max(len(src.outputs), 1)
        src._direct_parts = cached
    return cached[node.index] if node.index < len(cached) else None


def _describe_part(part) -> str:
    if part is None:
        return "the whole batch"
    return f"the {'true' if part[1] else 'false'} part of a _conditional.split"


def _check_one_part(op_name: str, nodes: list) -> None:
    """An operator's inputs must be one part of the batch (DALI: one batch size per operator)."""
    parts = [_part(x) for x in nodes if isinstance(x, DataNode)]
    if len(set(parts)) > 1:
        a, b = parts[0], next(p for p in parts if p != parts[0])
        raise PipelineBuildError(
            f"{op_name}: its inputs hold different samples of the batch ({_describe_part(a)} and "
            f"{_describe_part(b)}), so their batch sizes differ. Split every input with the same "
            "predicate, or put the parts back together with fn._conditional.merge first")


def scope_sample_ids(scope: Scope, it) -> list[int]:
    """The indices in the whole batch (plus the iteration's refill offset) of the samples that
    run in ``scope`` in iteration ``it`` (an executor Iteration); cached in ``it.scopes``."""
    from stoker.operators.tensor.conditional import branch_labels

    ids = it.scopes.get(scope.id)
    if ids is None:
        pred_node = scope.predicate
        pred = it.values[(pred_node.source.id, pred_node.index)]
        if scope.parent is None:
            # (an array: NumPy reads a range one element at a time)
            parent = np.arange(it.offset, it.offset + len(pred), dtype=np.int64)
        else:
            parent = scope_sample_ids(scope.parent, it)
        labels = branch_labels(pred, scope.cases, scope.what, _SPLIT, pred_node.source.origin)
        ids = np.asarray(parent, np.int64)[labels == scope.branch].tolist()
        it.scopes[scope.id] = ids
    return ids


# --- runtime of the rewritten code ---------------------------------------------------

def ld(thunk: Callable, name: str):
    """The current value of a variable, or an :class:`Undefined` if it is not bound yet."""
    try:
        return thunk()
    except NameError:
        return _unbound(name)


def results(local_vars: dict, names: Sequence[str]) -> tuple:
    """The values a branch function hands back (its ``locals()``; deleted names are undefined)."""
    return tuple(local_vars[n] if n in local_vars else _unbound(n) for n in names)


def call(func, /, *args, **kwargs):
    """A call in rewritten code: user functions it reaches are converted too (see conditionals_ast)."""
    from stoker.pipeline.conditionals_ast import converted_call

    return converted_call(func, args, kwargs)


def py_cond(value, reason: str, what: str):
    """The condition of an ``if`` that could not be rewritten: only plain Python values."""
    if isinstance(value, DataNode):
        raise PipelineBuildError(
            f"{what} has a per-sample condition ({value!r}), but its branches contain {reason}, which "
            "stoker cannot run per sample. Assign results to variables and move the "
            f"{reason} after the if")
    return value


def _new_scopes(cond: DataNode, what: str) -> tuple[Scope, Scope, DataNode]:
    parent = current_scope()
    pred = bring(cond, parent)
    _check_cpu(pred, what)
    return Scope(parent, pred, True, what), Scope(parent, pred, False, what), pred


def if_stmt(cond, body: Callable, orelse: Callable, state: tuple, names: Sequence[str], what: str) -> tuple:
    """Run an ``if`` statement: ``body(*state)`` / ``orelse(*state)`` return the new values of
    ``names`` (the variables the branches assign; ``state`` holds their values before).

    A DataNode condition traces both branches on their sub-batches and merges every
    variable per sample; anything else is an ordinary Python ``if``.
    """
    if not isinstance(cond, DataNode):
        return body(*state) if cond else orelse(*state)
    t_scope, f_scope, pred = _new_scopes(cond, what)
    with _in_scope(t_scope):
        on_true = body(*state)
    with _in_scope(f_scope):
        on_false = orelse(*state)
    return tuple(merge_value(name, a, b, t_scope, f_scope, pred)
                 for name, a, b in zip(names, on_true, on_false))


def if_exp(cond, on_true: Callable, on_false: Callable, what: str):
    """``on_true() if cond else on_false()``, per sample when ``cond`` is a DataNode."""
    if not isinstance(cond, DataNode):
        return on_true() if cond else on_false()
    t_scope, f_scope, pred = _new_scopes(cond, what)
    with _in_scope(t_scope):
        a = on_true()
    with _in_scope(f_scope):
        b = on_false()
    return merge_value("<conditional expression>", a, b, t_scope, f_scope, pred)


def select_stmt(index, branches: Sequence[Callable], state: tuple, names: Sequence[str], what: str) -> tuple:
    """An n-way per-sample choice: each sample goes through ``branches[index]`` (the index clamped
    to the cases, see :func:`stoker.operators.tensor.conditional.case_indices`); every branch is
    traced on its sub-batch and each variable of ``names`` is merged once, in one step, whatever
    the number of branches (a tree of two-way ifs merges and copies once per level).

    ``branches[k](*state)`` returns the new values of ``names``. A plain Python index runs one branch.
    """
    if not branches:
        raise PipelineBuildError(f"{what}: no branches to select from")
    if not isinstance(index, DataNode):
        return branches[min(max(int(np.ceil(index)), 0), len(branches) - 1)](*state)
    if len(branches) == 1:
        return branches[0](*state)
    parent = current_scope()
    pred = bring(index, parent)
    _check_cpu(pred, what)
    scopes = [Scope(parent, pred, k, what, cases=len(branches)) for k in range(len(branches))]
    outs = []
    for scope, branch in zip(scopes, branches):
        with _in_scope(scope):
            outs.append(branch(*state))
    return tuple(_merge_values(name, [out[i] for out in outs], scopes, pred) for i, name in enumerate(names))


def not_(value, what: str = "`not`"):
    """``not value``: a per-sample boolean DataNode for a DataNode, Python's ``not`` otherwise."""
    if isinstance(value, DataNode):
        return invoke("_conditional.not", [value], {"what": what})
    return not value


def and_(what: str, *thunks: Callable):
    """``a and b and ...`` (operands as thunks): short-circuits per sample for DataNodes."""
    return _logical(True, what, thunks)


def or_(what: str, *thunks: Callable):
    """``a or b or ...`` (operands as thunks): short-circuits per sample for DataNodes."""
    return _logical(False, what, thunks)


def _logical(is_and: bool, what: str, thunks: Sequence[Callable]):
    value = thunks[0]()
    rest = thunks[1:]
    while rest and not isinstance(value, DataNode):
        if bool(value) != is_and:  # Python short circuit: `and` stops at a false value
            return value
        value, rest = rest[0](), rest[1:]
    if not rest:
        return value
    pred = invoke("_conditional.to_bool", [value], {"what": what})
    t_scope, f_scope = Scope(current_scope(), pred, True, what), Scope(current_scope(), pred, False, what)
    # `a and b`: b is evaluated only for samples where a is true; elsewhere the result is a (false).
    go_on, stop = (t_scope, f_scope) if is_and else (f_scope, t_scope)
    with _in_scope(go_on):
        other = _as_bool(_logical(is_and, what, rest), what)
    decided = bring(pred, stop)
    a, b = (other, decided) if is_and else (decided, other)
    return merge_value("<logical expression>", a, b, t_scope, f_scope, pred)


def _as_bool(value, what: str) -> DataNode:
    if isinstance(value, DataNode):
        return invoke("_conditional.to_bool", [value], {"what": what})
    return constant_node(np.array(bool(value)))


# --- merging branch results ------------------------------------------------------------

def _is_number_like(v) -> bool:
    return isinstance(v, (bool, int, float, np.bool_, np.number, np.ndarray))


def _same(a, b) -> bool:
    if a is b:
        return True
    if isinstance(a, DataNode) or isinstance(b, DataNode) or type(a) is not type(b):
        return False
    try:
        if isinstance(a, np.ndarray):
            return a.shape == b.shape and a.dtype == b.dtype and bool(np.array_equal(a, b))
        return bool(a == b)
    except Exception:  # noqa: BLE001 - objects without a usable ==: treat as different
        return False


def merge_value(name: str, a, b, t_scope: Scope, f_scope: Scope, pred: DataNode):
    """The value of variable ``name`` after a per-sample if: ``a`` from the if branch, ``b`` from
    the else branch. DataNodes (and numbers, as constants) are merged per sample; lists, tuples
    and dicts element by element; equal Python values are kept."""
    return _merge_values(name, [a, b], [t_scope, f_scope], pred)


def _branch_name(scope: Scope) -> str:
    if scope.cases:
        return f"case {scope.branch}"
    return "if" if scope.branch else "else"


def _merge_values(name: str, values: list, scopes: list[Scope], pred: DataNode):
    """:func:`merge_value` for the branches of an if (``[if, else]``) or the cases of a select."""
    what = scopes[0].what
    undefined = [isinstance(v, Undefined) for v in values]
    if all(undefined):
        return values[0]
    if any(undefined):
        missing = _branch_name(scopes[undefined.index(True)])
        where = "one branch" if len(values) == 2 else "some cases"
        return Undefined(name, f"variable '{name}' is assigned in only {where} of {what} (the per-sample "
                               f"condition): it must also be assigned in the `{missing}` branch (or before "
                               "the if) to be used after it")
    if all(_same(values[0], v) for v in values[1:]):
        return values[0]
    mergeable = [isinstance(x, DataNode) or _is_number_like(x) for x in values]
    if any(isinstance(v, DataNode) for v in values) and not all(mergeable):
        other = type(values[mergeable.index(False)]).__name__
        raise PipelineBuildError(
            f"variable '{name}' is a batch in one branch of {what} and a {other} in another: all "
            "branches must give batches (or numbers) to merge per sample")
    if all(mergeable):
        nodes = [_node_in(v, sc) for v, sc in zip(values, scopes)]
        if len({x.device for x in nodes}) > 1:  # (a number assigned in one branch, a GPU batch in another)
            nodes = [_on_gpu(x, sc) for x, sc in zip(nodes, scopes)]
        with _in_scope(scopes[0].parent), _internal():
            if scopes[0].cases:
                return invoke(_MERGE_CASES, [*nodes, pred], {"variable": name, "what": what})
            return invoke(_MERGE, [*nodes, pred], {"variable": name, "what": what})
    first = values[0]
    if isinstance(first, (list, tuple)) and all(type(v) is type(first) and len(v) == len(first) for v in values):
        return type(first)(_merge_values(f"{name}[{i}]", list(items), scopes, pred)
                           for i, items in enumerate(zip(*values)))
    if isinstance(first, dict) and all(isinstance(v, dict) and v.keys() == first.keys() for v in values):
        return {k: _merge_values(f"{name}[{k!r}]", [v[k] for v in values], scopes, pred) for k in first}
    shown = " and ".join(repr(v) for v in values) if len(values) == 2 else ", ".join(repr(v) for v in values)
    raise PipelineBuildError(
        f"variable '{name}' has different Python values in the branches of {what} ({shown}): "
        "with a per-sample condition only batches and numbers can differ between the branches")


def _on_gpu(node: DataNode, scope: Scope) -> DataNode:
    if node.device == "gpu":
        return node
    with _in_scope(scope):
        return node.gpu()


def _node_in(value, scope: Scope) -> DataNode:
    if isinstance(value, DataNode):
        return bring(value, scope)
    with _in_scope(scope):
        return constant_node(value)
