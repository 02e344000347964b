"""ReleaseUnusedMemory (DALI's nvidia.dali.backend name) in a process without CUDA use: nothing to
release, and it must neither fail nor import CuPy to find that out."""

import subprocess
import sys


def test_without_cuda_use_it_does_nothing_and_imports_nothing():
    code = ("import sys, stoker, stoker.backend as b; b.ReleaseUnusedMemory(); b.release_unused_memory(); "
            "print('cupy' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
