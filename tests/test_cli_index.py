"""``stoker index tfrecord|webdataset``: the same index files as DALI's tfrecord2idx and wds2idx."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from stoker import cli

tfrecord_writer = pytest.importorskip("tfrecord.writer")
wds = pytest.importorskip("webdataset")


def _tfrecord(path, n, start=0):
    w = tfrecord_writer.TFRecordWriter(str(path))
    for i in range(start, start + n):
        w.write({"image": (bytes([i % 256]) * (i % 9 + 1), "byte"), "label": (i, "int")})
    w.close()
    return str(path)


def _tar(path, n, long_names=False):
    with wds.TarWriter(str(path)) as w:
        for i in range(n):
            key = f"{'deep/' * 30 if long_names else ''}s{i:03d}"
            w.write({"__key__": key, "jpg": bytes([i]) * (i + 1), "cls": str(i).encode()})
    return str(path)


def test_tfrecord_index_matches_dalis_tfrecord2idx(tmp_path, capsys):
    script = os.path.join(os.path.dirname(sys.executable), "tfrecord2idx")
    if not os.path.exists(script):
        pytest.skip("DALI's tfrecord2idx is not installed")
    a, b = _tfrecord(tmp_path / "a.tfrecord", 7), _tfrecord(tmp_path / "b.tfrecord", 3, start=40)
    assert cli.main(["index", "tfrecord", a, b]) == 0
    assert "a.tfrecord.idx: 7 records" in capsys.readouterr().out
    for path in (a, b):
        subprocess.run([sys.executable, script, path, path + ".dali"], check=True, capture_output=True)
        assert open(path + ".idx").read() == open(path + ".dali").read()


def test_webdataset_index_matches_dalis_wds2idx(tmp_path):
    wds2idx = pytest.importorskip("wds2idx")
    a = _tar(tmp_path / "shard-0.tar", 5)
    assert cli.main(["index", "webdataset", a]) == 0
    creator = wds2idx.IndexCreator(a, str(tmp_path / "dali.idx"), verbose=False)
    creator.create_index()
    creator.close()
    assert open(tmp_path / "shard-0.idx").read() == open(tmp_path / "dali.idx").read()


def test_webdataset_index_has_the_data_offsets_of_long_names(tmp_path):
    """Members with names past 100 characters (pax/GNU headers): the offsets are where the data is."""
    a = _tar(tmp_path / "long.tar", 3, long_names=True)
    out = tmp_path / "idx"
    assert cli.main(["index", "webdataset", a, "-o", str(out)]) == 0
    lines = open(out).read().splitlines()
    assert lines[0] == "v1.2 3"
    data = open(a, "rb").read()
    for i, line in enumerate(lines[1:]):
        fields = line.split()
        for ext, offset, size, name in zip(fields[::4], fields[1::4], fields[2::4], fields[3::4]):
            want = bytes([i]) * (i + 1) if ext == "jpg" else str(i).encode()
            assert data[int(offset):int(offset) + int(size)] == want and name.endswith(f"s{i:03d}.{ext}")


def test_output_folder_for_several_inputs(tmp_path):
    a, b = _tfrecord(tmp_path / "a.tfrecord", 2), _tfrecord(tmp_path / "b.tfrecord", 2)
    assert cli.main(["index", "tfrecord", a, b, "-o", str(tmp_path / "out")]) == 0
    assert sorted(os.listdir(tmp_path / "out")) == ["a.tfrecord.idx", "b.tfrecord.idx"]


def test_broken_record_fails_naming_file_and_offset_and_writes_nothing(tmp_path, capsys):
    a = _tfrecord(tmp_path / "a.tfrecord", 4)
    data = bytearray(open(a, "rb").read())
    second = 16 + int.from_bytes(data[:8], "little")  # offset of record 1
    data[second + 12] ^= 0xFF  # record 1 fails its checksum (where a crc32c package checks it) ...
    del data[-3:]  # ... and the last record is truncated (found without one)
    open(a, "wb").write(bytes(data))
    assert cli.main(["index", "tfrecord", a]) == 1
    err = capsys.readouterr().err
    assert err.startswith("stoker index: error:") and a in err and "offset" in err
    assert not os.path.exists(a + ".idx")


def test_not_a_tar_archive_fails(tmp_path, capsys):
    junk = tmp_path / "junk.tar"
    junk.write_bytes(b"\x01" * 2000)
    assert cli.main(["index", "webdataset", str(junk)]) == 1
    assert str(junk) in capsys.readouterr().err
