"""Every good sample exactly once per epoch under on_error="skip", whatever the last-batch policy
(issue 17, item 8).

The README's example (a class-folder tree, random_shuffle, reader_name, LastBatchPolicy.PARTIAL,
no pad_last_batch) lost a few good files per epoch under on_error="skip": the batch at a pass's
end was refilled with the head of the next pass, and PARTIAL cut that head off (DROP dropped it,
FILL delivered it in the wrong epoch). The iterator now has the pipelines end their batches with
the reader's passes. Each image's pixel value is its file's number, so every delivered sample is
identified independently of the reader's bookkeeping.
"""

from __future__ import annotations

import warnings
from collections import Counter

import cv2
import numpy as np
import pytest

import stoker.fn as fn
from stoker import pipeline_def

torch = pytest.importorskip("torch")
from stoker.plugin.pytorch import DALIGenericIterator, LastBatchPolicy  # noqa: E402

pytestmark = pytest.mark.timeout(120)
N = 23
B = 4  # does not divide the 19 good files
BAD = {2, 9, 21, 22}  # 21 and 22 end the unshuffled pass
GOOD = set(range(N)) - BAD
EPOCHS = 4


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("coverage")
    for i in range(N):
        folder = root / f"class{i % 3}"
        folder.mkdir(exist_ok=True)
        ok, buf = cv2.imencode(".png", np.full((2, 3, 3), i, np.uint8))
        (folder / f"{i:02d}.png").write_bytes(b"corrupt" if i in BAD else buf.tobytes())
    return str(root)


def _pipe(root, pad, shuffle, shard=0, shards=1):
    @pipeline_def(batch_size=B, num_threads=2, device_id=None, seed=42, on_error="skip")
    def train_pipeline():
        jpegs, labels = fn.readers.file(file_root=root, random_shuffle=shuffle, name="reader",
                                        pad_last_batch=pad, shard_id=shard, num_shards=shards)
        return fn.decoders.image(jpegs), labels

    return train_pipeline()


def _epochs(it, epochs=EPOCHS):
    """Per epoch, per step, per pipeline: the file numbers of the samples delivered."""
    out = []
    for _ in range(epochs):
        out.append([[b["data"][:, 0, 0, 0].tolist() for b in step] for step in it])
    return out


@pytest.mark.parametrize("policy", ["PARTIAL", "FILL", "DROP"])
@pytest.mark.parametrize("pad", [False, True])
@pytest.mark.parametrize("shuffle", [False, True])
def test_each_good_file_once_per_epoch(root, policy, pad, shuffle):
    it = DALIGenericIterator(_pipe(root, pad, shuffle), ["data", "label"], reader_name="reader",
                             last_batch_policy=LastBatchPolicy[policy], auto_reset=True)
    epochs = _epochs(it)
    report = it.error_report()
    it._pipes[0].close()
    lasts = []
    for e, steps in enumerate(epochs):
        seen = Counter(x for step in steps for x in step[0])
        sizes = [len(step[0]) for step in steps]
        assert not set(seen) & BAD, e
        if policy == "PARTIAL":
            assert seen == Counter(GOOD), e  # every good file exactly once, nothing else
            assert sizes == [B] * (len(GOOD) // B) + [len(GOOD) % B]
        elif policy == "FILL":  # every good file once, the last batch filled with the epoch's last one
            assert set(seen) == GOOD and sizes == [B] * -(-len(GOOD) // B), e
            last = steps[-1][0]
            extra = seen - Counter(GOOD)
            assert extra == Counter({last[-1]: B * len(sizes) - len(GOOD)}), e
            lasts.append(last[-1])
        else:  # DROP: only the short last batch is dropped, and only files of this epoch's pass
            assert max(seen.values()) == 1 and sizes == [B] * (len(GOOD) // B), e
            assert len(GOOD - set(seen)) == len(GOOD) % B, e
            if not shuffle:  # the dropped ones are the pass's last good files (listing order)
                listed = [i for c in range(3) for i in range(N) if i % 3 == c and i not in BAD]
                assert GOOD - set(seen) == set(listed[-(len(GOOD) % B):]), e
    if shuffle and policy == "FILL":
        assert len(set(lasts)) > 1  # the passes really are shuffled
    # the report names the bad files, each once per pass, and no good one
    for e in range(EPOCHS):
        assert sorted(int(r["source"][-6:-4]) for r in report if r["epoch"] == e) == sorted(BAD)


def test_dropped_files_are_the_passes_last_ones(root):
    """DROP without padding drops the pass's last good files, as with pad_last_batch=True: the
    same batches either way."""
    runs = []
    for pad in (False, True):
        it = DALIGenericIterator(_pipe(root, pad, True), ["data", "label"], reader_name="reader",
                                 last_batch_policy=LastBatchPolicy.DROP, auto_reset=True)
        runs.append(_epochs(it))
        it._pipes[0].close()
    assert runs[0] == runs[1]


@pytest.mark.parametrize("policy", ["PARTIAL", "DROP"])
def test_two_shards_cover_the_data_set_each_epoch(root, policy):
    """Two pipelines reading one shard each (unpadded: 11 and 12 files) together deliver every good
    file once per epoch (PARTIAL), or every one but each shard's short last batch (DROP)."""
    pipes = [_pipe(root, False, True, shard=s, shards=2) for s in range(2)]
    it = DALIGenericIterator(pipes, ["data", "label"], reader_name="reader",
                             last_batch_policy=LastBatchPolicy[policy], auto_reset=True)
    epochs = _epochs(it)
    for p in pipes:
        p.close()
    for e, steps in enumerate(epochs):
        seen = Counter(x for step in steps for batch in step for x in batch)
        assert max(seen.values()) == 1 and not set(seen) & BAD, e
        if policy == "PARTIAL":
            assert set(seen) == GOOD, e
        else:
            assert len(GOOD) - len(seen) < 2 * B, e


@pytest.mark.filterwarnings("ignore:iterator. prefer reader_name")
def test_skipping_without_reader_name_warns(root):
    pipe = _pipe(root, False, False)
    with pytest.warns(UserWarning, match="no reader_name: epochs are counted"):
        it = DALIGenericIterator(pipe, ["data", "label"], size=N, last_batch_policy=LastBatchPolicy.PARTIAL)
    pipe.close()
    del it
    pipe = _pipe(root, False, False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # with reader_name: nothing to warn about
        DALIGenericIterator(pipe, ["data", "label"], reader_name="reader",
                            last_batch_policy=LastBatchPolicy.PARTIAL)
    pipe.close()
