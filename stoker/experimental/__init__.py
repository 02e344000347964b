"""DALI's ``nvidia.dali.experimental`` names that stoker provides.

``stoker.experimental.dynamic`` is :mod:`stoker.dynamic` (DALI keeps its dynamic mode under
``experimental``; stoker's is stable), so ``import nvidia.dali.experimental.dynamic as ndd`` ports
by renaming the prefix.
"""

import importlib


def __getattr__(name: str):
    # Loaded on first use, so that importing stoker.experimental costs nothing extra.
    if name == "dynamic":
        return importlib.import_module("stoker.experimental.dynamic")
    raise AttributeError(f"module 'stoker.experimental' has no attribute {name!r}")
