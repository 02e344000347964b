"""Eager functions made from the operator registry: ``ndd.resize``, ``ndd.noise.gaussian`` ..."""

from __future__ import annotations

import functools

from stoker.operators.schema import get_operator, on_register, registered


@functools.cache
def make_function(op_name: str):
    """The eager function of operator ``op_name`` (its docstring comes from the schema)."""
    from stoker.dynamic._invoke import call

    def operator_fn(*inputs, **kwargs):
        return call(op_name, list(inputs), kwargs)

    short = op_name.rsplit(".", 1)[-1]
    operator_fn.__name__ = operator_fn.__qualname__ = short
    operator_fn.__module__ = "stoker.dynamic" + ("." + op_name.rsplit(".", 1)[0] if "." in op_name else "")
    operator_fn.__doc__ = (
        f"Eager ``{op_name}``: runs now on Tensors/Batches (NumPy arrays, torch tensors and lists of "
        "arrays are accepted). Extra keywords: ``device``, ``batch_size`` (operators without inputs), "
        "``rng`` (a stoker.dynamic.random.RNG for random operators).\n\n" + (get_operator(op_name).__doc__ or ""))
    return operator_fn


class Namespace:
    """Operators registered under ``prefix`` ("noise.", "transforms."), as attributes."""

    def __init__(self, prefix: str):
        self._prefix = prefix

    def __getattr__(self, name: str):
        return lookup(self._prefix, name)

    def __dir__(self):
        return sorted({k[len(self._prefix):].split(".")[0] for k in registered() if k.startswith(self._prefix)})

    def __repr__(self) -> str:
        return f"<stoker.dynamic namespace {self._prefix.rstrip('.')}>"


def lookup(prefix: str, name: str):
    """The function of operator ``prefix + name``, or a Namespace when it is a family prefix."""
    if name.startswith("__"):
        raise AttributeError(name)
    full = prefix + name
    ops = registered()
    if full in ops and not full.startswith("_"):
        return make_function(full)
    if any(k.startswith(full + ".") for k in ops):
        return Namespace(full + ".")
    where = f"stoker.dynamic.{prefix}" if prefix else "stoker.dynamic"
    raise AttributeError(f"{where.rstrip('.')} has no operator {name!r}")


def module_getattr(prefix: str):
    """A module ``__getattr__`` resolving operators under ``prefix``."""

    def __getattr__(name: str):
        return lookup(prefix, name)

    return __getattr__


def module_dir(prefix: str, module_vars: dict):
    """A module ``__dir__``: the module's own names and the operators registered under ``prefix``."""

    def __dir__():
        found = {k[len(prefix):].split(".")[0] for k in registered() if k.startswith(prefix)}
        return sorted(set(module_vars) | {n for n in found if not n.startswith("_")})

    return __dir__


def _forget(op_name: str, op_cls) -> None:
    # An operator registered again under the same name (stoker.custom's replace=True) must not be
    # served by the function or the instances made for the class it replaced.
    make_function.cache_clear()
    from stoker.dynamic._invoke import forget

    forget(op_name)


on_register(_forget)
