"""readers.caffe, readers.caffe2 and readers.coco through the I/O helper process (issue 22).

The helper path (:mod:`stoker.operators.readers._batch_read`) must be the one taken and give
exactly what the in-process path gives (which the oracle tests check against DALI): the same
samples and ``source_info`` across epoch boundaries, with shards, padding and shuffling. For
LMDB the helper opens the databases itself; a corrupt record (or a missing image file) is a
sample error naming the database and key (or the file), skipped and reported under
``on_error="skip"``.
"""

import os
import subprocess
import sys

import numpy as np
import pytest
from proto_writer import INT32, STRING, datum, tensor_proto, tensor_protos
from record_oracle import check_against_dali
from test_coco_reader import write_coco

from stoker import fn, pipeline_def, settings
from stoker.errors import OperatorError
from stoker.operators.readers._indexed import IndexedReader

lmdb = pytest.importorskip("lmdb")
pytestmark = pytest.mark.skipif(not hasattr(os, "memfd_create"), reason="the I/O helper needs Linux memfd_create")
N = 13  # records: uneven shards and a last batch that is not full


def write_lmdb(path, values):
    env = lmdb.open(str(path), map_size=1 << 24)
    with env.begin(write=True) as txn:
        for k, v in enumerate(values):
            txn.put(b"%04d" % k, v)
    env.close()
    return str(path)


def _image(k):
    return bytes([k, 0xCD]) + bytes(range(k % 7))


@pytest.fixture
def caffe_db(tmp_path):
    return write_lmdb(tmp_path / "caffe", [datum(data=_image(k), label=k - 4) for k in range(N)])


@pytest.fixture
def caffe2_db(tmp_path):
    return write_lmdb(tmp_path / "caffe2", [tensor_protos(tensor_proto(STRING, string_data=[_image(k)]),
                                                          tensor_proto(INT32, int32_data=[k])) for k in range(N)])


@pytest.fixture
def coco(tmp_path):
    root = str(tmp_path / "coco")
    return root, write_coco(root)


def _reader(name):
    return {"caffe": fn.readers.caffe, "caffe2": fn.readers.caffe2, "coco": fn.readers.coco}[name]


def _build(reader, helper, batch_size=4, on_error="raise", threads=2, **kwargs):
    @pipeline_def(batch_size=batch_size, num_threads=threads, device_id=None, seed=5, on_error=on_error)
    def p():
        return tuple(_reader(reader)(name="R", **kwargs))

    with settings.override(reader_process=helper):
        pipe = p()
        pipe.build()
    return pipe


def _instance(pipe) -> IndexedReader:
    return next(i for i in pipe._graph.instances.values() if isinstance(i, IndexedReader))


def _read(pipe, iterations):
    """Per sample: (source_info of each output, bytes and dtype of each output)."""
    out = []
    for _ in range(iterations):
        outs = pipe.run()
        for i in range(len(outs[0])):
            out.append(tuple((o[i].source_info(), np.asarray(o.at(i)).tobytes(), np.asarray(o.at(i)).dtype.str,
                              np.asarray(o.at(i)).shape) for o in outs))
    return out


def _args(kind, caffe_db, caffe2_db, coco):
    if kind == "caffe":
        return dict(path=caffe_db)
    if kind == "caffe2":
        return dict(path=caffe2_db)
    root, annotations = coco
    return dict(file_root=root, annotations_file=annotations, polygon_masks=True, image_ids=True)


CASES = [dict(), dict(num_shards=3, shard_id=1), dict(num_shards=3, shard_id=2, pad_last_batch=True),
         dict(random_shuffle=True), dict(num_shards=2, shard_id=0, random_shuffle=True, stick_to_shard=True)]


@pytest.mark.parametrize("kind", ["caffe", "caffe2", "coco"])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_helper_path_is_taken_and_gives_the_in_process_samples(kind, case, caffe_db, caffe2_db, coco, monkeypatch):
    args = {**_args(kind, caffe_db, caffe2_db, coco), **CASES[case]}
    here = _build(kind, helper=False, **args)
    want = _read(here, 10)  # 40 samples: three passes over a shard and more
    assert _instance(here)._reads is None
    here.close()

    cls = type(_instance(_build(kind, helper=False, **args)))
    calls = []
    original = cls.load_sample
    monkeypatch.setattr(cls, "load_sample", lambda self, i: calls.append(i) or original(self, i))
    pipe = _build(kind, helper=True, **args)
    try:
        got = _read(pipe, 10)
        reads = _instance(pipe)._reads
        assert reads is not None and reads.worker.alive()
        proc = reads.worker.proc
    finally:
        pipe.close()
    assert calls == []  # every sample came through the helper
    assert got == want
    assert proc.poll() is not None  # Pipeline.close stopped the helper


def test_auto_mode_reads_lmdb_through_the_helper_with_four_threads(caffe_db):
    few, many = _build("caffe", helper=None, path=caffe_db), _build("caffe", helper=None, threads=4, path=caffe_db)
    try:
        assert _read(few, 4) == _read(many, 4)
        assert _instance(few)._reads is None and _instance(many)._reads is not None
    finally:
        few.close()
        many.close()


