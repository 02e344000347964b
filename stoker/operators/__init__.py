"""Operator implementations, one module per operator family.

Importing :mod:`stoker.operators` is cheap; :func:`load_all` imports the
operator modules (which register themselves) the first time an operator is
looked up.
"""

from __future__ import annotations

import importlib
import os
import pkgutil

# Modules that are not operator families (no registrations of their own).
_NOT_OPERATORS = {"base", "schema", "gpu_registry"}


def operator_modules() -> list[str]:
    """Every module under stoker/operators/ that may register operators, found on disk:
    adding an operator is adding a file (private ``_x`` and GPU ``gpu_x`` modules are skipped;
    the GPU ones are loaded by ``gpu_registry``)."""
    here = os.path.dirname(os.path.abspath(__file__))
    names = []
    for info in pkgutil.walk_packages([here], prefix=__name__ + "."):
        leaf = info.name.rsplit(".", 1)[-1]
        if info.ispkg or leaf.startswith(("_", "gpu_")) or leaf in _NOT_OPERATORS:
            continue
        names.append(info.name)
    return sorted(names)


_loaded = False


def load_all() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    for mod in operator_modules():
        importlib.import_module(mod)
    from stoker.operators import gpu_registry

    gpu_registry.load_gpu_impls()  # GPU placements and host-preparation steps of the operators
