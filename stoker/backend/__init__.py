"""Device backends. ``cuda`` is imported only when a pipeline has GPU operators.

:func:`ReleaseUnusedMemory` is DALI's ``nvidia.dali.backend.ReleaseUnusedMemory``.
"""

import sys


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
