"""fn.readers.caffe and fn.readers.caffe2: LMDB databases written with the ``lmdb`` package,
records encoded by the test's own protobuf writer (proto_writer.py), read by stoker and by
DALI's CPU readers (the oracle that the encoding is right)."""

import numpy as np
import pytest
from proto_writer import BYTE, FLOAT, INT32, INT64, STRING, datum, tensor_proto, tensor_protos
from record_oracle import (
    check_against_dali,
    check_random_shuffle_covers_shards,
    check_shards_against_dali,
    make_pipe,
    read,
)

from stoker.errors import OperatorError, PipelineBuildError

lmdb = pytest.importorskip("lmdb")
N = 10


def write_lmdb(path, values, keys=None):
    env = lmdb.open(str(path), map_size=1 << 24)
    with env.begin(write=True) as txn:
        for k, v in enumerate(values):
            txn.put(keys[k] if keys else b"%04d" % k, v)
    env.close()
    return str(path)


def _image(k):
    return bytes([k, 0xCD]) + bytes(range(k % 5))


@pytest.fixture
def caffe10(tmp_path):
    # labels include negatives (ten-byte varints); some datums say encoded=True, most leave it out
    values = [datum(data=_image(k), label=k - 4, encoded=True if k % 3 == 0 else None) for k in range(N)]
    return write_lmdb(tmp_path / "caffe", values)


@pytest.fixture
def caffe2_10(tmp_path):
    values = [tensor_protos(tensor_proto(STRING, string_data=[_image(k)]),
                            tensor_proto(INT32, int32_data=[k - 3], packed=k % 2 == 0)) for k in range(N)]
    return write_lmdb(tmp_path / "caffe2", values)


# --- caffe -------------------------------------------------------------------------------------

