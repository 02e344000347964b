"""Loading a user's pipeline file for ``stoker show`` and ``stoker graph``.

The convention: the file defines a function decorated with ``@pipeline_def`` that takes either
no arguments or one argument, the data root (``--data DIR`` on the command line). If the file
has exactly one such function it is used; otherwise ``--function NAME`` picks one.
"""

from __future__ import annotations

import importlib.util
import inspect
import os
import sys
from dataclasses import dataclass


class CLIError(Exception):
    """A problem to report to the user in one message, without a traceback."""


@dataclass
class Loaded:
    """A traced (not yet built) pipeline and where it came from."""

    pipe: object  # stoker.Pipeline
    function: str
    path: str


def load_module(path: str):
    """Import the Python file at ``path`` as a fresh module (its folder goes on sys.path, so its
    own imports of neighbouring files work)."""
    if not os.path.isfile(path):
        raise CLIError(f"{path}: no such file")
    folder = os.path.dirname(os.path.abspath(path))
    if folder not in sys.path:
        sys.path.insert(0, folder)
    name = "_stoker_user_" + "".join(c if c.isalnum() else "_" for c in os.path.splitext(os.path.basename(path))[0])
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise CLIError(f"{path}: not a Python file that can be imported")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look the module up by name
    try:
        spec.loader.exec_module(module)
    except SyntaxError as e:
        raise CLIError(f"{path}:{e.lineno}: syntax error: {e.msg}") from None
    except Exception as e:
        raise CLIError(f"{path}: importing it raised {type(e).__name__}: {e}{_user_line(e, path)}") from None
    return module


def _user_line(exc: BaseException, path: str) -> str:
    """" (at PATH:LINE)" for the deepest frame of the traceback inside the user's file."""
    tb, line = exc.__traceback__, None
    target = os.path.abspath(path)
    while tb is not None:
        if os.path.abspath(tb.tb_frame.f_code.co_filename) == target:
            line = tb.tb_lineno
        tb = tb.tb_next
    return f" (at {path}:{line})" if line else ""


def find_pipeline_function(module, path: str, name: str | None = None):
    """The ``@pipeline_def`` function of ``module`` (the one named ``name`` if given)."""
    if name:
        fn = getattr(module, name, None)
        if fn is None:
            raise CLIError(f"{path}: no function named {name!r}")
        if not callable(fn):
            raise CLIError(f"{path}: {name!r} is not a function")
        return fn
    # Only functions defined in this file: one imported from elsewhere is not the user's pipeline.
    found = [v for k, v in vars(module).items()
             if callable(v) and getattr(v, "_is_pipeline_def", False)
             and getattr(v, "__module__", None) == module.__name__]
    if not found:
        raise CLIError(f"{path}: no function decorated with @pipeline_def; decorate one, or name it with --function")
    if len(found) > 1:
        names = ", ".join(sorted(f.__name__ for f in found))
        raise CLIError(f"{path}: several @pipeline_def functions ({names}); pick one with --function NAME")
    return found[0]


def _call_args(fn, path: str, data: str | None) -> list:
    """Positional arguments for the user's function: none, or the data root."""
    sig = inspect.signature(getattr(fn, "__wrapped__", fn))
    params = [p for p in sig.parameters.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    required = [p for p in params if p.default is p.empty]
    if len(required) > 1:
        raise CLIError(f"{path}: {fn.__name__} takes {len(required)} arguments "
                       f"({', '.join(p.name for p in required)}); stoker can pass at most one, the data root (--data)")
    if data is not None:
        if not params:
            raise CLIError(f"{path}: --data was given but {fn.__name__}() takes no arguments")
        if not os.path.exists(data):
            raise CLIError(f"--data {data}: no such file or folder")
        return [data]
    if required:
        raise CLIError(f"{path}: {fn.__name__}({required[0].name}) needs the data root: pass --data DIR")
    return []


def gpu_nodes(pipe) -> list:
    """The traced operators of ``pipe`` placed on the GPU ("gpu" or "mixed")."""
    return [n for n in walk(pipe) if n.device in ("gpu", "mixed")]


def walk(pipe) -> list:
    """The traced operators reachable from ``pipe``'s outputs (and ``preserve=True`` ones), inputs
    before the operators that use them: the same set :class:`stoker.pipeline.graph.Graph` builds,
    without instantiating the operators (so drawing a GPU pipeline needs no GPU)."""
    order, seen = [], set()

    def visit(node):
        if node.id in seen:
            return
        seen.add(node.id)
        for x in [*node.inputs, *node.arg_inputs.values(), *node.control_inputs]:
            visit(x.source)
        order.append(node)

    for out in pipe._outputs or []:
        visit(out.source)
    for node in pipe._recorded:
        if node.args.get("preserve"):
            visit(node)
    return order


def load_pipeline(path: str, function: str | None = None, data: str | None = None, device_id=None,
                  **pipeline_kwargs) -> Loaded:
    """Import ``path``, find its pipeline function and call it (tracing the graph; not built)."""
    from stoker import Pipeline
    from stoker.errors import StokerError

    module = load_module(path)
    fn = find_pipeline_function(module, path, function)
    args = _call_args(fn, path, data)
    try:
        if getattr(fn, "_is_pipeline_def", False):
            pipe = fn(*args, device_id=device_id, **pipeline_kwargs)
        else:
            pipe = fn(*args)
    except StokerError as e:
        raise CLIError(f"{path}: defining the pipeline {fn.__name__} failed: {e}") from None
    except Exception as e:
        raise CLIError(f"{path}: calling {fn.__name__} raised {type(e).__name__}: {e}{_user_line(e, path)}") from None
    if not isinstance(pipe, Pipeline):
        raise CLIError(f"{path}: {fn.__name__} is not a @pipeline_def function and did not return a Pipeline "
                       f"(got {type(pipe).__name__})")
    if pipe._outputs is None:
        # a Pipeline subclass or one filled with set_outputs() later: trace define_graph() now
        with pipe:
            outs = pipe.define_graph()
        pipe.set_outputs(*(outs if isinstance(outs, (list, tuple)) else [outs]))
    return Loaded(pipe, fn.__name__, path)
