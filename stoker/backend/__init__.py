"""Device backends. ``cuda`` is imported only when a pipeline has GPU operators.

:func:`ReleaseUnusedMemory` is DALI's ``nvidia.dali.backend.ReleaseUnusedMemory``. The batch and
sample types are here under DALI's ``nvidia.dali.backend`` names too (``TensorListCPU``,
``TensorCPU``, ``TensorListGPU``, ``TensorGPU``), so that ported ``isinstance`` checks and type
hints work; they are stoker's own classes from :mod:`stoker.tensors` and :mod:`stoker.tensors_gpu`.
"""

import sys

from stoker.tensors import TensorCPU, TensorListCPU

# The GPU classes are looked up on first use (module __getattr__ below), so that importing
# stoker.backend for the CPU names never loads the GPU module.
_GPU_NAMES = ("TensorGPU", "TensorListGPU")


def __getattr__(name: str):
    if name in _GPU_NAMES:
        from stoker import tensors_gpu

        return getattr(tensors_gpu, name)
    raise AttributeError(f"module 'stoker.backend' has no attribute {name!r}")


def __dir__():
    return sorted([*globals(), *_GPU_NAMES])


def ReleaseUnusedMemory() -> None:  # noqa: N802 - DALI's name, so that ported code runs unchanged
    """Give cached but unused GPU and pinned host memory back to the driver (see
    :func:`stoker.backend.cuda.release_unused_memory`). Does nothing in a process where stoker
    has not used CUDA (CuPy not imported): there is nothing to release, and it does not import
    CuPy or create a CUDA context to find that out."""
    if "cupy" not in sys.modules:
        return
    from stoker.backend.cuda import release_unused_memory

    release_unused_memory()


release_unused_memory = ReleaseUnusedMemory

__all__ = ["ReleaseUnusedMemory", "TensorCPU", "TensorGPU", "TensorListCPU", "TensorListGPU", "release_unused_memory"]
