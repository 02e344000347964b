"""The source rewrite behind ``@pipeline_def(enable_conditionals=True)``.

:func:`convert` parses the pipeline function's source, rewrites control flow
into calls of :mod:`stoker.pipeline.conditionals` and compiles it again with
the original globals, closure cells, defaults, file name and line numbers (so
errors and operator origins still point at the user's lines)::

    if c:                          def __stoker_if_body_1__(x):
        x = f(x)                       x = f(x)
    else:                 ->           return cond.results(locals(), ('x',))
        x = g(x)                   def __stoker_if_else_1__(x): ...
                                   (x,) = cond.if_stmt(c, __stoker_if_body_1__, __stoker_if_else_1__,
                                                       (cond.ld(lambda: x, 'x'),), ('x',), 'the `if` at f.py:3')

``a and b`` becomes ``cond.and_(what, lambda: a, lambda: b)`` (operands stay lazy,
so short-circuiting is kept), ``not a`` ``cond.not_(a, what)`` and ``a if c else b``
``cond.if_exp(c, lambda: a, lambda: b, what)``.
"""

from __future__ import annotations

import ast
import functools
import inspect
import textwrap
import types
import warnings

_HELPER = "__stoker_cond__"
_PREFIX = "__stoker_"
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda, ast.ListComp, ast.SetComp,
           ast.DictComp, ast.GeneratorExp)


def _walk_local(nodes):
    """The nodes of ``nodes`` that belong to the same function scope (not nested defs/lambdas)."""
    stack = list(reversed(nodes))
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, _SCOPES):
            continue
        stack.extend(reversed(list(ast.iter_child_nodes(node))))


def _assigned(nodes) -> set[str]:
    """Names bound by ``nodes`` in their own scope (the variables a branch assigns)."""
    names = set()
    for node in _walk_local(nodes):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name.split(".")[0]) for a in node.names)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
        elif isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
            names.add(node.name)
        elif isinstance(node, ast.MatchMapping) and node.rest:
            names.add(node.rest)
    return {n for n in names if not n.startswith(_PREFIX)}


def _unsupported(nodes) -> str | None:
    """Why an if with these branches cannot become functions (None: it can)."""
    for sub in _walk_local(nodes):
        if isinstance(sub, ast.Return):
            return "a `return`"
        if isinstance(sub, (ast.Yield, ast.YieldFrom, ast.Await)):
            return "a `yield` or `await`"
        if isinstance(sub, (ast.Global, ast.Nonlocal)):
            return "a `global` or `nonlocal` statement"
        if isinstance(sub, (ast.Break, ast.Continue)) and not _in_own_loop(nodes, sub):
            return "a `break` or `continue`"
    return None


def _in_own_loop(nodes, target) -> bool:
    """Whether ``target`` (a break/continue) belongs to a loop inside ``nodes``."""
    for sub in _walk_local(nodes):
        if isinstance(sub, (ast.For, ast.AsyncFor, ast.While)):
            if any(n is target for n in _walk_local(sub.body)):
                return True
    return False


def _helper(attr: str) -> ast.Attribute:
    return ast.Attribute(ast.Name(_HELPER, ast.Load()), attr, ast.Load())


def _call(attr: str, *args) -> ast.Call:
    return ast.Call(_helper(attr), list(args), [])


def _thunk(expr) -> ast.Lambda:
    no_args = ast.arguments(posonlyargs=[], args=[], vararg=None, kwonlyargs=[], kw_defaults=[],
                            kwarg=None, defaults=[])
    return ast.Lambda(no_args, expr)


def _has_walrus(node) -> bool:
    return any(isinstance(n, (ast.NamedExpr, ast.Yield, ast.YieldFrom, ast.Await)) for n in ast.walk(node))


