"""Checkpoints carry a fingerprint of their pipeline; foreign or malformed ones are refused
(issue 17, item 7).

A checkpoint of another seed, another data set or a renamed reader used to resume with other
data, or from epoch 0, without a word; a JSON list gave an AttributeError. Now a mismatch is a
CheckpointError at build that says what differs, anything malformed is a CheckpointError, and a
checkpoint of an older stoker (no fingerprint) resumes with a warning.
"""

from __future__ import annotations

import json
import warnings

import cv2
import numpy as np
import pytest

import stoker
import stoker.fn as fn
from stoker import pipeline_def
from stoker.errors import CheckpointError, StokerError

pytestmark = pytest.mark.timeout(120)
N = 10


def _write(root, n=N, names=None):
    for i in range(n):
        d = root / f"c{i % 2}"
        d.mkdir(parents=True, exist_ok=True)
        ok, buf = cv2.imencode(".png", np.full((3, 4, 3), i, np.uint8))
        (d / (names[i] if names else f"{i:02d}.png")).write_bytes(buf.tobytes())
    return root


@pytest.fixture
def root(tmp_path):
    return _write(tmp_path / "data")


def make(root, checkpoint=None, name="R", build=True, **kw):
    kw.setdefault("seed", 11)

    @pipeline_def(batch_size=3, num_threads=1, device_id=None, enable_checkpointing=True, checkpoint=checkpoint,
                  **kw)
    def p():
        jpegs, labels = fn.readers.file(file_root=str(root), random_shuffle=True, name=name)
        return fn.decoders.image(jpegs), labels, fn.random.uniform(range=(0, 1))

    pipe = p()
    if build:
        pipe.build()
    return pipe


def _batches(pipe, n):
    return [[np.asarray(o.as_array()).tolist() for o in pipe.run()] for _ in range(n)]


@pytest.fixture
def midway(root):
    """A checkpoint after 5 batches (across the first epoch's end) and the 3 batches after it."""
    pipe = make(root)
    _batches(pipe, 5)
    state = pipe.checkpoint()
    after = _batches(pipe, 3)
    pipe.close()
    return state, after


def test_checkpoint_carries_the_fingerprint(root, midway):
    state = json.loads(midway[0])
    fp = state["fingerprint"]
    assert fp["stoker"] == stoker.__version__ and fp["seed"] == 11
    assert set(fp["readers"]) == {"R"} and fp["readers"]["R"]["epoch_size"] == N
    assert len(fp["readers"]["R"]["files"]) == 16
    assert len(midway[0]) < 400  # still small


def test_same_pipeline_resumes_exactly(root, midway):
    state, after = midway
    pipe = make(root, state)
    assert _batches(pipe, 3) == after
    pipe.close()


def test_without_a_seed_the_checkpoints_seed_is_taken(root, midway):
    state, after = midway
    pipe = make(root, state, seed=None)
    assert pipe.seed == 11 and _batches(pipe, 3) == after
    pipe.close()


def test_another_seed_is_refused(root, midway):
    with pytest.raises(CheckpointError, match=r"seed: checkpoint 11, this pipeline 12") as info:
        make(root, midway[0], seed=12)
    assert "another pipeline" in str(info.value)


def test_another_data_set_size_is_refused(tmp_path, midway):
    bigger = _write(tmp_path / "bigger", N + 1)
    with pytest.raises(CheckpointError, match=rf"reader R: data set size: checkpoint {N}, this pipeline {N + 1}"):
        make(bigger, midway[0])


def test_another_file_list_of_the_same_size_is_refused(tmp_path, midway):
    names = [f"{i:02d}.png" for i in range(N)]
    names[3] = "renamed.png"
    other = _write(tmp_path / "other", names=names)
    with pytest.raises(CheckpointError, match=r"reader R: file list") as info:
        make(other, midway[0])
    assert "data set size" not in str(info.value)  # only what differs is named


def test_a_renamed_reader_is_refused(root, midway):
    with pytest.raises(CheckpointError, match=r"checkpoint \['R'\], this pipeline \['reader'\]"):
        make(root, midway[0], name="reader")


def test_another_stoker_version_is_refused(root, midway, monkeypatch):
    monkeypatch.setattr(stoker, "__version__", "99.0")
    with pytest.raises(CheckpointError, match=r"stoker version: checkpoint '.*', this one '99.0'"):
        make(root, midway[0])


def test_every_difference_is_listed(tmp_path, midway):
    bigger = _write(tmp_path / "bigger", N + 2)
    with pytest.raises(CheckpointError) as info:
        make(bigger, midway[0], seed=5)
    text = str(info.value)
    assert "seed" in text and "data set size" in text and "file list" in text


