"""Iterator epochs under on_error="skip" follow the reader's passes: every good sample once per epoch.

The reference is built independently of the executor: the reader alone (labels only, nothing to
fail) gives the order of each pass; removing the bad files' labels gives each pass's good samples.
"""

from __future__ import annotations

import cv2
import numpy as np
import pytest

import stoker.fn as fn
from stoker import pipeline_def

torch = pytest.importorskip("torch")
from stoker.plugin.pytorch import DALIGenericIterator, LastBatchPolicy  # noqa: E402

pytestmark = pytest.mark.timeout(120)
N = 13
B = 3
# shard 0 of 2 = files 0..5, shard 1 = 6..12; the last three files of shard 1 are bad, so its pass
# ends with a batch that holds nothing of the pass (the iterator keeps it for the next epoch).
BAD = {1, 5, 6, 10, 11, 12}
EPOCHS = 3


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("skip_epochs")
    paths = []
    for i in range(N):
        path = root / f"{i:02d}.png"
        ok, buf = cv2.imencode(".png", np.full((4, 5, 3), 10 * i, np.uint8))
        path.write_bytes(b"not an image" if i in BAD else buf.tobytes())
        paths.append(str(path))
    return paths


def _reader(files, shard, shards, pad, shuffle):
    return fn.readers.file(files=files, labels=list(range(N)), name="Reader", shard_id=shard, num_shards=shards,
                           pad_last_batch=pad, random_shuffle=shuffle)


def _pipes(files, shards, pad, shuffle, checkpointing=False):
    pipes = []
    for s in range(shards):
        @pipeline_def(batch_size=B, num_threads=2, device_id=None, seed=7, on_error="skip",
                      enable_checkpointing=checkpointing)
        def p(s=s):
            jpegs, labels = _reader(files, s, shards, pad, shuffle)
            return fn.decoders.image(jpegs), labels

        pipes.append(p())
    return pipes


