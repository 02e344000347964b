"""The ported DALI examples in their GPU form, as DALI's documentation writes them (mixed decoders,
``.gpu()``, GPU custom operators): each script runs without ``--cpu`` on a machine with a GPU, says
so, and prints the numbers its CPU form prints, within the GPU decoder's rounding."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from test_examples import CASES, EXAMPLES, NEEDS, ROOT, TIMEOUT, _has, _result

# Scripts whose result numbers come from decoded JPEGs: nvJPEG's IDCT and chroma upsampling round
# differently from libjpeg-turbo's, by a level here and there, so their means move by hundredths.
DECODED = {"getting_started.py", "augmentation_gallery.py", "pytorch_training.py", "tf_keras_train.py"}
# Scripts that say which device they ran on, and the line that says the GPU form ran.
GPU_LINE = {"getting_started.py": "device: gpu", "pytorch_training.py": "on cuda"}


_NUMBA_PROBE = ("import numpy as np; from numba import cuda\n"
                "@cuda.jit\ndef k(a):\n    a[0] = 1\n"
                "d = cuda.to_device(np.zeros(1)); k[1, 1](d); assert d.copy_to_host()[0] == 1")


def _numba_cuda_error() -> str | None:
    """Why numba's CUDA target cannot run a one-line kernel here (None when it can): the
    numba_function example's GPU form needs it, and numba releases lag NumPy's."""
    done = subprocess.run([sys.executable, "-c", _NUMBA_PROBE], capture_output=True, text=True, timeout=TIMEOUT)
    return None if done.returncode == 0 else (done.stderr.strip().splitlines() or ["failed"])[-1]


def _run(script: str, cwd: str, *flags: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, os.path.join(EXAMPLES, script), *flags], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=TIMEOUT)


@pytest.mark.gpu
@pytest.mark.parametrize("script", sorted(set(CASES) - {"tf_keras_train.py"}))
def test_example_gpu_form_matches_cpu_form(script, tmp_path):
    if script in NEEDS and not _has(NEEDS[script]):
        pytest.skip(f"needs {NEEDS[script]}")
    if script == "numba_function.py" and (why := _numba_cuda_error()) is not None:
        pytest.skip(f"numba's CUDA target does not run here: {why}")
    gpu = _run(script, str(tmp_path))
    assert gpu.returncode == 0, gpu.stdout + gpu.stderr
    if script in GPU_LINE:
        assert GPU_LINE[script] in gpu.stdout, gpu.stdout
    cpu = _run(script, str(tmp_path), "--cpu")
    assert cpu.returncode == 0, cpu.stdout + cpu.stderr
    ours, theirs = _result(gpu.stdout), _result(cpu.stdout)
    assert len(ours) == len(theirs)
    if script == "pytorch_training.py":  # (a loss after training steps: only its being finite is shared)
        assert all(abs(x) < 1e6 for x in ours)
        return
    tol = 0.5 if script in DECODED else 1e-3
    assert ours == pytest.approx(theirs, abs=tol, rel=1e-5), (ours, theirs)


@pytest.mark.gpu
def test_video_clip_loader_example_decodes_with_nvdec(tmp_path):
    """examples/video_clips.py with --device gpu: readers.video decodes with NVDEC (PyNvVideoCodec)."""
    for module in ("av", "PyNvVideoCodec"):
        if not _has(module):
            pytest.skip(f"needs {module}")
    done = _run("video_clips.py", str(tmp_path), "--clips", "6", "--batch", "2", "--device", "gpu")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "clips: CFHW [(3, 16, 112, 112), (3, 16, 112, 112)]" in done.stdout and "device gpu" in done.stdout
