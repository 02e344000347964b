"""fn.readers.tfrecord: features, order, shards, padding, shuffling, checkpoints and bad records.

The TFRecord files are written by the independent ``tfrecord`` package (protobuf-serialized
Examples, masked CRC-32C framing). DALI's CPU reader is the oracle for values, order, shard
boundaries, padding, shard rotation, source_info and reader_meta; the written values are the
oracle for the features DALI leaves undefined (a record lacking a feature).
"""

import json
import struct

import numpy as np
import pytest
from oracle import default_threads, libs

from stoker import fn, pipeline_def
from stoker import tfrecord as tfrec
from stoker.errors import OperatorError, PipelineBuildError

tfrecord_writer = pytest.importorskip("tfrecord.writer")

COUNTS = [4, 3, 5]  # records per file: 12, uneven shards for num_shards=3 with most batch sizes


def record(file: int, i: int) -> dict:
    """The features of record i of file ``file``: every value says which record it is."""
    n = 10 * file + i
    return {"image": bytes([file, i]) + b"\xab" * (n % 7), "label": [n],
            "vals": [n + 0.25 * k for k in range(n % 4)], "box": [n, -n, 2 ** 40 + n, -(2 ** 63) + n] * (1 + n % 2)}


def write(path, records):
    w = tfrecord_writer.TFRecordWriter(str(path))
    for r in records:
        w.write({"image": (r["image"], "byte"), "label": (r["label"], "int"), "vals": (r["vals"], "float"),
                 "box": (r["box"], "int"), **({"opt": (r["opt"], "int")} if "opt" in r else {})})
    w.close()


@pytest.fixture
def files(tmp_path):
    """(paths, index paths) of three TFRecord files; the indexes written by stoker's indexer."""
    from stoker._cli_index import tfrecord_index

    paths, indexes = [], []
    for f, n in enumerate(COUNTS):
        path = tmp_path / f"part{f}.tfrecord"
        write(path, [record(f, i) for i in range(n)])
        (tmp_path / f"part{f}.idx").write_text(tfrecord_index(str(path)))
        paths.append(str(path))
        indexes.append(str(tmp_path / f"part{f}.idx"))
    return paths, indexes


def features(tfr):
    return {"image": tfr.FixedLenFeature((), tfr.string, ""), "label": tfr.FixedLenFeature([1], tfr.int64, -1),
            "vals": tfr.VarLenFeature(tfr.float32, 0.0), "box": tfr.VarLenFeature([4], tfr.int64, 0)}


def by_name(out, names):
    """The reader's outputs by feature name (a dict in DALI, and in stoker with the graph hook)."""
    if isinstance(out, dict):
        assert list(out) == list(names)
        return out
    return dict(zip(names, out if isinstance(out, (list, tuple)) else [out]))


def make(lib, batch_size, seed=7, checkpoint=None, **args):
    fn_, deco, _ = libs(lib)
    if lib == "dali":
        import nvidia.dali.tfrecord as tfr

        extra = {}
    else:
        tfr = tfrec
        extra = dict(enable_checkpointing=True, checkpoint=checkpoint)
    feats = args.pop("features") if "features" in args else features(tfr)

    @deco(batch_size=batch_size, num_threads=default_threads(lib), device_id=None, seed=seed, **extra)
    def p():
        out = by_name(fn_.readers.tfrecord(name="R", features=feats, **args), feats)
        return tuple(out[k] for k in feats)

    pipe = p()
    pipe.build()
    return pipe


def read(pipe, iterations):
    """Per batch: per sample (each output's values as a list, source_info)."""
    out = []
    for _ in range(iterations):
        outs = pipe.run()
        out.append([tuple(np.array(o.at(i)).tolist() for o in outs) + (outs[0][i].source_info(),)
                    for i in range(len(outs[0]))])
    return out


# --- DALI as the oracle ------------------------------------------------------------------------

