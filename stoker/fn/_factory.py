"""Makes the ``fn.*`` functions: each records one operator call in the pipeline being defined."""

from __future__ import annotations

from stoker.pipeline.data_node import invoke


def make_fn(op_name: str):
    """The ``fn`` function of operator ``op_name`` (its docstring comes from the schema)."""

    def operator_fn(*inputs, **kwargs):
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
            return sub
        raise AttributeError(f"stoker.fn has no operator {full!r}")

    return __getattr__
