"""fn.readers.mxnet: RecordIO files written by a test helper from the format's description,
read by stoker and by DALI's CPU reader (the oracle that the files are right)."""

import struct

import numpy as np
import pytest
from record_oracle import (
    assert_same_batches,
    check_against_dali,
    check_random_shuffle_covers_shards,
    check_shards_against_dali,
    make_pipe,
    read,
)
from recordio_writer import MAGIC, image_payload, write_recordio

from stoker.errors import OperatorError, PipelineBuildError

N = 10


def _payloads(n, start=0):
    """Images of different lengths (some not multiples of 4), single and multi labels, and two
    payloads holding the magic number at aligned positions (written as multi-part records)."""
    out = []
    for k in range(start, start + n):
        image = bytes([k, 0xAB]) + bytes(range(k % 7))
        if k % 4 == 1:
            image += struct.pack("<I", MAGIC) + b"tail" * (k % 3) + struct.pack("<I", MAGIC)
        label = [float(k), k + 0.5, -1.0] if k % 3 == 2 else float(k) / 4
        out.append(image_payload(image, label, id_=k))
    return out


@pytest.fixture
def rec10(tmp_path):
    rec, idx = str(tmp_path / "d.rec"), str(tmp_path / "d.idx")
    write_recordio(rec, idx, _payloads(N))
    return dict(path=[rec], index_path=[idx])


@pytest.fixture
def rec_two_files(tmp_path):
    """Two .rec files and one index whose offsets run across both, as DALI expects."""
    a, b = str(tmp_path / "a.rec"), str(tmp_path / "b.rec")
    offsets_a = write_recordio(a, None, _payloads(4))
    offsets_b = write_recordio(b, None, _payloads(6, start=4))
    size_a = len(open(a, "rb").read())
    idx = str(tmp_path / "ab.idx")
    with open(idx, "w") as f:
        for k, off in enumerate(offsets_a + [size_a + o for o in offsets_b]):
            f.write(f"{k}\t{off}\n")
    return dict(path=[a, b], index_path=[idx])


@pytest.mark.oracle
@pytest.mark.parametrize("bs", [1, 3, 4])
def test_outputs_and_epochs_match_dali(rec10, bs):
    batches = check_against_dali("readers.mxnet", bs, 3 * -(-N // bs) + 1, **rec10)
    _, (image, label) = batches[0][0]
    assert image.dtype == np.uint8 and label.dtype == np.float32


@pytest.mark.oracle
def test_records_across_two_files_match_dali(rec_two_files):
    check_against_dali("readers.mxnet", 4, 7, **rec_two_files)


@pytest.mark.oracle
def test_shards_match_dali(rec10):
    check_shards_against_dali("readers.mxnet", N, **rec10)


def test_labels_and_multipart_records(rec10):
    pipe = make_pipe("stoker", "readers.mxnet", N, **rec10)
    (batch,) = read(pipe, 1)
    for k, (source, (image, label)) in enumerate(batch):
        expected_image = bytes([k, 0xAB]) + bytes(range(k % 7))
        if k % 4 == 1:
            expected_image += struct.pack("<I", MAGIC) + b"tail" * (k % 3) + struct.pack("<I", MAGIC)
        assert bytes(image) == expected_image
        np.testing.assert_array_equal(label, [k, k + 0.5, -1.0] if k % 3 == 2 else [k / 4])
        assert source.endswith("d.rec at index " + source.rsplit(" ", 1)[1])
    pipe.close()


def test_random_shuffle_covers_each_shard_once(rec10):
    check_random_shuffle_covers_shards("readers.mxnet", N, **rec10)


def test_shuffle_after_epoch_is_a_permutation(rec10):
    plain = [s for b in read(make_pipe("stoker", "readers.mxnet", 5, **rec10), 2) for s, _ in b]
    pipe = make_pipe("stoker", "readers.mxnet", 5, shuffle_after_epoch=True, **rec10)
    for _ in range(2):
        got = [s for b in read(pipe, 2) for s, _ in b]
        assert sorted(got) == sorted(plain)


def _corrupt(tmp_path):
    rec, idx = str(tmp_path / "bad.rec"), str(tmp_path / "bad.idx")
    offsets = write_recordio(rec, idx, _payloads(4))
    with open(rec, "r+b") as f:
        f.seek(offsets[2])
        f.write(b"\0\0\0\0")  # the third record's magic number
    return rec, idx, offsets[2]


def test_corrupt_record_is_skipped_and_reported(tmp_path):
    rec, idx, offset = _corrupt(tmp_path)
    pipe = make_pipe("stoker", "readers.mxnet", 3, path=rec, index_path=idx, on_error="skip")
    sources = [s for b in read(pipe, 1) for s, _ in b]  # records 0, 1, (2 fails), 3
    bad = f"{rec} at index {offset}"
    assert bad not in sources and len(sources) == 3
    assert {r["source"] for r in pipe.error_report()} == {bad}  # (once per read; a prefetched batch reads it too)
    pipe.close()


def test_corrupt_record_raises_naming_its_source(tmp_path):
    rec, idx, offset = _corrupt(tmp_path)
    pipe = make_pipe("stoker", "readers.mxnet", 4, path=rec, index_path=idx)
    with pytest.raises(OperatorError) as e:
        pipe.run()
    assert f"{rec} at index {offset}" in str(e.value) and "magic" in str(e.value)
    pipe.close()


@pytest.mark.parametrize("case", ["two_indexes", "missing_index", "empty_index", "outside"])
def test_build_errors_name_the_argument(rec10, tmp_path, case):
    args = dict(rec10)
    if case == "two_indexes":
        args["index_path"] = args["index_path"] * 2
        arg = "index_path"
    elif case == "missing_index":
        args["index_path"] = [str(tmp_path / "nope.idx")]
        arg = "index_path"
    elif case == "empty_index":
        (tmp_path / "e.idx").write_text("")
        args["index_path"] = [str(tmp_path / "e.idx")]
        arg = "index_path"
    else:
        (tmp_path / "o.idx").write_text("0 0\n1 999999\n")
        args["index_path"] = [str(tmp_path / "o.idx")]
        arg = "index_path"
    with pytest.raises(PipelineBuildError) as e:
        make_pipe("stoker", "readers.mxnet", 2, **args)
    assert "readers.mxnet 'R'" in str(e.value) and f"argument '{arg}'" in str(e.value)


def test_checkpoint_resumes(rec10):
    from stoker import fn, pipeline_def

    def make(cp=None):
        @pipeline_def(batch_size=3, num_threads=2, device_id=None, enable_checkpointing=True, checkpoint=cp)
        def p():
            return tuple(fn.readers.mxnet(name="R", random_shuffle=True, **rec10))

        pipe = p()
        pipe.build()
        return pipe

    first = make()
    read(first, 2)
    cp = first.checkpoint()
    assert_same_batches(read(make(cp), 4), read(first, 4))