def test_restore_checkpoint_in_place_refuses_a_foreign_one(root, midway):
    pipe = make(root, seed=12)
    with pytest.raises(CheckpointError, match="seed"):
        pipe.restore_checkpoint(midway[0])
    pipe.close()


def _malformed(state: str) -> dict:
    good = json.loads(state)
    no_iteration = {k: v for k, v in good.items() if k != "iteration"}
    return {
        "a JSON list": "[1, 2, 3]",
        "a garbage string": "certainly not a checkpoint",
        "a file name": "/tmp/ckpt.json",
        "bytes that are not UTF-8": b"\xff\xfe{",
        "a number": 12,
        "a list of non-checkpoints": [1, 2],
        "an empty list": [],
        "a missing key": json.dumps(no_iteration),
        "an iteration of the wrong type": json.dumps({**good, "iteration": "5"}),
        "a negative iteration": json.dumps({**good, "iteration": -1}),
        "sources as a list": json.dumps({**good, "sources": [1]}),
        "a reader state as a number": json.dumps({**good, "sources": {"R": 3}}),
        "a reader state without position": json.dumps({**good, "sources": {"R": {"epoch": 1}}}),
        "a reader state of the wrong type": json.dumps({**good, "sources": {"R": {"epoch": None, "position": 0}}}),
        "a reader position past the data": json.dumps({**good, "sources": {"R": {"epoch": 0, "position": 99}}}),
        "an unknown source": json.dumps({**good, "sources": {"R": good["sources"]["R"], "X": {"epoch": 0}}}),
        "a fingerprint as a string": json.dumps({**good, "fingerprint": "abc"}),
        "a fingerprint without keys": json.dumps({**good, "fingerprint": {"seed": 11}}),
        "an unknown key": json.dumps({**good, "extra": 1}),
    }


def test_malformed_checkpoints_give_one_clear_error(root, midway):
    for what, bad in _malformed(midway[0]).items():
        with pytest.raises(CheckpointError) as info:
            make(root, bad)
        assert isinstance(info.value, StokerError)
        assert str(info.value).startswith(("checkpoint:", "readers.file 'R': cannot restore the checkpoint")), what
    with pytest.raises(CheckpointError, match="got a list"):
        make(root, "[1, 2, 3]")
    with pytest.raises(CheckpointError, match=r"pass its contents"):
        make(root, "/tmp/ckpt.json")
    with pytest.raises(CheckpointError, match=r"missing key 'position'"):
        make(root, _malformed(midway[0])["a reader state without position"])


def test_malformed_checkpoints_are_refused_in_place_too(root, midway):
    pipe = make(root)
    for bad in _malformed(midway[0]).values():
        with pytest.raises(CheckpointError):
            pipe.restore_checkpoint(bad)
    pipe.close()


def test_an_old_checkpoint_without_fingerprint_resumes_with_a_warning(root, midway):
    state, after = midway
    old = {k: v for k, v in json.loads(state).items() if k != "fingerprint"}
    with pytest.warns(UserWarning, match="no fingerprint"):
        pipe = make(root, json.dumps(old))
    assert _batches(pipe, 3) == after
    pipe.close()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a checkpoint with its fingerprint passes silently
        make(root, state).close()


torch = pytest.importorskip("torch")


def test_iterator_state_dict_is_checked_too(root):
    from stoker.plugin.pytorch import DALIGenericIterator

    def iterator(**kw):
        return DALIGenericIterator(make(root, build=False, **kw), ["data", "label", "u"], reader_name="R",
                                   auto_reset=True)

    first = iterator()
    for _ in range(2):
        next(first)
    state = first.state_dict()
    expected = [b[0]["label"].tolist() for b in [next(first) for _ in range(2)]]
    first._pipes[0].close()

    foreign = iterator(seed=12)
    with pytest.raises(CheckpointError, match="seed: checkpoint 11, this pipeline 12"):
        foreign.load_state_dict(state)
    for bad in ([], {"checkpoints": "x"}, {"checkpoints": [3]}, {"checkpoints": ["[]"]}):
        with pytest.raises(CheckpointError):
            foreign.load_state_dict(bad)
    foreign._pipes[0].close()

    cp = json.loads(state["checkpoints"][0])
    cp["iterator"]["passes"] = 3  # (no pass tracking here: ignored) and a counter of the wrong type
    cp["iterator"]["_counter"] = [1, "x"]
    with pytest.raises(CheckpointError, match="iterator state"):
        iterator().load_state_dict({"checkpoints": [json.dumps(cp)]})

    resumed = iterator()
    resumed.load_state_dict(state)
    assert [b[0]["label"].tolist() for b in [next(resumed) for _ in range(2)]] == expected
    resumed._pipes[0].close()
