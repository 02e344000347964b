"""Makes the ``fn.*`` functions: each records one operator call in the pipeline being defined."""

from __future__ import annotations

from stoker.pipeline.data_node import invoke


def make_fn(op_name: str):
    """The ``fn`` function of operator ``op_name`` (its docstring comes from the schema)."""

    def operator_fn(*inputs, **kwargs):
        if any(_is_input_set_list(x) for x in inputs):
            return _multiple_input_sets(op_name, inputs, kwargs)
        return invoke(op_name, list(inputs), kwargs)

    short = op_name.rsplit(".", 1)[-1]
    operator_fn.__name__ = short
    operator_fn.__qualname__ = short
    operator_fn.__module__ = "stoker.fn" + ("." + op_name.rsplit(".", 1)[0] if "." in op_name else "")
    try:
        from stoker.operators.schema import get_operator

        operator_fn.__doc__ = get_operator(op_name).__doc__
    except AttributeError:
        operator_fn.__doc__ = f"Operator {op_name} (not available in this build)."
    return operator_fn


def _is_input_set_list(x) -> bool:
    # Only a list holding DataNodes is a list of input sets; a list of plain numbers stays a
    # constant input, as before.
    from stoker import types
    from stoker.pipeline.data_node import DataNode

    return (isinstance(x, list) and any(isinstance(y, DataNode) for y in x)
            and all(isinstance(y, (DataNode, types.ScalarConstant)) for y in x))


def _multiple_input_sets(op_name: str, inputs: tuple, kwargs: dict):
    """DALI's "multiple input sets": a positional input given as a list of DataNodes applies the
    operator once per element (other inputs, and all keyword arguments, are shared by every
    call). Returns a list with one result per set for a one-output operator, else one list per
    output (``[[out0, out0'], [out1, out1']]``); a one-element list gives the plain result."""
    from stoker.errors import ArgumentError

    lengths = {len(x) for x in inputs if _is_input_set_list(x)}
    if len(lengths) != 1:
        raise ArgumentError(f"{op_name}: every positional input given as a list of DataNodes (multiple input "
                            f"sets) must have the same length, got lengths {sorted(lengths)}")
    (n,) = lengths
    results = [invoke(op_name, [x[i] if _is_input_set_list(x) else x for x in inputs], dict(kwargs))
               for i in range(n)]
    if n == 1:
        return results[0]
    if not isinstance(results[0], (tuple, list)):
        return results
    return [list(outs) for outs in zip(*results)]


def namespace_getattr(prefix: str):
    """A module ``__getattr__`` that finds operators registered under ``prefix`` (e.g. "readers.")."""

    def __getattr__(name: str):
        from stoker.operators.schema import registered

        if name.startswith("__"):
            raise AttributeError(name)
        full = prefix + name
        ops = registered()
        if full in ops:
            return make_fn(full)
        if any(k.startswith(full + ".") for k in ops):  # a nested namespace: fn.noise, fn.transforms
            import types

            sub = types.ModuleType(f"stoker.fn.{full}")
            sub.__getattr__ = namespace_getattr(full + ".")
            sub.__dir__ = namespace_dir(full + ".", vars(sub))
            return sub
        raise AttributeError(f"stoker.fn has no operator {full!r}")

    return __getattr__


def namespace_dir(prefix: str, module_vars: dict):
    """A module ``__dir__`` listing the module's own names and every operator registered under
    ``prefix`` now (so ``dir(fn)`` shows operators found lazily and those registered late)."""

    def __dir__():
        from stoker.operators.schema import registered

        found = {k[len(prefix):].split(".")[0] for k in registered() if k.startswith(prefix)}
        return sorted(set(module_vars) | {n for n in found if not n.startswith("_")})

    return __dir__
