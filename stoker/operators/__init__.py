"""Operator implementations, one module per operator family.

Importing :mod:`stoker.operators` is cheap; :func:`load_all` imports the
operator modules (which register themselves) the first time an operator is
looked up.
"""

from __future__ import annotations

import importlib

# Modules that register operators. A new operator module is added here.
OPERATOR_MODULES = (
    "stoker.operators.readers.file",
    "stoker.operators.readers.external_source",
    "stoker.operators.decoders.image",
    "stoker.operators.random.generators",
    "stoker.operators.image.resize",
    "stoker.operators.image.crop",
    "stoker.operators.image.crop_mirror_normalize",
    "stoker.operators.image.flip",
    "stoker.operators.image.rotate",
    "stoker.operators.tensor.basic",
    "stoker.operators.math.arithmetic",
    "stoker.operators.transfer",
)

_loaded = False


def load_all() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    for mod in OPERATOR_MODULES:
        try:
            importlib.import_module(mod)
        except ModuleNotFoundError as e:
            if e.name != mod:
                raise
    from stoker.operators import gpu_registry

    gpu_registry.load_gpu_impls()  # GPU placements and host-preparation steps of the operators above