@pytest.mark.oracle
@pytest.mark.parametrize("bs", [1, 4])
def test_caffe_matches_dali(caffe10, bs):
    batches = check_against_dali("readers.caffe", bs, 3 * -(-N // bs) + 1, path=caffe10)
    source, (image, label) = batches[0][0]
    assert source == f"{caffe10} at key 0000" and label.dtype == np.int32 and label.shape == (1,)


@pytest.mark.oracle
def test_caffe_two_databases_and_shards_match_dali(tmp_path, caffe10):
    other = write_lmdb(tmp_path / "more", [datum(data=b"x" * k, label=100 + k) for k in range(1, 4)],
                       keys=[b"b", b"a", b"c"])  # listed in key order, not insertion order
    check_against_dali("readers.caffe", 3, 6, path=[caffe10, other])
    check_shards_against_dali("readers.caffe", N, path=caffe10)


@pytest.mark.oracle
@pytest.mark.parametrize("image,label", [(True, False), (False, True)])
def test_caffe_image_or_label_only_matches_dali(caffe10, image, label):
    check_against_dali("readers.caffe", 4, 3, path=caffe10, image_available=image, label_available=label)


@pytest.mark.oracle
def test_caffe_raw_pixels_match_dali(tmp_path):
    path = write_lmdb(tmp_path / "raw", [datum(data=bytes(range(k, k + 24)), label=k, channels=3, height=2, width=4,
                                               encoded=False) for k in range(5)])
    batches = check_against_dali("readers.caffe", 5, 2, path=path)
    assert batches[0][0][1][0].shape == (2, 4, 3)


def test_caffe_random_shuffle_covers_each_shard_once(caffe10):
    check_random_shuffle_covers_shards("readers.caffe", N, path=caffe10)


def _corrupt_db(tmp_path, make_good):
    values = [make_good(k) for k in range(4)]
    values[2] = b"\x0a\xff\xff\x03ab"  # a length-delimited field claiming more bytes than there are
    return write_lmdb(tmp_path / "bad", values)


@pytest.mark.parametrize("reader", ["readers.caffe", "readers.caffe2"])
def test_corrupt_record_is_skipped_and_reported(tmp_path, reader):
    good = (lambda k: datum(data=_image(k), label=k)) if reader == "readers.caffe" else \
        (lambda k: tensor_protos(tensor_proto(STRING, string_data=[_image(k)]), tensor_proto(INT32, int32_data=[k])))
    path = _corrupt_db(tmp_path, good)
    pipe = make_pipe("stoker", reader, 3, path=path, on_error="skip")
    sources = [s for b in read(pipe, 1) for s, _ in b]
    assert sources == [f"{path} at key 0000", f"{path} at key 0001", f"{path} at key 0003"]
    # (the batch prefetched behind it may have met the record again: reported per read)
    assert {r["source"] for r in pipe.error_report()} == {f"{path} at key 0002"}
    pipe.close()


@pytest.mark.parametrize("reader", ["readers.caffe", "readers.caffe2"])
def test_corrupt_record_raises_naming_its_source(tmp_path, reader):
    img = tensor_proto(STRING, string_data=[b"a"])
    path = _corrupt_db(tmp_path, lambda k: datum(data=b"a", label=k) if reader == "readers.caffe"
                       else tensor_protos(img, tensor_proto(INT32, int32_data=[k])))
    pipe = make_pipe("stoker", reader, 4, path=path)
    with pytest.raises(OperatorError) as e:
        pipe.run()
    assert f"{path} at key 0002" in str(e.value) and ("Datum" in str(e.value) or "TensorProtos" in str(e.value))
    pipe.close()


def test_caffe_missing_label_names_the_argument(tmp_path):
    path = write_lmdb(tmp_path / "nolabel", [datum(data=b"abc")])
    with pytest.raises(OperatorError, match="label_available=False"):
        make_pipe("stoker", "readers.caffe", 1, path=path).run()


def test_missing_database_names_the_argument(tmp_path):
    with pytest.raises(PipelineBuildError) as e:
        make_pipe("stoker", "readers.caffe", 1, path=str(tmp_path / "nope"))
    assert "readers.caffe 'R'" in str(e.value) and "argument 'path'" in str(e.value)


def test_missing_lmdb_package_is_named(monkeypatch, caffe10):
    import sys

    monkeypatch.setitem(sys.modules, "lmdb", None)
    with pytest.raises(ImportError, match="pip install lmdb"):
        make_pipe("stoker", "readers.caffe", 1, path=caffe10)


# --- caffe2 ------------------------------------------------------------------------------------

@pytest.mark.oracle
@pytest.mark.parametrize("bs", [1, 4])
def test_caffe2_matches_dali(caffe2_10, bs):
    check_against_dali("readers.caffe2", bs, 3 * -(-N // bs) + 1, path=caffe2_10)


@pytest.mark.oracle
def test_caffe2_shards_match_dali(caffe2_10):
    check_shards_against_dali("readers.caffe2", N, path=caffe2_10)


def _records(make, n=4):
    return [make(k) for k in range(n)]


CAFFE2_CASES = {
    # name: (records, reader arguments)
    "float_label": (lambda k: tensor_protos(tensor_proto(STRING, string_data=[_image(k)]),
                                            tensor_proto(FLOAT, float_data=[k / 2])), {}),
    "default_type_is_float": (lambda k: tensor_protos(tensor_proto(STRING, string_data=[_image(k)]),
                                                      tensor_proto(None, float_data=[k + 0.25])), {}),
    "dense": (lambda k: tensor_protos(tensor_proto(STRING, string_data=[_image(k)]),
                                      tensor_proto(FLOAT, float_data=[k, 0.5, -1.0], packed=False)),
              dict(label_type=2, num_labels=3)),
    "no_label": (lambda k: tensor_protos(tensor_proto(STRING, string_data=[_image(k)])), dict(label_type=4)),
    "no_image": (lambda k: tensor_protos(tensor_proto(INT32, int32_data=[k])), dict(image_available=False)),
    "raw_pixels": (lambda k: tensor_protos(tensor_proto(BYTE, dims=[2, 3, 2], byte_data=bytes(range(k, k + 12))),
                                           tensor_proto(INT32, int32_data=[k])), {}),
    "raw_gray": (lambda k: tensor_protos(tensor_proto(BYTE, dims=[3, 2], byte_data=bytes(range(k, k + 6))),
                                         tensor_proto(INT32, int32_data=[k])), {}),
    "extras_and_bbox": (lambda k: tensor_protos(
        tensor_proto(STRING, string_data=[_image(k)]), tensor_proto(INT32, int32_data=[k]),
        tensor_proto(FLOAT, float_data=[k, 2.5]), tensor_proto(INT64, int64_data=[1 << 40, -k]),
        tensor_proto(INT32, int32_data=[k, 1, 2, 3 + k])), dict(additional_inputs=2, bbox=True)),
}


@pytest.mark.oracle
@pytest.mark.parametrize("case", sorted(CAFFE2_CASES))
def test_caffe2_record_layouts_match_dali(tmp_path, case):
    make, args = CAFFE2_CASES[case]
    path = write_lmdb(tmp_path / case, _records(make))
    check_against_dali("readers.caffe2", 2, 3, path=path, **args)


def test_caffe2_sparse_labels(tmp_path):
    # DALI 2.4 fails on label types 1 and 3 (see caffe2.py); checked against Caffe2's meaning
    path = write_lmdb(tmp_path / "sparse", [tensor_protos(tensor_proto(STRING, string_data=[b"i"]),
                                                          tensor_proto(INT32, int32_data=[1, 3]),
                                                          tensor_proto(FLOAT, float_data=[7.5]))])
    (batch,) = read(make_pipe("stoker", "readers.caffe2", 1, path=path, label_type=1, num_labels=5,
                              additional_inputs=1), 1)
    image, hot, extra = batch[0][1]
    assert hot.dtype == np.int32 and hot.tolist() == [0, 1, 0, 1, 0] and extra.tolist() == [7.5]
    path = write_lmdb(tmp_path / "weighted", [tensor_protos(tensor_proto(STRING, string_data=[b"i"]),
                                                            tensor_proto(INT32, int32_data=[4, 0]),
                                                            tensor_proto(FLOAT, float_data=[0.5, 2.0]))])
    (batch,) = read(make_pipe("stoker", "readers.caffe2", 1, path=path, label_type=3, num_labels=5), 1)
    weights = batch[0][1][1]
    assert weights.dtype == np.float32 and weights.tolist() == [2.0, 0, 0, 0, 0.5]


@pytest.mark.parametrize("case,words", [
    ("two_labels", "one value"), ("short", "holds 1 tensors"), ("bad_index", "num_labels=2"),
    ("bad_bbox", "INT32 with 4 values"), ("bad_image_type", "STRING (encoded) or BYTE")])
def test_caffe2_bad_records_name_the_record_and_tensor(tmp_path, case, words):
    img = tensor_proto(STRING, string_data=[b"i"])
    record, args = {
        "two_labels": (tensor_protos(img, tensor_proto(INT32, int32_data=[1, 2])), {}),
        "short": (tensor_protos(img), {}),
        "bad_index": (tensor_protos(img, tensor_proto(INT32, int32_data=[2])), dict(label_type=1, num_labels=2)),
        "bad_bbox": (tensor_protos(img, tensor_proto(INT32, int32_data=[1]), tensor_proto(INT32, int32_data=[1, 2])),
                     dict(bbox=True)),
        "bad_image_type": (tensor_protos(tensor_proto(INT32, int32_data=[1]), tensor_proto(INT32, int32_data=[1])),
                           {}),
    }[case]
    path = write_lmdb(tmp_path / case, [record])
    with pytest.raises(OperatorError) as e:
        make_pipe("stoker", "readers.caffe2", 1, path=path, **args).run()
    assert f"{path} at key 0000" in str(e.value) and words in str(e.value)


def test_caffe2_random_shuffle_covers_each_shard_once(caffe2_10):
    check_random_shuffle_covers_shards("readers.caffe2", N, path=caffe2_10)


@pytest.mark.parametrize("args,arg", [(dict(label_type=7), "label_type"),
                                      (dict(label_type=1, num_labels=0), "num_labels")])
def test_caffe2_argument_errors(caffe2_10, args, arg):
    with pytest.raises(PipelineBuildError) as e:
        make_pipe("stoker", "readers.caffe2", 1, path=caffe2_10, **args)
    assert f"argument '{arg}'" in str(e.value)


def test_legacy_ops_names(caffe10, caffe2_10):
    from stoker import ops

    assert ops.CaffeReader and ops.Caffe2Reader and ops.readers.Caffe and ops.readers.Caffe2
