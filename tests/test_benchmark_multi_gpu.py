"""benchmarks/multi_gpu.py: its --cpu mode end to end (stoker alone, 1 and 2 ranks in separate
processes on a common window), and the pieces the GPU run leans on (NVML's numbering, the
utilisation sampler, the summary and its table) with made-up inputs, since CI has no GPU."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "benchmarks", "multi_gpu.py")


@pytest.fixture(scope="module")
def mg():
    spec = importlib.util.spec_from_file_location("multi_gpu_bench", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def tiny_data(tmp_path_factory):
    from stoker.sample_data import write_dataset

    root = tmp_path_factory.mktemp("multi_gpu_jpegs")
    write_dataset(str(root), 16, classes=2, seed=3, workers=2, progress=False)
    return str(root)


def _run(tmp_path, data, *extra, gpus="1,2"):
    out = tmp_path / "result.json"
    cmd = [sys.executable, SCRIPT, "--cpu", "--data", data, "--gpus", gpus, "--seconds", "1", "--batch", "4",
           "--lead", "1", "--json", str(out), *extra]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "FAILED" not in p.stdout, p.stdout[-3000:]
    return p.stdout, json.loads(out.read_text())


def _check_sums(result, libs, worlds=(1, 2)):
    rows, summary = result["rows"], result["summary"]
    for lib in libs:
        for world in worlds:
            ranks = [r for r in rows if r["lib"] == lib and r["world"] == world]
            assert sorted(r["rank"] for r in ranks) == list(range(world))
            assert all(r["img_s"] > 0 and r["images"] > 0 and r["mode"] == "cpu" for r in ranks)
            assert all(r["t_first"] < r["t_last"] and r["gpu_util"] is None for r in ranks)
            (s,) = [s for s in summary if s["lib"] == lib and s["world"] == world]
            assert s["img_s"] == pytest.approx(sum(r["img_s"] for r in ranks))
            assert s["scaling"] == pytest.approx(s["img_s"] / next(
                t["img_s"] for t in summary if t["lib"] == lib and t["world"] == 1))


def test_cpu_mode_loader_only_world_1_and_2(tmp_path, tiny_data):
    stdout, result = _run(tmp_path, tiny_data, "--libs", "stoker")
    _check_sums(result, ["stoker"])
    for r in result["rows"]:
        assert r["threads"] == max(1, len(os.sched_getaffinity(0)) // r["world"])
        assert json.dumps(r) in stdout  # each rank's line is printed as it comes
    for s in result["summary"]:
        assert f"| stoker | {s['world']} | {s['img_s']:.0f} |" in stdout
    assert "| lib | GPUs | img/s (sum) |" in stdout


@pytest.mark.slow
def test_cpu_mode_train_step_with_the_synthetic_ceiling(tmp_path, tiny_data):
    pytest.importorskip("torchvision")  # (not a test dependency: skipped on CI; about 30 s where present)
    # one rank only: a ResNet-50 step on 2 CPU cores takes about a second
    _, result = _run(tmp_path, tiny_data, "--libs", "stoker,synthetic", "--train-step", gpus="1")
    _check_sums(result, ["stoker", "synthetic"], worlds=(1,))
    assert all(s["vs_synthetic"] > 0 for s in result["summary"])


def test_a_failing_case_is_reported_and_the_run_goes_on(tmp_path, mg, capsys):
    a = mg.parse_args(["--cpu", "--data", str(tmp_path / "missing"), "--gpus", "2", "--libs", "stoker",
                       "--seconds", "1", "--build-timeout", "60"])
    assert mg.run_case(a, "stoker", 2) is None
    out = capsys.readouterr().out
    assert "stoker on 2 GPU(s): FAILED: rank" in out and "does not exist" in out


def test_nvml_numbering_and_nvidia_smi_parsing(mg):
    assert mg.nvml_index(1, visible="") == 1
    assert mg.nvml_index(1, visible="4,6") == 6
    assert mg.nvml_index(0, visible="GPU-8a2c") is None  # UUIDs: no utilisation rather than the wrong GPU
    assert mg.parse_smi("87, 40321\n") == (87.0, 40321.0)
    assert mg.default_sizes(0) == [1] and mg.default_sizes(4) == [1, 2, 4] and mg.default_sizes(6) == [1, 2, 4]


def test_sampler_means_utilisation_and_survives_a_broken_reader(mg):
    values = iter([(50.0, 100.0), (70.0, 120.0)] + [(90.0, 130.0)] * 100)
    s = mg.GpuSampler(lambda: next(values), period=0.01)
    s.start()
    s._halt.wait(0.05)
    util, mem = s.stop()
    assert 50 < util < 90 and mem == 130
    assert mg.GpuSampler(None).stop() == (None, None)

    def broken():
        raise OSError("no nvidia-smi")

    b = mg.GpuSampler(broken, period=0.01)
    b.start()
    assert b.stop() == (None, None) and b.failures >= 1


def test_summary_table_and_targets(mg):
    def row(lib, world, rank, img_s, rnd=0):
        return {"lib": lib, "world": world, "rank": rank, "img_s": img_s, "round": rnd, "gpu_util": 80.0,
                "gpu_mem_mib": 3000 + rank, "first_batch_s": 1.5, "t_first": 100.0 + rank / 100}

    rows = [row("stoker", 1, 0, 4000), row("dali", 1, 0, 3000),
            row("stoker", 2, 0, 3950), row("stoker", 2, 1, 3950), row("dali", 2, 0, 3000), row("dali", 2, 1, 2000),
            row("stoker", 2, 0, 4050, rnd=1), row("stoker", 2, 1, 4050, rnd=1)]
    summary = {(s["lib"], s["world"]): s for s in mg.summarize(rows)}
    s2 = summary[("stoker", 2)]
    assert s2["img_s"] == 8000 and s2["rounds"] == 2  # each round's ranks summed, then the rounds' mean
    assert s2["scaling"] == 2.0 and s2["vs_dali"] == 1.6 and s2["vs_synthetic"] is None
    assert s2["gpu_mem_mib"] == 3001 and s2["start_skew_s"] == 0.01
    text = mg.table(mg.summarize(rows))
    assert "| stoker | 2 | 8000 | 4000 | 2.00x | 1.60x | - | 80 | 3001 | 1.50 | 0.010 |" in text
    lines = mg.target_lines(mg.summarize(rows))
    assert lines == ["# stoker on 1 GPU(s): vs DALI 1.33x (target 1.15x) ok",
                     "# stoker on 2 GPU(s): scaling 2.00x (target 1.95x) ok; vs DALI 1.60x (target 1.15x) ok"]
