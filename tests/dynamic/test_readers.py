"""Eager readers (ndd.readers.File): epochs, shards and padding as DALI's dynamic mode has them."""

import numpy as np
import pytest

import stoker.dynamic as ndd
from stoker.plugin.base_iterator import LastBatchPolicy

N_FILES = 7


@pytest.fixture(scope="module")
def seven_files(tmp_path_factory):
    """7 one-byte files in 7 class folders: file k has label k and holds the byte k + 1."""
    root = tmp_path_factory.mktemp("seven_dyn")
    for k in range(N_FILES):
        d = root / f"class{k}"
        d.mkdir()
        (d / "sample.jpg").write_bytes(bytes([k + 1]))
    return str(root)


def _labels(module, reader, epochs=3, **kw):
    out = []
    for _ in range(epochs):
        out.append([np.asarray(labels.torch() if module is not ndd else labels).reshape(-1).tolist()
                    for _, labels in reader.next_epoch(batch_size=2, **kw)])
    return out


@pytest.mark.oracle
@pytest.mark.parametrize("pad", [False, True])
@pytest.mark.parametrize(("shards", "shard_id"), [(1, 0), (2, 0), (2, 1), (3, 2), (3, 1)])
def test_epochs_match_dali_dynamic_mode(seven_files, pad, shards, shard_id):
    dndd = pytest.importorskip("nvidia.dali.experimental.dynamic")
    kw = dict(file_root=seven_files, pad_last_batch=pad, num_shards=shards, shard_id=shard_id)
    ours = _labels(ndd, ndd.readers.File(**kw))
    theirs = _labels(dndd, dndd.readers.File(**kw))
    assert ours == theirs


def test_batches_carry_data_labels_and_sources(seven_files):
    reader = ndd.readers.File(file_root=seven_files)
    data, labels = next(iter(reader.next_epoch(batch_size=3)))
    assert isinstance(data, ndd.Batch) and len(data) == 3
    assert [np.asarray(t).tolist() for t in data.tensors] == [[1], [2], [3]]
    assert np.asarray(labels).reshape(-1).tolist() == [0, 1, 2]
    assert data.source_info() == ["class0/sample.jpg", "class1/sample.jpg", "class2/sample.jpg"]


def test_partial_policy_reads_every_sample_exactly_once_per_epoch(seven_files):
    reader = ndd.readers.File(file_root=seven_files, random_shuffle=True, seed=4)
    seen = []
    for _ in range(3):
        epoch = [x for _, lab in reader.next_epoch(batch_size=3, last_batch_policy=LastBatchPolicy.PARTIAL)
                 for x in np.asarray(lab).reshape(-1).tolist()]
        assert sorted(epoch) == list(range(N_FILES))
        seen.append(epoch)
    assert len({tuple(e) for e in seen}) > 1  # shuffled differently each epoch


def test_drop_policy_leaves_out_the_incomplete_batch(seven_files):
    reader = ndd.readers.File(file_root=seven_files)
    for _ in range(2):
        batches = [np.asarray(lab).reshape(-1).tolist()
                   for _, lab in reader.next_epoch(batch_size=3, last_batch_policy=LastBatchPolicy.DROP)]
        assert batches == [[0, 1, 2], [3, 4, 5]]


def test_samples_without_batch_size(seven_files):
    reader = ndd.readers.File(file_root=seven_files)
    labels = [int(lab.item()) for _, lab in reader.next_epoch()]
    assert labels == list(range(N_FILES))


def test_epoch_left_early_is_skipped(seven_files):
    reader = ndd.readers.File(file_root=seven_files)
    for _ in reader.next_epoch(batch_size=2, last_batch_policy=LastBatchPolicy.PARTIAL):
        break
    nxt = [np.asarray(lab).reshape(-1).tolist()
           for _, lab in reader.next_epoch(batch_size=2, last_batch_policy=LastBatchPolicy.PARTIAL)]
    assert nxt == [[0, 1], [2, 3], [4, 5], [6]]


def test_reader_output_feeds_operators(seven_files):
    reader = ndd.readers.File(file_root=seven_files)
    data, _ = next(iter(reader.next_epoch(batch_size=4)))
    doubled = data * 2
    assert [np.asarray(t).tolist() for t in doubled.tensors] == [[2], [4], [6], [8]]


def test_meta_and_bad_arguments(seven_files, tmp_path):
    reader = ndd.readers.File(file_root=seven_files, num_shards=2, shard_id=1, pad_last_batch=True)
    meta = reader.meta()
    assert meta["epoch_size"] == N_FILES and meta["number_of_shards"] == 2 and meta["epoch_size_padded"] == 8
    with pytest.raises(Exception, match="file_root"):
        ndd.readers.File(file_root=str(tmp_path / "missing")).meta()
    with pytest.raises(AttributeError, match="no reader"):
        ndd.readers.NotAReader  # noqa: B018


@pytest.mark.oracle
@pytest.mark.parametrize("stick", [False, True])
def test_stick_to_shard_matches_dali_dynamic_mode(seven_files, stick):
    dndd = pytest.importorskip("nvidia.dali.experimental.dynamic")
    kw = dict(file_root=seven_files, num_shards=3, shard_id=2, stick_to_shard=stick)
    assert _labels(ndd, ndd.readers.File(**kw), epochs=4) == _labels(dndd, dndd.readers.File(**kw), epochs=4)


def test_single_samples_over_a_shard_and_chunk_boundaries(tmp_path):
    for k in range(40):
        d = tmp_path / f"c{k:02d}"
        d.mkdir()
        (d / "x.jpg").write_bytes(bytes([k]))
    reader = ndd.readers.File(file_root=str(tmp_path), num_shards=2, shard_id=1)
    first = [int(lab.item()) for _, lab in reader.next_epoch()]
    second = [int(lab.item()) for _, lab in reader.next_epoch()]
    assert first == list(range(20, 40)) and second == list(range(20))
