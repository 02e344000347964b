"""The torchrun recipe (examples/torchrun_train.py) on the CPU with gloo: 2 and 3 ranks, each on its
shard. Every file exactly once per epoch over the ranks, equal step counts, per-rank resume, resume
at another world size from every old rank's checkpoint, and a refused resume at another world size
from one rank's checkpoint alone."""

import collections
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
cv2 = pytest.importorskip("cv2")
if not torch.distributed.is_available():
    pytest.skip("torch.distributed is not available", allow_module_level=True)

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "torchrun_train.py"
N_FILES = 23  # shards of 11/12 (2 ranks) and 7/8/8 (3 ranks): padding is needed
EPOCHS = 2


@pytest.fixture(scope="module")
def tiny_dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny")
    rng = np.random.default_rng(0)
    for k in range(N_FILES):
        d = root / f"class{k % 3}"
        d.mkdir(exist_ok=True)
        cv2.imwrite(str(d / f"img{k:02d}.jpg"), (rng.random((20, 28, 3)) * 255).astype(np.uint8))
    return str(root)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launch(world: int, args: list[str]) -> list[subprocess.Popen]:
    """``world`` ranks of the script, with the environment torchrun would give them."""
    port = str(_free_port())
    procs = []
    for rank in range(world):
        env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(rank),
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, "OMP_NUM_THREADS": "1",
               "PYTHONWARNINGS": "ignore"}
        procs.append(subprocess.Popen([sys.executable, str(SCRIPT), *args], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    return procs


def _wait(procs, expect_ok=True) -> list[str]:
    outs = []
    for p in procs:
        try:
            out, _ = p.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
        outs.append(out)
        if expect_ok:
            assert p.returncode == 0, out[-3000:]
    return outs


def _records(prefix: Path, world: int) -> list[list[dict]]:
    return [[json.loads(line) for line in open(f"{prefix}.rank{r}")] for r in range(world)]


def _check_coverage(records, world: int, data: str):
    files = sorted(str(p.relative_to(data)) for p in Path(data).rglob("*.jpg"))
    for epoch in range(EPOCHS):
        per_rank = [[r for r in recs if r["epoch"] == epoch] for recs in records]
        assert len({len(steps) for steps in per_rank}) == 1, f"unequal step counts {[len(s) for s in per_rank]}"
        seen = collections.Counter(p for steps in per_rank for step in steps for p in step["paths"])
        assert sorted(seen) == files, "a file is missing or foreign"
        assert set(seen.values()) == {1}, f"files read twice in epoch {epoch}: {[p for p, n in seen.items() if n > 1]}"


@pytest.fixture(scope="module")
def full_runs(tiny_dataset, tmp_path_factory):
    """Uninterrupted runs with 2 and 3 ranks (launched together: they use separate ports)."""
    tmp = tmp_path_factory.mktemp("runs")
    common = ["--data", tiny_dataset, "--epochs", str(EPOCHS), "--batch-size", "4"]
    launched = {w: _launch(w, [*common, "--record", str(tmp / f"w{w}"), "--checkpoint-dir", str(tmp / f"ck{w}")])
                for w in (2, 3)}
    for procs in launched.values():
        _wait(procs)
    return {w: _records(tmp / f"w{w}", w) for w in (2, 3)}, tmp


@pytest.mark.parametrize("world", [2, 3])
def test_every_file_once_per_epoch_and_equal_step_counts(full_runs, tiny_dataset, world):
    records, _ = full_runs
    _check_coverage(records[world], world, tiny_dataset)


def test_per_rank_resume_continues_exactly(full_runs, tiny_dataset, tmp_path):
    records, _ = full_runs
    common = ["--data", tiny_dataset, "--epochs", str(EPOCHS), "--batch-size", "4",
              "--checkpoint-dir", str(tmp_path / "ck"), "--record", str(tmp_path / "resumed")]
    _wait(_launch(2, [*common, "--stop-after", "2"]))  # mid-epoch 0 (3 steps per epoch)
    _wait(_launch(2, [*common, "--resume"]))
    resumed = _records(tmp_path / "resumed", 2)
    strip = lambda recs: [(r["epoch"], r["step"], r["paths"]) for r in recs]  # noqa: E731
    assert [strip(r) for r in resumed] == [strip(r) for r in records[2]]


def test_resume_at_another_world_size_is_refused(tiny_dataset, tmp_path):
    from stoker.errors import CheckpointError
    from stoker.plugin.pytorch import LastBatchPolicy

    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import torchrun_train
    finally:
        sys.path.remove(str(SCRIPT.parent))
    args = type("Args", (), {"data": tiny_dataset, "batch_size": 4, "seed": 42})
    it = torchrun_train.make_iterator(args, 0, 2, None)
    assert it._last_batch_policy == LastBatchPolicy.PARTIAL
    next(it)
    cp = it.checkpoints()[0]
    with pytest.raises(CheckpointError, match=r"num_shards=2 .*num_shards=3"):
        torchrun_train.make_iterator(args, 0, 3, cp)
    resumed = torchrun_train.make_iterator(args, 0, 2, cp)  # the same world size resumes
    assert len(resumed) == len(it)


@pytest.mark.parametrize("old, new, stop", [(2, 3, 2), (3, 2, 1), (3, 2, 2), (3, 3, 2)])
def test_resume_at_another_world_size_reads_the_rest_of_the_epoch_once(tiny_dataset, tmp_path, old, new, stop):
    """The old ranks stop mid-epoch (or, for 3 ranks after 2 steps, at the epoch's end); the new
    ranks get every old rank's checkpoint (at the same world size, their own). Over both runs
    every file is read once in the interrupted epoch, the new ranks take equal step counts in each
    epoch, and the next epoch covers every file once at the new world size."""
    common = ["--data", tiny_dataset, "--epochs", str(EPOCHS), "--batch-size", "4",
              "--checkpoint-dir", str(tmp_path / "ck")]
    _wait(_launch(old, [*common, "--stop-after", str(stop), "--record", str(tmp_path / "before")]))
    _wait(_launch(new, [*common, "--resume", "--record", str(tmp_path / "after")]))
    before, after = _records(tmp_path / "before", old), _records(tmp_path / "after", new)
    files = sorted(str(p.relative_to(tiny_dataset)) for p in Path(tiny_dataset).rglob("*.jpg"))
    first = collections.Counter(p for recs in before + after for r in recs if r["epoch"] == 0 for p in r["paths"])
    assert sorted(first) == files and set(first.values()) == {1}, "epoch 0 over both runs"
    for epoch in range(EPOCHS):
        steps = {len([r for r in recs if r["epoch"] == epoch]) for recs in after}
        assert len(steps) == 1, f"unequal step counts in epoch {epoch}: {steps}"
    second = collections.Counter(p for recs in after for r in recs if r["epoch"] == 1 for p in r["paths"])
    assert sorted(second) == files and set(second.values()) == {1}, "epoch 1 at the new world size"