def good_passes(files, shard, shards, pad, shuffle, passes):
    """Per reader pass of pipeline ``shard``: the labels of its good samples, in reading order."""
    @pipeline_def(batch_size=B, num_threads=1, device_id=None, seed=7)
    def p():
        _, labels = _reader(files, shard, shards, pad, shuffle)
        return labels

    pipe = p()
    bounds = [N * k // shards for k in range(shards + 1)]
    real = [bounds[(shard + k) % shards + 1] - bounds[(shard + k) % shards] for k in range(passes)]
    longest = -(-N // shards)
    taken = [-(-longest // B) * B if pad else r for r in real]
    stream = []
    while len(stream) < sum(taken):
        stream += [int(x) for x in np.asarray(pipe.run()[0].as_array()).reshape(-1)]
    pipe.close()
    out, pos = [], 0
    for r, t in zip(real, taken):
        out.append([x for x in stream[pos:pos + r] if x not in BAD])
        pos += t
    return out


def _run(files, shards, pad, shuffle, policy):
    it = DALIGenericIterator(_pipes(files, shards, pad, shuffle), ["data", "label"], reader_name="Reader",
                             last_batch_policy=LastBatchPolicy[policy], auto_reset=True)
    epochs = []
    for _ in range(EPOCHS):
        steps = []
        for step in it:
            batch = []
            for b in step:
                labels = b["label"].reshape(-1).tolist()
                # images stay aligned with their labels through skips and refills
                assert b["data"][:, 0, 0, 0].tolist() == [10 * x for x in labels]
                batch.append(labels)
            steps.append(batch)
        epochs.append(steps)
    report = it.error_report()
    for p in it._pipes:
        p.close()
    return epochs, report


def _chunks(xs):
    return [xs[j:j + B] for j in range(0, len(xs), B)]


def expected_one_shard(g, pad, policy):
    """The documented semantics for one pipeline, from the good samples ``g[k]`` of each pass: no
    batch holds two passes (with or without pad_last_batch), the last one is padded with the
    pass's last good sample (FILL), cut (PARTIAL) or dropped when short (DROP)."""
    out = []
    for k in range(EPOCHS):
        chunks = _chunks(g[k])
        last = chunks[-1]
        if len(last) < B:
            if policy == "FILL":
                chunks[-1] = last + [last[-1]] * (B - len(last))
            elif policy == "DROP":
                chunks.pop()
        out.append(chunks)
    return out


@pytest.mark.parametrize("policy", ["FILL", "PARTIAL", "DROP"])
@pytest.mark.parametrize("pad", [False, True])
@pytest.mark.parametrize("shuffle", [False, True])
def test_one_shard_epochs_end_with_the_readers_pass(files, policy, pad, shuffle):
    g = good_passes(files, 0, 1, pad, shuffle, EPOCHS + 2)
    if shuffle:
        assert g[0] != g[1]  # the passes really are shuffled differently
    got, report = _run(files, 1, pad, shuffle, policy)
    assert [[step[0] for step in epoch] for epoch in got] == expected_one_shard(g, pad, policy)
    assert {r["epoch"] for r in report} >= {0, 1, 2}  # the report names the reader pass
    if policy != "DROP":
        for e, epoch in enumerate(got):  # every good sample of the pass, exactly once in its epoch
            seen = [x for step in epoch for x in step[0]]
            assert sorted(set(seen)) == sorted(g[e]) and len(set(seen)) == len(g[e])


@pytest.mark.parametrize("policy", ["FILL", "PARTIAL", "DROP"])
@pytest.mark.parametrize("shuffle", [False, True])
def test_two_shards_with_padding_deliver_each_pass_exactly(files, policy, shuffle):
    """With pad_last_batch, shards holding different numbers of bad files still give every good
    sample of their pass once per epoch (PARTIAL), the same number of full batches (DROP), or
    full batches whose stream continues into the next pass without loss or repeat (FILL)."""
    g = [good_passes(files, s, 2, True, shuffle, EPOCHS + 2) for s in range(2)]
    got, _ = _run(files, 2, True, shuffle, policy)
    assert all(len(step) == 2 for epoch in got for step in epoch)
    if policy == "PARTIAL":
        for e, epoch in enumerate(got):
            for s in range(2):
                assert [x for step in epoch for x in step[s]] == g[s][e]
    elif policy == "DROP":
        for e, epoch in enumerate(got):
            steps = min(len(g[s][e]) // B for s in range(2))
            assert len(epoch) == steps
            for s in range(2):
                assert [x for step in epoch for x in step[s]] == g[s][e][:steps * B]
    else:
        for s in range(2):
            padded = [c + [c[-1]] * (B - len(c)) for k in range(EPOCHS + 2) for c in _chunks(g[s][k])]
            delivered = [step[s] for epoch in got for step in epoch]
            assert delivered == padded[:len(delivered)]
        for e, epoch in enumerate(got):  # the epoch lasts until both shards' passes ended
            assert len(epoch) >= max(-(-len(g[s][e]) // B) for s in range(2)) - 1


@pytest.mark.parametrize("policy", ["FILL", "PARTIAL"])
def test_two_shards_without_padding_lose_nothing_under_fill(files, policy):
    """Without pad_last_batch the iterator still ends each pipeline's batches with its pass: PARTIAL
    gives each pass's good samples exactly, FILL the same padded with each pass's last one."""
    g = [good_passes(files, s, 2, False, False, EPOCHS + 3) for s in range(2)]
    got, _ = _run(files, 2, False, False, policy)
    for s in range(2):
        delivered = [step[s] for epoch in got for step in epoch]
        if policy == "FILL":
            padded = [c + [c[-1]] * (B - len(c)) for k in range(EPOCHS + 3) for c in _chunks(g[s][k])]
            assert delivered == padded[:len(delivered)]  # no loss, no repeat beyond the padding
        for e, epoch in enumerate(got):
            mine = [x for step in epoch for x in step[s]]
            if policy == "PARTIAL":
                assert mine == g[s][e]


def _items(it, count=None, epochs=EPOCHS):
    """The iterator's output as a flat list: each step's labels, and "END" where an epoch ends."""
    out, ends = [], 0
    while ends < epochs and (count is None or len(out) < count):
        try:
            out.append([b["label"].reshape(-1).tolist() for b in next(it)])
        except StopIteration:
            out.append("END")
            ends += 1
    return out


@pytest.mark.parametrize("shards,pad,policy", [(2, False, "FILL"), (1, True, "PARTIAL"), (2, True, "DROP"),
                                               (2, True, "FILL")])
def test_state_dict_resumes_exactly_under_skip(files, shards, pad, policy):
    def iterator():
        return DALIGenericIterator(_pipes(files, shards, pad, True, checkpointing=True), ["data", "label"],
                                   reader_name="Reader", last_batch_policy=LastBatchPolicy[policy], auto_reset=True)

    ref_it = iterator()
    reference = _items(ref_it)
    for p in ref_it._pipes:
        p.close()
    assert reference.count("END") == EPOCHS
    for stop in sorted({1, 2, reference.index("END"), reference.index("END") + 1, len(reference) - 2}):
        first = iterator()
        head = _items(first, stop)
        assert head == reference[:stop]
        state = first.state_dict()
        for p in first._pipes:
            p.close()
        resumed = iterator()
        resumed.load_state_dict(state)
        rest = _items(resumed, epochs=EPOCHS - head.count("END"))
        for p in resumed._pipes:
            p.close()
        assert rest == reference[stop:], stop


def test_without_auto_reset_and_first_batch_prepared_or_not(files):
    """reset() between epochs, and prepare_first_batch=False, give the same epochs as auto_reset."""
    expected, _ = _run(files, 2, True, True, "PARTIAL")
    for prepare in (True, False):
        it = DALIGenericIterator(_pipes(files, 2, True, True), ["data", "label"], reader_name="Reader",
                                 last_batch_policy=LastBatchPolicy.PARTIAL, prepare_first_batch=prepare)
        got = []
        for _ in range(EPOCHS):
            got.append([[b["label"].reshape(-1).tolist() for b in step] for step in it])
            it.reset()
            with pytest.warns(UserWarning, match="ignored"):
                it.reset()  # a second reset is too early: the new epoch has not ended
        assert got == [[s for s in epoch] for epoch in expected]
        for p in it._pipes:
            p.close()
