"""stoker keeps GPUs fed: DALI-compatible data loading and augmentation.

A DALI pipeline ports by changing the import prefix ``nvidia.dali`` to ``stoker``::

    from stoker import pipeline_def
    import stoker.fn as fn
    import stoker.types as types
"""

from stoker import types
from stoker.errors import OperatorError, PipelineBuildError, StokerError
from stoker.pipeline.data_node import DataNode
from stoker.pipeline.pipeline import Pipeline, pipeline_def
from stoker.tensors import TensorCPU, TensorListCPU

__version__ = "0.1.0"

__all__ = [
    "DataNode",
    "OperatorError",
    "Pipeline",
    "PipelineBuildError",
    "StokerError",
    "TensorCPU",
    "TensorListCPU",
    "pipeline_def",
    "types",
    "__version__",
]


def __getattr__(name):
    # Submodules that pull in operators load on first use: stoker.fn, stoker.ops, stoker.math.
    if name in ("fn", "ops", "math", "plugin", "dynamic"):
        import importlib

        return importlib.import_module(f"stoker.{name}")
    raise AttributeError(f"module 'stoker' has no attribute {name!r}")
