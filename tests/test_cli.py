"""The ``stoker`` command line: --version, info, sample-data, show, graph and their errors."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import cv2
import numpy as np
import pytest

from stoker import cli
from stoker._cli_show import LABEL_STRIP, grid_size, to_rgb8
from stoker.sample_data import write_dataset

README_PIPELINE = '''
from stoker import pipeline_def
import stoker.fn as fn
import stoker.types as types

@pipeline_def(batch_size=4, num_threads=2, device_id=0, seed=42)
def train_pipeline(root):
    jpegs, labels = fn.readers.file(file_root=root, random_shuffle=True, name="reader")
    images = fn.decoders.image_random_crop(jpegs, device="{device}", output_type=types.RGB)
    images = fn.resize(images, resize_x=64, resize_y=48)
    images = fn.crop_mirror_normalize(images, dtype=types.FLOAT, output_layout="CHW",
                                      mean=[0.485 * 255, 0.456 * 255, 0.406 * 255],
                                      std=[0.229 * 255, 0.224 * 255, 0.225 * 255],
                                      mirror=fn.random.coin_flip())
    return images, labels
'''

OPERATORS = ["readers.file", "decoders.image_random_crop", "resize", "random.coin_flip", "crop_mirror_normalize"]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli_data")
    write_dataset(str(root), 12, classes=3, progress=False)
    return str(root)


def _write(tmp_path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


@pytest.fixture
def pipeline_file(tmp_path):
    return _write(tmp_path, "pipe.py", README_PIPELINE.format(device="cpu"))


def _run(*args, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "stoker.cli", *args], capture_output=True, text=True,
                          timeout=120, **kw)


def test_version_prints_the_package_version():
    import importlib.metadata

    r = _run("--version")
    assert r.returncode == 0
    assert r.stdout.strip() == f"stoker {importlib.metadata.version('stoker')}"


def test_info_names_versions_and_optional_packages():
    r = _run("info")
    assert r.returncode == 0, r.stderr
    for word in ["stoker", "Python", "NumPy", "OpenCV", "Pillow", "turbojpeg", "torch", "CuPy", "nvImageCodec",
                 "CUDA GPU", "CPU cores"]:
        assert word in r.stdout, word
    assert np.__version__ in r.stdout and cv2.__version__ in r.stdout
    assert "CPU cores" in r.stdout and str(os.cpu_count()) in r.stdout.split("CPU cores")[1]


def test_gpu_probe_gives_up_instead_of_hanging(monkeypatch):
    import threading

    from stoker import _cli_info
    from stoker.backend import cuda

    monkeypatch.setattr(_cli_info, "_module_present", lambda name: True)
    release = threading.Event()
    monkeypatch.setattr(cuda, "unavailable_reason", lambda i: release.wait(30))  # a wedged driver
    try:
        assert _cli_info.gpu_status(timeout=0.2).startswith("unknown")
    finally:
        release.set()


def test_every_command_and_option_has_help():
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if a.dest == "cmd")
    assert set(sub.choices) == {"demo", "sample-data", "info", "show", "graph", "index", "bench"}
    helped = {a.dest for a in sub._choices_actions if a.help}
    assert helped == set(sub.choices)
    for name, p in sub.choices.items():
        for action in p._actions:
            assert action.help, f"{name} {action.option_strings or action.dest} has no help"


def test_sample_data_writes_n_files_and_a_summary(tmp_path):
    out = tmp_path / "sd"
    r = _run("sample-data", str(out), "7", "--classes", "2")
    assert r.returncode == 0, r.stderr
    files = sorted(p for p in out.rglob("*") if p.is_file())
    assert len(files) == 7 and all(p.suffix == ".jpg" for p in files)
    assert {p.parent.name for p in files} == {"class_000", "class_001"}
    assert r.stdout.startswith("7 images in 2 classes under")
    assert "\r" not in r.stderr and "img/s" not in r.stderr  # no bar when stderr is not a terminal
    again = _run("sample-data", str(out), "7", "--classes", "2")
    assert "(7 already present, kept)" in again.stdout


def test_sample_data_progress_bar_can_be_forced(tmp_path):
    r = _run("sample-data", str(tmp_path / "sd"), "3", "--progress")
    assert r.returncode == 0, r.stderr
    assert "3/3" in r.stderr  # tqdm's final count on stderr
    assert "3/3" not in r.stdout


def test_show_writes_a_labelled_grid(tmp_path, data, pipeline_file, capsys):
    out = tmp_path / "grid.png"
    rc = cli.main(["show", pipeline_file, "--data", data, "--n", "6", "--columns", "4", "--tile", "64",
                   "-o", str(out)])
    assert rc == 0
    assert "6 samples of train_pipeline" in capsys.readouterr().out
    img = cv2.imread(str(out), cv2.IMREAD_COLOR)
    assert img is not None
    assert img.shape[:2] == grid_size(6, 4, 64) == (2 * (64 + LABEL_STRIP), 4 * 64)
    first_tile = img[:64, :64]
    assert first_tile.std() > 5  # a picture, not one colour
    assert img[64:64 + LABEL_STRIP, :64].max() > 200  # the label text under the first tile
    empty = img[64 + LABEL_STRIP:, 2 * 64:]  # tiles 6 and 7 do not exist
    assert empty.max() == 0


def test_to_rgb8_scales_chw_float_per_sample():
    chw = np.stack([np.full((2, 3), v, np.float32) for v in (-2.0, 0.0, 2.0)])
    rgb = to_rgb8(chw, "CHW")
    assert rgb.shape == (2, 3, 3) and rgb.dtype == np.uint8
    assert rgb[0, 0].tolist() == [0, 127, 255]
    gray = to_rgb8(np.arange(6, dtype=np.uint8).reshape(2, 3, 1), "HWC")
    assert gray.shape == (2, 3, 3) and gray[1, 2].tolist() == [5, 5, 5]


def test_show_a_gpu_pipeline_without_a_gpu_fails_clearly(tmp_path, data, capsys):
    from stoker.backend.cuda import cuda_available

    if cuda_available():
        pytest.skip("a GPU is usable here")
    path = _write(tmp_path, "gpu_pipe.py", README_PIPELINE.format(device="mixed"))
    rc = cli.main(["show", path, "--data", data, "-o", str(tmp_path / "g.png")])
    err = capsys.readouterr().err
    assert rc == 1
    assert "decoders.image_random_crop" in err and "mixed" in err and "device='cpu'" in err
    assert not (tmp_path / "g.png").exists()


@pytest.mark.parametrize("ext", ["dot", "svg", "png"])
def test_graph_names_every_operator_and_device(tmp_path, data, ext, capsys):
    path = _write(tmp_path, "gpu_pipe.py", README_PIPELINE.format(device="mixed"))  # drawing needs no GPU
    out = tmp_path / f"graph.{ext}"
    rc = cli.main(["graph", path, "--data", data, "-o", str(out), "--renderer", "builtin"])
    assert rc == 0
    assert "5 operators" in capsys.readouterr().out
    dot = (tmp_path / "graph.dot").read_text()
    assert dot.startswith('digraph "train_pipeline"')
    for op in OPERATORS:
        assert f'label="{op}\\n' in dot, op
    assert "decoders.image_random_crop\\n__decoders_image_random_crop" in dot
    assert dot.count("device=mixed") == 1 and dot.count("device=gpu") == 3  # resize, cmn, output 0
    assert 'label="readers.file\\nreader\\ndevice=cpu"' in dot
    assert dot.count("->") == 6  # reader->decoder->resize->cmn, coin_flip->cmn (mirror), 2 outputs
    assert 'label="mirror"' in dot
    if ext == "svg":
        svg = out.read_text()
        assert svg.startswith("<svg") and svg.rstrip().endswith("</svg>")
        for op in OPERATORS:
            assert f">{op}</text>" in svg
        assert "device=mixed" in svg
    if ext == "png":
        img = cv2.imread(str(out))
        assert img is not None and img.shape[1] > img.shape[0] > 50 and img.std() > 5


def _error(args, capsys) -> str:
    rc = cli.main(args)
    captured = capsys.readouterr()
    assert rc == 1
    assert "Traceback" not in captured.err
    return captured.err


def test_missing_file_is_a_clear_error(tmp_path, capsys):
    err = _error(["show", str(tmp_path / "nope.py")], capsys)
    assert "nope.py: no such file" in err


def test_file_without_a_pipeline_function(tmp_path, capsys):
    path = _write(tmp_path, "plain.py", "def helper():\n    return 1\n")
    err = _error(["graph", path, "-o", str(tmp_path / "g.dot")], capsys)
    assert "no function decorated with @pipeline_def" in err


def test_two_candidates_need_function(tmp_path, data, capsys):
    text = README_PIPELINE.format(device="cpu") + textwrap.dedent('''
        @pipeline_def(batch_size=2, num_threads=1)
        def other():
            return fn.random.uniform(shape=[4, 4, 3])
        ''')
    path = _write(tmp_path, "two.py", text)
    err = _error(["graph", path, "-o", str(tmp_path / "g.dot")], capsys)
    assert "other, train_pipeline" in err and "--function" in err
    assert cli.main(["graph", path, "--function", "other", "-o", str(tmp_path / "g.dot")]) == 0
    assert "random.uniform" in (tmp_path / "g.dot").read_text()


def test_user_errors_are_reported_with_their_line(tmp_path, data, capsys):
    path = _write(tmp_path, "broken.py", "import stoker\n\nraise ValueError('bad config')\n")
    err = _error(["show", path], capsys)
    assert "ValueError: bad config" in err and "broken.py:3" in err
    path = _write(tmp_path, "syntax.py", "def f(:\n")
    assert "syntax error" in _error(["show", path], capsys)


def test_data_argument_convention(tmp_path, data, pipeline_file, capsys):
    assert "needs the data root: pass --data DIR" in _error(["show", pipeline_file], capsys)
    zero = _write(tmp_path, "zero.py", '''
        from stoker import pipeline_def
        import stoker.fn as fn
        import stoker.types as types

        @pipeline_def(batch_size=3, num_threads=1, seed=1)
        def noise():
            return fn.cast(fn.random.uniform(shape=[20, 30, 3], range=[0, 255]), dtype=types.UINT8)
        ''')
    assert "takes no arguments" in _error(["show", zero, "--data", data], capsys)
    out = tmp_path / "noise.png"
    assert cli.main(["show", zero, "--n", "5", "--tile", "32", "-o", str(out)]) == 0
    img = cv2.imread(str(out))
    assert img.shape[:2] == grid_size(5, 5, 32)  # no label line: still the same strip
    assert img[:32, :32].std() > 5


def test_command_line_exit_status_and_stderr(tmp_path):
    r = _run("graph", str(tmp_path / "missing.py"))
    assert r.returncode == 1
    assert r.stderr.startswith("stoker graph: error:") and "Traceback" not in r.stderr
