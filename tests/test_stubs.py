"""The committed type stubs of stoker.fn and stoker.ops are what the operator schemas give, and a
type checker sees every operator through them (``python -m stoker._stubs`` writes them again)."""

import os
import subprocess
import sys

import pytest

from stoker import _stubs

ROOT = os.path.dirname(_stubs.HERE)


def test_committed_stubs_match_the_schemas():
    stale = []
    for rel, text in _stubs.stubs().items():
        path = os.path.join(_stubs.HERE, rel)
        if not os.path.exists(path) or open(path, encoding="utf-8").read() != text:
            stale.append(rel)
    assert not stale, f"stale stubs {stale}: run `python -m stoker._stubs`"


def test_every_operator_has_a_stub():
    text = "".join(_stubs.stubs().values())
    for name in _stubs._schemas():
        assert f"def {name.rsplit('.', 1)[-1]}(" in text, name


def test_a_type_checker_sees_generated_operators(tmp_path):
    pytest.importorskip("mypy")
    script = tmp_path / "uses.py"
    script.write_text("import stoker.fn as fn\nimport stoker.ops as ops\n"
                      "a = fn.readers.tfrecord(path=['a'], index_path=['b'], features={})\n"
                      "b = fn.transforms.rotation(angle=3.0)\nc = fn.noise.gaussian(b)\n"
                      "d = ops.readers.COCO(file_root='x')\ne = ops.Resize(resize_x=3)\n"
                      "fn.not_an_operator(1)\n")
    run = subprocess.run([sys.executable, "-m", "mypy", "--ignore-missing-imports", "--follow-imports=silent",
                          "--no-incremental", str(script)], capture_output=True, text=True, cwd=ROOT)
    errors = [line for line in run.stdout.splitlines() if ": error:" in line]
    assert len(errors) == 1 and "not_an_operator" in errors[0], run.stdout
