"""The committed type stubs of stoker.fn, stoker.ops and stoker.dynamic are what the operator schemas
give, and a type checker sees every operator through them (``python -m stoker._stubs`` writes them again)."""

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


def _mypy_errors(tmp_path, source: str) -> tuple[list[str], str]:
    script = tmp_path / "uses.py"
    script.write_text(source)
    run = subprocess.run([sys.executable, "-m", "mypy", "--ignore-missing-imports", "--follow-imports=silent",
                          "--no-incremental", str(script)], capture_output=True, text=True, cwd=ROOT)
    return [line for line in run.stdout.splitlines() if ": error:" in line], run.stdout


def test_the_dynamic_stubs_cover_the_eager_namespaces():
    files = _stubs.stubs()
    assert {"dynamic/__init__.pyi", "dynamic/decoders.pyi", "dynamic/random.pyi", "dynamic/readers.pyi"} <= set(files)
    import stoker.dynamic as ndd

    for name in ndd.__all__:  # the package's own names are declared, not only its operators
        assert f"import {name} as {name}\n" in files["dynamic/__init__.pyi"], name
    assert "class RNG:" in files["dynamic/random.pyi"]
    assert "class File(ReaderObject):" in files["dynamic/readers.pyi"]


def test_a_type_checker_sees_generated_operators(tmp_path):
    pytest.importorskip("mypy")
    errors, out = _mypy_errors(tmp_path, (
        "import stoker.fn as fn\nimport stoker.ops as ops\n"
        "a = fn.readers.tfrecord(path=['a'], index_path=['b'], features={})\n"
        "b = fn.transforms.rotation(angle=3.0)\nc = fn.noise.gaussian(b)\n"
        "d = ops.readers.COCO(file_root='x')\ne = ops.Resize(resize_x=3)\n"
        "fn.not_an_operator(1)\n"))
    assert len(errors) == 1 and "not_an_operator" in errors[0], out


def test_a_type_checker_sees_eager_operators_and_their_results(tmp_path):
    pytest.importorskip("mypy")
    errors, out = _mypy_errors(tmp_path, (
        "import numpy as np\nimport stoker.dynamic as ndd\n"
        "img = ndd.as_tensor(np.zeros((4, 4, 3), np.uint8), layout='HWC')\n"
        "t: ndd.Tensor = ndd.flip(img, horizontal=1)\n"  # Tensor in, Tensor out
        "b: ndd.Batch = ndd.flip(ndd.as_batch([img, img]), horizontal=1)\n"  # a Batch in: a Batch
        "rng = ndd.random.RNG(seed=7)\n"
        "angles: ndd.Batch = ndd.random.uniform(range=(-10, 10), batch_size=2, rng=rng)\n"
        "r: ndd.Batch = ndd.rotate(img, angle=angles)\n"  # a per-sample argument: a Batch
        "n: ndd.Tensor = ndd.noise.gaussian(img, stddev=2.0)\n"
        "d: ndd.Tensor = ndd.decoders.image(img)\n"
        "reader = ndd.readers.File(file_root='x', random_shuffle=True)\n"
        "p = b.torch(pad=True)\nf = ndd.float32\nndd.set_num_threads(2)\n"
        "ndd.flip(img, horizontall=1)\n"
        "ndd.not_an_operator(1)\n"))
    # only the misspelt argument (line 15: mypy names it, then lists the overloads) and the unknown operator
    assert {int(e.split(":")[1]) for e in errors} == {15, 16}, out
    assert "horizontall" in errors[0] and "not_an_operator" in errors[-1], out
