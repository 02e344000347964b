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
import os
import sysconfig
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

    def visit_Call(self, node: ast.Call):
        self.generic_visit(node)
        if isinstance(node.func, ast.Name) and node.func.id in _SKIP_CALLS:
            return node
        # f(a, *b, k=c, **d) -> cond.call(f, a, *b, k=c, **d): user functions are converted when called
        return ast.copy_location(ast.Call(_helper("call"), [node.func, *node.args], node.keywords), node)

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


class _NotConvertible(Exception):
    pass


_compiled: dict = {}  # original code object -> rewritten code object (or None: call as is)
_SKIP_CALLS = {"super", "locals", "globals", "vars", "eval", "exec", "dir", "breakpoint"}  # frame-bound
# Code under these folders (the standard library, installed packages, stoker) is never rewritten.
_LIBRARY_DIRS = tuple({d.rstrip(os.sep) + os.sep for d in (
    os.path.dirname(os.__file__), sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"],
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))))})


def convert(func):
    """``func`` with its ``if``/``and``/``or``/``not``/conditional expressions rewritten to run per
    sample on DataNodes (see :mod:`stoker.pipeline.conditionals`), and the user functions it calls
    converted the same way when called. Functions whose source is not available (lambdas,
    interactive input) are returned unchanged with a warning."""
    try:
        code = _rewritten_code(func)
    except _NotConvertible as e:
        warnings.warn(f"enable_conditionals: {e}; per-sample if statements in it will raise", stacklevel=3)
        return func
    return _bind(func, code)


def converted_call(f, args, kwargs):
    """Call ``f(*args, **kwargs)`` from rewritten code, converting user functions, methods and
    callable objects on the way (as DALI's AutoGraph does); library code runs unchanged."""
    target = f
    try:
        if isinstance(f, types.FunctionType):
            target = _converted(f) or f
        elif isinstance(f, types.MethodType) and isinstance(f.__func__, types.FunctionType):
            conv = _converted(f.__func__)
            target = types.MethodType(conv, f.__self__) if conv else f
        elif isinstance(f, functools.partial) and isinstance(f.func, types.FunctionType):
            conv = _converted(f.func)
            target = functools.partial(conv, *f.args, **f.keywords) if conv else f
        elif not isinstance(f, type) and isinstance(inspect.getattr_static(type(f), "__call__", None),
                                                    types.FunctionType):
            conv = _converted(type(f).__call__)
            target = types.MethodType(conv, f) if conv else f
    except _NotConvertible:
        target = f
    return target(*args, **kwargs)


def _converted(func):
    """The rewritten version of a user function, or None for library code and functions that cannot be."""
    if (getattr(func, "_stoker_conditionals", False) or hasattr(func, "__wrapped__")
            or _HELPER in func.__code__.co_freevars):  # already rewritten (nested in rewritten code)
        return None
    filename = func.__code__.co_filename
    if (filename.startswith("<") or func.__name__ == "<lambda>" or "__class__" in func.__code__.co_freevars
            or func.__code__.co_flags & (inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR)
            or os.path.abspath(filename).startswith(_LIBRARY_DIRS)):
        return None
    code = _rewritten_code(func)
    return None if code is None else _bind(func, code)


def _rewritten_code(func):
    """Parse, rewrite and compile ``func`` once per code object (raises _NotConvertible)."""
    key = func.__code__
    if key in _compiled:
        if _compiled[key] is None:
            raise _NotConvertible(f"cannot convert {func.__qualname__}")
        return _compiled[key]
    try:
        code = _compile(func)
    except _NotConvertible:
        _compiled[key] = None
        raise
    _compiled[key] = code
    return code


def _compile(func):
    try:
        source = textwrap.dedent(inspect.getsource(func))
        tree = ast.parse(source)
    except (OSError, TypeError, SyntaxError, IndentationError) as e:
        raise _NotConvertible(f"cannot read the source of {func.__qualname__} ({e})") from None
    fdef = tree.body[0] if tree.body else None
    if not isinstance(fdef, ast.FunctionDef) or fdef.name != func.__name__:
        raise _NotConvertible(f"{func.__qualname__} is not a plain `def` function")
    in_class = "." in func.__qualname__ and func.__qualname__.split(".")[-2] != "<locals>"
    if in_class and any(isinstance(n, (ast.Name, ast.Attribute)) and _private(getattr(n, "id", None) or n.attr)
                        for n in ast.walk(fdef)):
        raise _NotConvertible(f"{func.__qualname__} uses private (name-mangled) names")
    fdef.decorator_list = []
    filename = inspect.getsourcefile(func) or func.__code__.co_filename
    _Rewriter(filename).visit(fdef)
    # A factory whose parameters are the original free variables keeps closure references as
    # free variables of the rewritten function; the original cells are bound to them in _bind.
    fargs = ast.arguments(posonlyargs=[], args=[ast.arg(n) for n in (*func.__code__.co_freevars, _HELPER)],
                          vararg=None, kwonlyargs=[], kw_defaults=[], kwarg=None, defaults=[])
    factory = ast.FunctionDef(name=f"{_PREFIX}factory__", args=fargs,
                              body=[fdef, ast.Return(ast.Name(fdef.name, ast.Load()))],
                              decorator_list=[], returns=None, type_comment=None)
    if "type_params" in ast.FunctionDef._fields:
        factory.type_params = []
    module = ast.Module([factory], type_ignores=[])
    ast.fix_missing_locations(module)
    ast.increment_lineno(module, func.__code__.co_firstlineno - 1)
    code = compile(module, func.__code__.co_filename, "exec", dont_inherit=True)
    return _const_code(_const_code(code, factory.name), fdef.name)


def _private(name) -> bool:
    return isinstance(name, str) and name.startswith("__") and not name.endswith("__")


def _bind(func, code: types.CodeType):
    """A function running ``code`` with ``func``'s globals, closure cells, defaults and metadata."""
    from stoker.pipeline import conditionals

    cells = dict(zip(func.__code__.co_freevars, func.__closure__ or ()))
    cells[_HELPER] = types.CellType(conditionals)
    closure = tuple(cells[n] for n in code.co_freevars)
    new = types.FunctionType(code, func.__globals__, func.__name__, func.__defaults__, closure or None)
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
