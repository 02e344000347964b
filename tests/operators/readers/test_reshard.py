"""Resuming a reader at another number of shards from every old rank's checkpoint
(``Pipeline(checkpoint=[...])``, stoker.operators.readers._order.resharded_state): the old ranks'
reads plus the new ranks' resumed pass hold every file once, whatever the shard counts, the
shuffling and the step the old ranks stopped at; the new ranks' passes have one length; what
cannot be resumed that way is refused with a CheckpointError saying why."""

import collections

import numpy as np
import pytest

import stoker.fn as fn
from stoker import pipeline_def
from stoker.errors import CheckpointError

N, B = 23, 4


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("reshard")
    out = []
    for k in range(N):
        path = root / f"f{k:02d}.bin"
        path.write_bytes(bytes([k]) * (k + 1))
        out.append(str(path))
    return out


def _pipe(files, shard_id, num_shards, checkpoint=None, pad=True, **reader):
    @pipeline_def(batch_size=B, num_threads=1, device_id=None, seed=7, enable_checkpointing=True)
    def p():
        data, _ = fn.readers.file(files=files, shard_id=shard_id, num_shards=num_shards, pad_last_batch=pad,
                                  name="Reader", **reader)
        return data

    pipe = p(checkpoint=checkpoint)
    pipe.build()
    return pipe


def _read(pipe, steps):
    out = []
    for _ in range(steps):
        (data,) = pipe.run()
        out += [int(np.asarray(data.at(i))[0]) for i in range(len(data))]
    return out


def _stop(files, old, steps, **reader):
    """The old ranks' reads of their first ``steps`` batches, and their checkpoints."""
    seen, cps = [], []
    for r in range(old):
        pipe = _pipe(files, r, old, **reader)
        seen += _read(pipe, steps)
        cps.append(pipe.checkpoint())
        pipe.close()
    return seen, cps


@pytest.mark.parametrize("reader", [{}, {"random_shuffle": True}, {"shuffle_after_epoch": True},
                                    {"stick_to_shard": True}], ids=str)
@pytest.mark.parametrize("old, new, steps", [(2, 3, 1), (3, 2, 1), (2, 3, 2), (2, 1, 2), (2, 5, 1), (3, 4, 0)])
def test_the_interrupted_pass_is_read_once_over_both_runs(files, reader, old, new, steps):
    seen, cps = _stop(files, old, steps, **reader)
    lengths = set()
    for r in range(new):
        pipe = _pipe(files, r, new, checkpoint=cps, **reader)
        resumed = pipe.reader_meta("Reader")["resharded_pass"]
        lengths.add(resumed["length"])
        assert resumed["length"] % B == 0  # (padded to whole batches)
        seen += _read(pipe, resumed["length"] // B)[:resumed["real"]]
        pipe.close()
    assert len(lengths) == 1, "every new rank reads the same number of batches"
    counts = collections.Counter(seen)
    assert sorted(counts) == list(range(N)) and set(counts.values()) == {1}


def test_the_pass_after_is_the_new_world_sizes_own(files):
    _, cps = _stop(files, 2, 1, random_shuffle=True)
    seen = []
    for r in range(3):
        pipe = _pipe(files, r, 3, checkpoint=cps, random_shuffle=True)
        resumed = pipe.reader_meta("Reader")["resharded_pass"]
        _read(pipe, resumed["length"] // B)
        fresh = _pipe(files, r, 3, random_shuffle=True)
        _read(fresh, 2)  # (pass 0 of a run that started at 3 shards: 8 samples padded, 2 batches)
        want = _read(fresh, 2)  # its pass 1
        got = _read(pipe, 2)  # pass 1, after the resumed pass 0
        assert got == want
        assert "resharded_pass" not in pipe.reader_meta("Reader")
        seen.append(got)
        pipe.close()
        fresh.close()
    assert len(seen) == 3


def test_a_checkpoint_taken_in_the_resumed_pass_resumes_it_at_the_new_size(files):
    _, cps = _stop(files, 2, 1)
    pipe = _pipe(files, 1, 3, checkpoint=cps)
    first = _read(pipe, 1)
    mid = pipe.checkpoint()
    rest = _read(pipe, 1)
    pipe.close()
    again = _pipe(files, 1, 3, checkpoint=mid)
    assert again.reader_meta("Reader")["resharded_pass"]["length"] == 8
    assert first and _read(again, 1) == rest
    again.close()


def test_ranks_in_different_passes_are_refused(files):
    _, cps = _stop(files, 2, 1)
    pipe = _pipe(files, 1, 2)
    _read(pipe, 4)  # (rank 1 two passes on)
    cps[1] = pipe.checkpoint()
    pipe.close()
    with pytest.raises(CheckpointError, match="iterations|passes"):
        _pipe(files, 0, 3, checkpoint=cps)


def test_checkpoints_of_another_pipeline_are_refused(files):
    _, cps = _stop(files, 2, 1)
    _, other = _stop(files[:-1], 2, 1)
    with pytest.raises(CheckpointError, match="different pipelines"):
        _pipe(files, 0, 3, checkpoint=[cps[0], other[1]])
    with pytest.raises(CheckpointError, match="fingerprint|another pipeline|differs"):
        _pipe(files[:-1], 0, 3, checkpoint=cps)


def test_an_external_source_with_a_position_is_refused(files):
    from stoker.pipeline.checkpoint import resharded

    def cp(epoch):
        return {"iteration": 3, "sources": {"src": {"epoch": epoch, "iteration": 3}}}

    with pytest.raises(CheckpointError, match="not a reader"):
        resharded([cp(0), cp(0)])
    assert resharded([cp(0)])["sources"] == cp(0)["sources"]  # (one old rank: its position is kept)
    with pytest.raises(CheckpointError):
        resharded([])


def test_one_rank_resumed_on_several(files):
    seen, cps = _stop(files, 1, 2)
    for r in range(2):
        pipe = _pipe(files, r, 2, checkpoint=cps)
        resumed = pipe.reader_meta("Reader")["resharded_pass"]
        seen += _read(pipe, resumed["length"] // B)[:resumed["real"]]
        pipe.close()
    counts = collections.Counter(seen)
    assert sorted(counts) == list(range(N)) and set(counts.values()) == {1}


@pytest.mark.parametrize("pad, policy", [(False, "PARTIAL"), (True, "DROP")])
def test_an_iterator_that_cannot_count_the_resumed_pass_refuses_it(files, pad, policy):
    pytest.importorskip("torch")
    from stoker.plugin.pytorch import DALIGenericIterator, LastBatchPolicy

    _, cps = _stop(files, 2, 1, pad=pad)
    pipe = _pipe(files, 0, 3, checkpoint=[_with_iterator(c) for c in cps], pad=pad)
    try:
        with pytest.raises(CheckpointError, match="pad_last_batch=True"):
            DALIGenericIterator(pipe, ["data"], reader_name="Reader",
                                last_batch_policy=getattr(LastBatchPolicy, policy))
    finally:
        pipe.close()


def _with_iterator(cp: str) -> str:
    """A pipeline checkpoint as a framework iterator's carries it (with its own state inside)."""
    import json

    data = json.loads(cp)
    data["iterator"] = {"_counter": 4, "_size": 12, "num_shards": 2}
    return json.dumps(data)