@pytest.mark.oracle
@pytest.mark.parametrize("bs", [1, 4, 5])
@pytest.mark.parametrize("pad,stick", [(False, False), (True, False), (False, True), (True, True)])
@pytest.mark.parametrize("indexed", [True, False])
def test_order_shards_padding_and_meta_match_dali(files, bs, pad, stick, indexed):
    paths, indexes = files
    n = sum(COUNTS)
    for sid in range(3):
        args = dict(path=paths, num_shards=3, shard_id=sid, pad_last_batch=pad, stick_to_shard=stick)
        ours = make("stoker", bs, index_path=indexes if indexed else None, **args)
        theirs = make("dali", bs, index_path=indexes, **args)
        iterations = 3 * (-(-n // bs)) + 2  # past three passes, so the shards rotate
        assert ours.reader_meta("R") == theirs.reader_meta("R")
        assert read(ours, iterations) == read(theirs, iterations), args


@pytest.mark.oracle
def test_dtypes_shapes_and_layouts_match_dali(files):
    paths, indexes = files
    ours, theirs = make("stoker", 6, path=paths, index_path=indexes), make("dali", 6, path=paths, index_path=indexes)
    for a, b in zip(ours.run(), theirs.run()):
        assert a.layout() == b.layout()
        for i in range(6):
            x, y = np.array(a.at(i)), np.array(b.at(i))
            assert x.dtype == y.dtype and x.shape == y.shape
            np.testing.assert_array_equal(x, y)


# --- the values written ---------------------------------------------------------------------------

def test_outputs_are_the_written_values(files):
    paths, _ = files
    pipe = make("stoker", sum(COUNTS), path=paths)
    image, label, vals, box = pipe.run()
    written = [record(f, i) for f, n in enumerate(COUNTS) for i in range(n)]
    offsets = [o for p in paths for o in _offsets(p)]
    sources = [f"{p} at index {o}" for p, n in zip(paths, COUNTS) for o in _offsets(p)]
    assert len(offsets) == len(written)
    for k, r in enumerate(written):
        assert bytes(image.at(k)) == r["image"] and image.at(k).dtype == np.uint8
        assert label.at(k).tolist() == r["label"] and label.at(k).dtype == np.int64
        np.testing.assert_array_equal(vals.at(k), np.asarray(r["vals"], np.float32))
        assert box.at(k).tolist() == np.reshape(r["box"], (-1, 4)).tolist()
        assert image[k].source_info() == sources[k]


def _offsets(path):
    """Record offsets from the framing, read here with struct (not with stoker)."""
    data, out, pos = open(path, "rb").read(), [], 0
    while pos < len(data):
        out.append(pos)
        pos += 16 + struct.unpack_from("<Q", data, pos)[0]
    return out


def test_missing_features_give_default_or_empty(tmp_path):
    path = tmp_path / "opt.tfrecord"
    recs = [dict(record(0, i), **({"opt": [i, i + 1, i + 2]} if i % 2 else {})) for i in range(4)]
    write(path, recs)
    feats = {"opt": tfrec.FixedLenFeature([3], tfrec.int64, 9), "name": tfrec.FixedLenFeature([], tfrec.string, "none"),
             "f": tfrec.FixedLenFeature([2], tfrec.float32, [0.5, 1.5])}
    pipe = make("stoker", 4, path=[str(path)], features=feats)
    opt, name, f = pipe.run()
    assert [opt.at(i).tolist() for i in range(4)] == [[9, 9, 9], [1, 2, 3], [9, 9, 9], [3, 4, 5]]
    assert all(bytes(name.at(i)) == b"none" for i in range(4))
    assert all(f.at(i).tolist() == [0.5, 1.5] and f.at(i).dtype == np.float32 for i in range(4))
    var = make("stoker", 4, path=[str(path)], features={"opt": tfrec.VarLenFeature([3], tfrec.int64, 0)}).run()[0]
    assert [var.at(i).shape for i in range(4)] == [(0, 3), (1, 3), (0, 3), (1, 3)]


def test_one_feature_and_ops_api(files):
    import stoker

    paths, indexes = files

    class P(stoker.Pipeline):
        def __init__(self):
            super().__init__(batch_size=2, num_threads=1, device_id=None)
            self.reader = stoker.ops.TFRecordReader(path=paths, index_path=indexes,
                                                    features={"label": tfrec.FixedLenFeature([], tfrec.int64, 0)})

        def define_graph(self):
            return by_name(self.reader(), ["label"])["label"]

    pipe = P()
    pipe.build()
    (labels,) = pipe.run()
    assert [int(labels.at(i)) for i in range(2)] == [0, 1] and labels.at(0).shape == ()


def test_graph_api_returns_a_dict_in_feature_order(files):
    paths, indexes = files
    feats = {"label": tfrec.FixedLenFeature([], tfrec.int64, 0), "image": tfrec.FixedLenFeature([], tfrec.string, "")}

    @pipeline_def(batch_size=2, num_threads=1, device_id=None)
    def p():
        out = fn.readers.tfrecord(path=paths, index_path=indexes, features=feats)
        assert isinstance(out, dict) and list(out) == ["label", "image"]
        return out["image"], out["label"]

    pipe = p()
    pipe.build()
    image, label = pipe.run()
    assert bytes(image.at(1)) == record(0, 1)["image"] and int(label.at(1)) == 1


# --- shuffling and checkpoints --------------------------------------------------------------------

def _shuffle_args(shuffle):
    both = shuffle == "both"  # DALI's container readers take both together
    return {"random_shuffle": both or shuffle == "random_shuffle",
            "shuffle_after_epoch": both or shuffle == "shuffle_after_epoch"}


@pytest.mark.parametrize("shuffle", ["random_shuffle", "shuffle_after_epoch", "both"])
def test_shuffled_passes_cover_each_shard_exactly_once(files, shuffle):
    paths, indexes = files
    n, ns = sum(COUNTS), 3
    everything = sorted(record(f, i)["image"] for f, c in enumerate(COUNTS) for i in range(c))
    per_pass = {k: [] for k in range(3)}
    for sid in range(ns):
        pipe = make("stoker", 1, path=paths, index_path=indexes, num_shards=ns, shard_id=sid, **_shuffle_args(shuffle))
        for k in range(3):
            shard = (sid + k) % ns
            size = n * (shard + 1) // ns - n * shard // ns
            got = [bytes(pipe.run()[0].at(0)) for _ in range(size)]
            assert len(set(got)) == size, f"pass {k} of shard {shard} repeats a record"
            per_pass[k] += got
    for k in range(3):
        assert sorted(per_pass[k]) == everything, f"pass {k}"


def test_checkpoint_resumes_exactly(files):
    paths, indexes = files
    args = dict(path=paths, index_path=indexes, random_shuffle=True, num_shards=3, shard_id=1, pad_last_batch=True)
    first = make("stoker", 3, **args)
    read(first, 4)
    cp = first.checkpoint()
    expected = read(first, 7)
    assert set(json.loads(cp)["sources"]["R"]) == {"epoch", "position", "shard"}
    assert read(make("stoker", 3, checkpoint=cp, **args), 7) == expected
    other = [paths[0], paths[2], paths[1]]  # another listing: the checkpoint is refused
    with pytest.raises(PipelineBuildError):
        make("stoker", 3, checkpoint=cp, **dict(args, path=other, index_path=[indexes[0], indexes[2], indexes[1]]))


# --- bad records ----------------------------------------------------------------------------------

def _corrupt(paths, file, rec, how):
    """Damage record ``rec`` of ``paths[file]``; returns its offset."""
    path = paths[file]
    offset = _offsets(path)[rec]
    data = bytearray(open(path, "rb").read())
    if how == "crc":  # one bit of the payload
        data[offset + 12 + 3] ^= 0x10
    elif how == "proto":  # a payload that is not an Example, with valid checksums
        payload = b"\x0a\x05\x0a\x03\x0a\x01"  # Example.features -> map entry claiming more bytes than it has
        length = struct.pack("<Q", len(payload))
        old = 16 + struct.unpack_from("<Q", data, offset)[0]
        framed = (length + tfrecord_writer.TFRecordWriter.masked_crc(length) + payload
                  + tfrecord_writer.TFRecordWriter.masked_crc(payload))
        data[offset:offset + old] = framed
    elif how == "truncated":  # the file ends inside its last record
        assert rec == len(_offsets(path)) - 1
        del data[-7:]
    open(path, "wb").write(bytes(data))
    return offset


@pytest.mark.parametrize("how", ["crc", "proto", "truncated"])
def test_bad_record_is_skipped_and_reported(files, how):
    paths, _ = files
    rec = COUNTS[1] - 1 if how == "truncated" else 1
    offset = _corrupt(paths, 1, rec, how)

    @pipeline_def(batch_size=4, num_threads=2, device_id=None, on_error="skip")
    def p():
        return by_name(fn.readers.tfrecord(path=paths, features=features(tfrec)), features(tfrec))["image"]

    pipe = p()
    pipe.build()
    got = [bytes(b.at(i)) for _ in range(3) for b in [pipe.run()[0]] for i in range(len(b))]
    bad = record(1, rec)["image"]
    expected = [record(f, i)["image"] for f, c in enumerate(COUNTS) for i in range(c) if (f, i) != (1, rec)]
    assert got[:len(expected)] == expected and bad not in got
    assert [r["source"] for r in pipe.error_report()] == [f"{paths[1]} at index {offset}"]


@pytest.mark.parametrize("how", ["crc", "proto"])
def test_bad_record_raises_naming_file_and_offset(files, how):
    paths, indexes = files
    offset = _corrupt(paths, 2, 3, how)
    pipe = make("stoker", 4, path=paths, index_path=indexes if how == "crc" else None)  # "proto" resizes it
    pipe.run(), pipe.run()
    with pytest.raises(OperatorError) as e:
        pipe.run()
    msg = str(e.value)
    assert msg.startswith("[R]") and f"{paths[2]}', record at offset {offset}" in msg


# --- arguments ------------------------------------------------------------------------------------

@pytest.mark.parametrize("case", ["index_count", "index_line", "no_features", "not_feature", "var_string",
                                  "long_string", "default", "missing"])
def test_argument_errors_name_the_argument(files, tmp_path, case):
    paths, indexes = files
    (tmp_path / "bad.idx").write_text("0 64\nzero 12\n")
    f = {"x": tfrec.FixedLenFeature([], tfrec.int64, 0)}
    args, arg, words = {
        "index_count": (dict(index_path=indexes[:2]), "index_path", "2 entries for 3 files"),
        "index_line": (dict(index_path=[str(tmp_path / "bad.idx")] * 3), "index_path", "bad.idx:2"),
        "no_features": (dict(features={}), "features", "non-empty dict"),
        "not_feature": (dict(features={"x": 3}), "features", "'x'"),
        "var_string": (dict(features={"x": tfrec.VarLenFeature(tfrec.string, "")}), "features", "one byte string"),
        "long_string": (dict(features={"x": tfrec.FixedLenFeature([2], tfrec.string, "")}), "features", "'x'"),
        "default": (dict(features={"x": tfrec.FixedLenFeature([2], tfrec.int64, [1, 2, 3])}), "features",
                    "default_value"),
        "missing": (dict(path=[str(tmp_path / "none.tfrecord")]), "path", "none.tfrecord"),
    }[case]
    args = {"path": paths, "features": f, "preserve": True, **args}  # (kept without outputs)
    with pytest.raises(PipelineBuildError, match="readers.tfrecord") as e:
        make("stoker", 2, **args)
    assert f"argument '{arg}'" in str(e.value) and words in str(e.value)


def test_feature_helpers_check_their_arguments():
    with pytest.raises(TypeError, match="dtype"):
        tfrec.FixedLenFeature([1], 7, 0)
    with pytest.raises(TypeError, match="shape"):
        tfrec.FixedLenFeature([-1], tfrec.int64, 0)
    with pytest.raises(TypeError, match="VarLenFeature"):
        tfrec.VarLenFeature(tfrec.int64)
    assert (tfrec.int64, tfrec.string, tfrec.float32) == (0, 1, 2)  # DALI's numbers
    assert tfrec.VarLenFeature([2], tfrec.float32, 0.0).shape == (2,)


def test_packed_varints_match_python_decoding():
    from stoker.operators.readers._tfrecord_format import packed_varints

    values = [0, 1, 127, 128, 300, 2 ** 31, 2 ** 63 - 1, -1, -(2 ** 63), -300]
    encoded = b""
    for v in values:
        u = v & (2 ** 64 - 1)
        while True:
            byte, u = u & 0x7F, u >> 7
            encoded += bytes([byte | (0x80 if u else 0)])
            if not u:
                break
    assert packed_varints(encoded).tolist() == values