def test_the_helper_opens_the_database_itself(caffe_db):
    pipe = _build("caffe", helper=True, path=caffe_db)
    try:
        pipe.run()
        pid = _instance(pipe)._reads.worker.proc.pid
        with open(f"/proc/{pid}/maps") as f:
            maps = f.read()
        assert os.path.join(caffe_db, "data.mdb") in maps  # the helper's own mapping of the database
    finally:
        pipe.close()


@pytest.mark.oracle
@pytest.mark.parametrize("kind", ["caffe", "caffe2", "coco"])
def test_helper_path_matches_dali(kind, caffe_db, caffe2_db, coco):
    with settings.override(reader_process=True):
        check_against_dali(f"readers.{kind}", 4, 9, num_shards=2, shard_id=1, **_args(kind, caffe_db, caffe2_db, coco))


# --- bad records ------------------------------------------------------------------------------

@pytest.fixture
def corrupt_db(tmp_path):
    """Record 0003 is not a protobuf message (a field number 0)."""
    values = [datum(data=_image(k), label=k) for k in range(N)]
    values[3] = b"\x00\x01\x02"
    return write_lmdb(tmp_path / "corrupt", values)


@pytest.mark.parametrize("helper", [True, False])
def test_a_corrupt_lmdb_record_is_skipped_and_reported(corrupt_db, helper):
    pipe = _build("caffe", helper=helper, on_error="skip", path=corrupt_db)
    try:
        got = _read(pipe, 3)  # 12 samples: the first pass (13 records, one skipped)
        if helper:
            assert _instance(pipe)._reads is not None
        report = pipe.error_report()
    finally:
        pipe.close()
    sources = [s[0][0] for s in got]
    assert f"{corrupt_db} at key 0003" not in sources
    assert sources[:3] == [f"{corrupt_db} at key {k:04d}" for k in range(3)]
    # (the pipeline may already be reading ahead into the next pass, where the record fails again)
    assert {r["source"] for r in report} == {f"{corrupt_db} at key 0003"}
    assert [r["source"] for r in report if r["iteration"] < 3] == [f"{corrupt_db} at key 0003"]
    assert "not a Caffe Datum" in report[0]["reason"]


def test_a_corrupt_lmdb_record_raises_naming_the_database_and_key(corrupt_db):
    pipe = _build("caffe", helper=True, path=corrupt_db)
    try:
        with pytest.raises(OperatorError, match="not a Caffe Datum") as info:
            pipe.run()
        assert f"{corrupt_db} at key 0003" in str(info.value)
    finally:
        pipe.close()


def test_a_record_gone_from_the_database_is_a_sample_error(caffe_db):
    """The helper opens the database at the first batch: a key deleted after listing is gone."""
    pipe = _build("caffe", helper=True, on_error="skip", path=caffe_db)
    try:
        # (another process: py-lmdb does not open a database twice in one)
        subprocess.run([sys.executable, "-c", "import lmdb, sys; env = lmdb.open(sys.argv[1]); "
                        "txn = env.begin(write=True); txn.delete(b'0002'); txn.commit()", caffe_db], check=True)
        got = _read(pipe, 1)
        report = pipe.error_report()
    finally:
        pipe.close()
    assert [s[0][0] for s in got][:3] == [f"{caffe_db} at key {k:04d}" for k in (0, 1, 3)]
    assert report[0]["source"] == f"{caffe_db} at key 0002" and "the key is gone" in report[0]["reason"]


@pytest.mark.parametrize("helper", [True, False])
def test_a_missing_coco_image_is_skipped_and_reported(coco, helper):
    root, annotations = coco
    gone = os.path.join(root, "images", "002.jpg")
    os.remove(gone)
    pipe = _build("coco", helper=helper, on_error="skip", batch_size=5, file_root=root,
                  annotations_file=annotations)
    try:
        got = _read(pipe, 2)  # 10 samples: the first pass (11 images, one skipped)
        report = pipe.error_report()
    finally:
        pipe.close()
    assert sorted(s[0][0] for s in got) == [f"images/{k:03d}.jpg" for k in range(11) if k != 2]
    # (reading ahead into the second pass, which the test does not take, may meet the file again
    # before the report is read: once or twice, depending on timing, and never another file)
    sources = [r["source"] for r in report]
    assert sources in (["images/002.jpg"], ["images/002.jpg"] * 2), sources
    assert gone in report[0]["reason"]


def test_a_missing_coco_image_raises_naming_the_file(coco):
    root, annotations = coco
    gone = os.path.join(root, "images", "001.jpg")
    os.remove(gone)
    pipe = _build("coco", helper=True, file_root=root, annotations_file=annotations)
    try:
        with pytest.raises(OperatorError, match="No such file") as info:
            for _ in range(3):  # (11 images, in id order)
                pipe.run()
        assert gone in str(info.value)
    finally:
        pipe.close()
