"""``stoker bench``: figures on the README's pipeline, and verdicts that name a stage made slow
on purpose (a sleeping python_function, a sleeping external_source standing in for slow storage).
Each run is short (2 s, small batches) and in process, except the command-line checks."""

from __future__ import annotations

import importlib.util
import re
import textwrap

import pytest

from stoker import cli
from stoker._cli_bench import Measurement, NodeTimer, verdict
from stoker._cli_bench_compare import to_dali_source
from stoker.sample_data import write_dataset
from tests.test_cli import README_PIPELINE

SECONDS = "2"


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("bench_data")
    write_dataset(str(root), 24, classes=3, progress=False)
    return str(root)


def _write(tmp_path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


def _bench(capsys, *args) -> str:
    rc = cli.main(["bench", *args, "--seconds", SECONDS])
    out, err = capsys.readouterr()
    assert rc == 0, err
    return out


def _verdict(out: str) -> str:
    return out.split("Verdict: ", 1)[1]


def test_bench_prints_the_figures_of_the_readme_pipeline(tmp_path, data, capsys):
    path = _write(tmp_path, "pipe.py", README_PIPELINE.format(device="cpu"))
    out = _bench(capsys, path, data, "--batch", "4", "--threads", "2")
    rate = float(re.search(r"throughput\s+([\d,.]+) samples/s", out).group(1).replace(",", ""))
    assert rate > 0
    assert re.search(r"first batch\s+\d+\.\d\d s", out)
    assert re.search(r"CPU\s+\d+\.\d\d cores busy", out)
    assert "batch 4, 2 threads, on the CPU" in out
    for line in ["reader (sources and reader operators)", "CPU stage (all of it)", "waiting for the consumer"]:
        assert line in out
    assert "GPU" not in out.split("Share of wall time")[0]  # no GPU line for a CPU pipeline
    # every operator of the graph has its row (the decode chain is fused into one)
    table = out.split("Per operator")[1].split("Verdict")[0]
    for op in ["decoders.image_random_crop", "resize", "crop_mirror_normalize", "readers.file (reader)",
               "random.coin_flip"]:
        assert op in table, op
    assert re.search(r"\d+\.\d\d ms", table)
    assert _verdict(out).startswith("Limited by ")


def test_a_slow_python_function_is_named(tmp_path, data, capsys):
    path = _write(tmp_path, "slow_op.py", '''
        import time
        from stoker import pipeline_def
        import stoker.fn as fn
        import stoker.types as types

        def slow(image):
            time.sleep(0.02)
            return image

        @pipeline_def(batch_size=4, num_threads=2, seed=1)
        def slow_pipeline(root):
            jpegs, labels = fn.readers.file(file_root=root, name="reader")
            images = fn.decoders.image(jpegs, output_type=types.RGB)
            images = fn.resize(images, resize_x=32, resize_y=32)
            images = fn.python_function(images, function=slow)
            return images, labels
        ''')
    out = _bench(capsys, path, "--data", data)
    assert "Limited by the operator python_function" in _verdict(out)
    ms = float(re.search(r"\n  python_function\s+([\d.]+) ms", out).group(1))
    assert 35 < ms < 200  # 4 samples of 20 ms on 2 threads: about 40 ms per batch


def test_a_slow_reader_is_io(tmp_path, data, capsys):
    path = _write(tmp_path, "slow_io.py", '''
        import glob
        import time

        import numpy as np
        from stoker import pipeline_def
        import stoker.fn as fn
        import stoker.types as types

        def slow_storage(root):
            files = sorted(glob.glob(root + "/*/*.jpg"))
            state = {"i": 0}

            def next_batch():
                time.sleep(0.05)  # a slow network file system
                batch = []
                for _ in range(4):
                    batch.append(np.fromfile(files[state["i"] % len(files)], dtype=np.uint8))
                    state["i"] += 1
                return batch

            return next_batch

        @pipeline_def(batch_size=4, num_threads=2, seed=1)
        def remote(root):
            jpegs = fn.external_source(source=slow_storage(root), name="storage")
            images = fn.decoders.image(jpegs, output_type=types.RGB)
            return fn.resize(images, resize_x=32, resize_y=32)
        ''')
    out = _bench(capsys, path, data)
    v = _verdict(out)
    assert v.startswith("Limited by I/O / the reader: external_source (storage)"), v
    reader_share = float(re.search(r"reader \(sources and reader operators\)\s+([\d.]+)%", out).group(1))
    assert reader_share > 60


def _measurement(**kw) -> Measurement:
    base = dict(function="f", device="cpu", batch_size=8, num_threads=4, first_batch_s=1.0, wall_s=10.0,
                batches=100, samples=800, cpu_s=30.0, consumer_wait_s=9.9, stages={"cpu": 9.5}, items={})
    return Measurement(**{**base, **kw})


def test_verdict_rules():
    hot = {("cpu", "resize", 3): 2.0, ("cpu", "flip", 4): 2.0, ("cpu", "hsv", 5): 2.0, ("source", "x", 1): 0.1}
    assert verdict(_measurement(items=hot, readers={1})).startswith("Limited by the host (GIL / CPU stage)")
    assert verdict(_measurement(stages={"cpu": 2.0}, items=hot)).startswith("Limited by the host")
    gpu = _measurement(device="gpu", gpu_util=0.97, gpu_method="NVML", stages={"cpu": 3.0, "gpu": 4.0})
    assert verdict(gpu).startswith("Limited by the GPU: it was busy 97% of the time (NVML)")
    decode = _measurement(items={("prepare", "decoders.image", 2): 6.0})
    assert verdict(decode).startswith("Limited by decode: decoders.image")


def test_timer_is_exclusive_and_forgets_the_warmup():
    timer = NodeTimer()

    class Node:
        def __init__(self, i, name):
            self.id, self.op_name, self.args = i, name, {}

    with timer("stage", "cpu"):
        with timer("cpu", Node(1, "a")):
            pass
    timer.reset()
    outer = Node(2, "outer")
    with timer("stage", "cpu"):
        with timer("cpu", outer):
            with timer("cpu", Node(3, "inner")):
                sum(range(200_000))
    items = timer.exclusive
    assert ("cpu", "a", 1) not in items
    assert items[("cpu", "inner", 3)] > items[("cpu", "outer", 2)]
    assert timer.stages["cpu"] >= sum(items.values()) * 0.999


def test_the_hook_is_off_by_default():
    from stoker.pipeline.executor import Executor

    assert Executor.timer is None


def test_dali_source_rename():
    src = ("from stoker import pipeline_def\nimport stoker.fn as fn\nimport stoker\nimport stoker.types\n"
           "from stoker.plugin.pytorch import X\n    from stoker.types import RGB\nx = 'stoker'\n")
    assert to_dali_source(src).split("\n") == [
        "from nvidia.dali import pipeline_def", "import nvidia.dali.fn as fn", "import nvidia.dali as stoker",
        "import nvidia.dali as stoker; import nvidia.dali.types", "from nvidia.dali.plugin.pytorch import X",
        "    from nvidia.dali.types import RGB", "x = 'stoker'", ""]


@pytest.mark.skipif(importlib.util.find_spec("nvidia.dali") is None, reason="DALI is not installed")
def test_compare_with_dali_prints_a_ratio(tmp_path, data, capsys):
    path = _write(tmp_path, "pipe.py", README_PIPELINE.format(device="cpu"))
    out = _bench(capsys, path, data, "--compare", "dali", "--device", "cpu")
    assert "Compared with DALI" in out
    assert re.search(r"stoker / dali\s+\d+\.\d\dx", out)


def test_compare_torchvision_only_for_the_training_shape(tmp_path, data, capsys):
    path = _write(tmp_path, "noise.py", '''
        from stoker import pipeline_def
        import stoker.fn as fn

        @pipeline_def(batch_size=2, num_threads=1, seed=1)
        def noise():
            return fn.random.uniform(shape=[8, 8, 3])
        ''')
    out = _bench(capsys, path, "--compare", "torchvision")
    tail = out.split("Verdict: ")[1]
    assert "torchvision is not installed" in tail or "only the standard training pipeline" in tail


def test_a_gpu_pipeline_on_the_cpu_is_a_clear_error(tmp_path, data, capsys):
    path = _write(tmp_path, "gpu_pipe.py", README_PIPELINE.format(device="mixed"))
    rc = cli.main(["bench", path, data, "--device", "cpu", "--seconds", "1"])
    err = capsys.readouterr().err
    assert rc == 1 and "decoders.image_random_crop" in err and "device='cpu'" in err and "Traceback" not in err
