"""Every script in examples/ runs on the CPU in a subprocess and prints its result line; where
DALI's CPU operators can run the same graph, the script ported back to ``nvidia.dali`` (the
import rename, reversed) prints the same numbers."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(ROOT, "examples")

# script -> (a line it prints, whether DALI can run it, absolute tolerance of the result numbers).
# Decoding and resampling differ from DALI's by rounding only: a few thousandths of a level in a mean.
CASES = {
    "getting_started.py": ("epoch size: 12", True, 0.02),
    "augmentation_gallery.py": ("gaussian_blur", True, 0.02),
    "expressions.py": ("math.sqrt(a)", True, 1e-3),
    "conditionals.py": ("dark+flip", True, 1e-3),
    "data_loading.py": ("parallel == serial: True", True, 1e-3),
    "pytorch_training.py": ("trained 8 steps on cpu", False, 0),
    "custom_operator.py": ("a bad argument is reported as: examples.channel_stats: argument 'scale'", False, 0),
    "numba_function.py": ("as NumPy computes: True", True, 0),
    "tf_keras_train.py": ("trained 8 steps on cpu", False, 0),
}
NEEDS = {"numba_function.py": "numba", "pytorch_training.py": "torch", "tf_keras_train.py": "tensorflow"}
TIMEOUT = 180


def _has(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def _run(path: str, cwd: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, path, "--cpu"], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=TIMEOUT)


def _result(out: str) -> list[float]:
    lines = [line for line in out.splitlines() if line.startswith("result:")]
    assert lines, f"no result line in:\n{out}"
    return [float(x) for x in lines[-1].split()[1:]]


def _to_dali(source: str) -> str:
    """The example as a DALI script: the rename the port made, undone (other stoker imports stay)."""
    source = re.sub(r"^from stoker import ", "from nvidia.dali import ", source, flags=re.M)
    return re.sub(r"^from stoker\.plugin\.numba", "from nvidia.dali.plugin.numba", source, flags=re.M)


def test_the_ported_tutorials_are_there():
    # (examples/ also holds scripts with needs of their own, such as audio files or several
    # processes; these are the ports of DALI's tutorials, which run in seconds on the CPU)
    scripts = {f for f in os.listdir(EXAMPLES) if f.endswith(".py")}
    assert set(CASES) <= scripts


@pytest.mark.parametrize("script", sorted(CASES))
def test_example_runs(script, tmp_path):
    if script in NEEDS and not _has(NEEDS[script]):
        pytest.skip(f"needs {NEEDS[script]}")
    expected, with_dali, tol = CASES[script]
    done = _run(os.path.join(EXAMPLES, script), str(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert expected in done.stdout, done.stdout
    ours = _result(done.stdout)
    if not with_dali or not _has("nvidia.dali"):
        return
    ported = tmp_path / script
    with open(os.path.join(EXAMPLES, script)) as f:
        ported.write_text(_to_dali(f.read()))
    reference = _run(str(ported), str(tmp_path))
    assert reference.returncode == 0, reference.stdout + reference.stderr
    theirs = _result(reference.stdout)
    assert len(ours) == len(theirs)
    assert ours == pytest.approx(theirs, abs=tol, rel=1e-6), (ours, theirs)


def test_video_clip_loader_example_runs(tmp_path):
    """examples/video_clips.py (issue 25's example): generated H.264 clips through readers.video
    into CFHW float clips of 16 frames at 112x112, with their labels."""
    if not _has("av"):
        pytest.skip("needs av")
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run([sys.executable, os.path.join(EXAMPLES, "video_clips.py"), "--clips", "6", "--batch", "2",
                           "--threads", "2"], cwd=str(tmp_path), env=env, capture_output=True, text=True,
                          timeout=TIMEOUT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "clips: CFHW [(3, 16, 112, 112), (3, 16, 112, 112)]" in done.stdout, done.stdout
    assert "device cpu" in done.stdout