class _Rewriter(ast.NodeTransformer):
    def __init__(self, filename: str):
        self.filename = filename
        self.count = 0

    def _what(self, kind: str, node) -> ast.Constant:
        return ast.Constant(f"the `{kind}` at {self.filename}:{node.lineno}")

    def visit_If(self, node: ast.If):
        self.generic_visit(node)  # inner ifs first
        what = self._what("if", node)
        why = _unsupported(node.body + node.orelse)
        if why:
            node.test = _call("py_cond", node.test, ast.Constant(why), what)
            return node
        self.count += 1
        names = sorted(_assigned(node.body + node.orelse))
        params = ast.arguments(posonlyargs=[], args=[ast.arg(n) for n in names], vararg=None, kwonlyargs=[],
                               kw_defaults=[], kwarg=None, defaults=[])
        names_tuple = ast.Tuple([ast.Constant(n) for n in names], ast.Load())
        ret = ast.Return(_call("results", ast.Call(ast.Name("locals", ast.Load()), [], []), names_tuple))
        fns = []
        for kind, body in (("body", node.body), ("else", node.orelse)):
            name = f"{_PREFIX}if_{kind}_{self.count}__"
            fdef = ast.FunctionDef(name=name, args=params, body=list(body) + [ret], decorator_list=[],
                                   returns=None, type_comment=None)
            if "type_params" in ast.FunctionDef._fields:
                fdef.type_params = []
            fns.append(fdef)
        state = ast.Tuple([_call("ld", _thunk(ast.Name(n, ast.Load())), ast.Constant(n)) for n in names],
                          ast.Load())
        call = _call("if_stmt", node.test, ast.Name(fns[0].name, ast.Load()), ast.Name(fns[1].name, ast.Load()),
                     state, names_tuple, what)
        if names:
            stmt = ast.Assign([ast.Tuple([ast.Name(n, ast.Store()) for n in names], ast.Store())], call)
        else:
            stmt = ast.Expr(call)
        keep = {id(n) for n in ast.walk(node.test)}
        for body in (node.body, node.orelse):
            keep.update(id(n) for stmt_ in body for n in ast.walk(stmt_))
        out = [*fns, stmt]
        for root in out:  # generated code sits on the `if` line (operator origins, tracebacks)
            for n in ast.walk(root):
                if id(n) not in keep and "lineno" in n._attributes:
                    n.lineno = n.end_lineno = node.lineno
                    n.col_offset, n.end_col_offset = node.col_offset, node.col_offset + 2
        return out

    def visit_BoolOp(self, node: ast.BoolOp):
        self.generic_visit(node)
        if _has_walrus(node):
            return node
        kind = "and" if isinstance(node.op, ast.And) else "or"
        return ast.copy_location(
            _call(f"{kind}_", self._what(kind, node), *[_thunk(v) for v in node.values]), node)

    def visit_UnaryOp(self, node: ast.UnaryOp):
        self.generic_visit(node)
        if not isinstance(node.op, ast.Not):
            return node
        return ast.copy_location(_call("not_", node.operand, self._what("not", node)), node)

    def visit_IfExp(self, node: ast.IfExp):
        self.generic_visit(node)
        if _has_walrus(node):
            return node
        return ast.copy_location(
            _call("if_exp", node.test, _thunk(node.body), _thunk(node.orelse), self._what("if", node)), node)


def convert(func):
    """``func`` with its ``if``/``and``/``or``/``not``/conditional expressions rewritten to run per
    sample on DataNodes (see :mod:`stoker.pipeline.conditionals`). Functions whose source is
    not available (lambdas, interactive input) are returned unchanged with a warning."""
    from stoker.pipeline import conditionals

    try:
        source = textwrap.dedent(inspect.getsource(func))
        tree = ast.parse(source)
    except (OSError, TypeError, SyntaxError, IndentationError) as e:
        warnings.warn(f"enable_conditionals: cannot read the source of {func.__qualname__} ({e}); "
                      "per-sample if statements in it will raise", stacklevel=3)
        return func
    fdef = tree.body[0] if tree.body else None
    if not isinstance(fdef, ast.FunctionDef) or fdef.name != func.__name__:
        warnings.warn(f"enable_conditionals: {func.__qualname__} is not a plain `def` function; "
                      "per-sample if statements in it will raise", stacklevel=3)
        return func
    fdef.decorator_list = []
    filename = inspect.getsourcefile(func) or func.__code__.co_filename
    _Rewriter(filename).visit(fdef)
    # A factory whose parameters are the original free variables keeps closure references as
    # free variables of the rewritten function; the original cells are bound to them below.
    freevars = func.__code__.co_freevars
    fargs = ast.arguments(posonlyargs=[], args=[ast.arg(n) for n in (*freevars, _HELPER)], vararg=None,
                          kwonlyargs=[], kw_defaults=[], kwarg=None, defaults=[])
    factory = ast.FunctionDef(name=f"{_PREFIX}factory__", args=fargs,
                              body=[fdef, ast.Return(ast.Name(fdef.name, ast.Load()))],
                              decorator_list=[], returns=None, type_comment=None)
    if "type_params" in ast.FunctionDef._fields:
        factory.type_params = []
    module = ast.Module([factory], type_ignores=[])
    ast.fix_missing_locations(module)
    ast.increment_lineno(module, func.__code__.co_firstlineno - 1)
    code = compile(module, func.__code__.co_filename, "exec", dont_inherit=True)
    factory_code = _const_code(code, factory.name)
    inner = _const_code(factory_code, fdef.name)
    cells = dict(zip(freevars, func.__closure__ or ()))
    cells[_HELPER] = types.CellType(conditionals)
    closure = tuple(cells[n] for n in inner.co_freevars)
    new = types.FunctionType(inner, func.__globals__, func.__name__, func.__defaults__, closure or None)
    new.__kwdefaults__ = func.__kwdefaults__
    functools.update_wrapper(new, func)
    del new.__wrapped__  # inspect.getsource of the result should not re-read the original
    new._stoker_conditionals = True
    return new


def _const_code(code: types.CodeType, name: str) -> types.CodeType:
    for c in code.co_consts:
        if isinstance(c, types.CodeType) and c.co_name == name:
            return c
    raise RuntimeError(f"enable_conditionals: compiled code of {name} not found")  # pragma: no cover


__all__ = ["convert"]
