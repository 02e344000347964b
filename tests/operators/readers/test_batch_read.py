"""Container readers' batches through the I/O helper process (stoker.operators.readers._batch_read).

The helper path must give what the per-sample path gives (values, sources, failures), and hand
the mixed decoders one buffer: ``read_hints`` (located samples and their base) on byte outputs, from which the
JPEG frame hints are computed in bulk, equal to the per-sample scan.
"""

import io
import random
import tarfile

import cv2
import numpy as np
import pytest

from stoker import fn, pipeline_def, settings
from stoker.backend.jpeg_header import frame_hint
from stoker.backend.jpeg_header_bulk import frame_hints
from stoker.operators.decoders.mixed import frame_hints as decoder_frame_hints


def _jpegs(count: int, seed: int = 0) -> list[bytes]:
    rng = np.random.default_rng(seed)
    out = []
    for k in range(count):
        h, w = 8 + 8 * (k % 5), 16 + 4 * (k % 7)
        img = rng.integers(0, 255, (h, w, 3), np.uint8) if k % 4 else rng.integers(0, 255, (h, w), np.uint8)
        flags = [cv2.IMWRITE_JPEG_PROGRESSIVE, 1] if k % 6 == 5 else []
        out.append(cv2.imencode(".jpg", img, flags)[1].tobytes())
    return out


def _damaged(datas: list[bytes], seed: int = 1) -> list[bytes]:
    rng = random.Random(seed)
    out = []
    for d in datas:
        b = bytearray(d)
        kind = rng.randrange(7)
        if kind == 0:
            b = b[:rng.randrange(0, 12)]
        elif kind == 1:
            b = b[:len(b) // 2]
        elif kind == 2:
            b = b[:2] + b"\xff" * rng.randrange(1, 80) + b[2:]  # fill bytes (long runs: the exact walk)
        elif kind == 3:
            b = b[:2] + b"\xff\xe1\x00\x10Exif\x00\x00" + bytes(8) + b[2:]
        elif kind == 4:
            b[rng.randrange(2, min(60, len(b)))] = rng.randrange(256)
        elif kind == 5:
            b = b"\xff\xd8\xff\xda\x00\x02"
        out.append(bytes(b))
    return out


def test_read_hints_are_declared_and_only_on_the_readers_batch():
    """A batch has read_hints None unless a reader set them; a batch made from it has none (its
    addresses would not describe the copy), and the decoders then scan each sample."""
    from stoker.tensors import ReadHints, TensorListCPU

    buf = np.frombuffer(b"abcdefgh", np.uint8)
    tl = TensorListCPU([buf[:3], buf[3:]])
    assert tl.read_hints is None and decoder_frame_hints(tl) is None
    addrs = np.array([buf.ctypes.data, buf.ctypes.data + 3], np.uint64)
    tl.read_hints = ReadHints(located=(addrs, np.array([3, 5], np.uint64)), base=buf)
    assert tl.read_hints.frame_hints is None and TensorListCPU(tl).read_hints is None
    hints = np.zeros((2, 6), np.int64)
    tl.read_hints = ReadHints(frame_hints=hints)  # (given hints are used as they are)
    assert decoder_frame_hints(tl) is hints


def test_bulk_frame_hints_equal_the_per_sample_scan():
    datas = _jpegs(40) + _damaged(_jpegs(60, seed=3)) + [b"", b"\xff", b"\xff\xd8", b"\xff\xd8\xff"]
    sizes = [len(d) for d in datas]
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    buf = np.frombuffer(b"".join(datas) + b"\xff\xd9", np.uint8)  # bytes after the last sample: not its own
    want = np.array([frame_hint(memoryview(d)) for d in datas], np.int64)
    np.testing.assert_array_equal(frame_hints(buf, offsets, sizes), want)


@pytest.fixture
def tar_shard(tmp_path):
    datas = _jpegs(21)
    path = tmp_path / "shard.tar"
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tar:
        for i, d in enumerate(datas):
            for ext, payload in (("jpg", d), ("cls", str(i).encode())):
                info = tarfile.TarInfo(f"{i:04d}.{ext}")
                info.size = len(payload)
                tar.addfile(info, io.BytesIO(payload))
    return str(path), datas


def _read_all(path: str, helper: bool, batch: int = 8, iterations: int = 4):
    @pipeline_def(batch_size=batch, num_threads=4, device_id=None, seed=3)
    def pipe():
        return tuple(fn.readers.webdataset(paths=[path], ext=["jpg", "cls"], name="r"))

    with settings.override(reader_process=helper):
        p = pipe()
        p.build()
        try:
            runs = [p.run() for _ in range(iterations)]
        finally:
            p.close()
    return runs


def test_webdataset_batches_through_the_helper_match_and_carry_one_buffer(tar_shard):
    path, datas = tar_shard
    ours = _read_all(path, helper=True)
    theirs = _read_all(path, helper=False)
    for (img, cls), (img2, cls2) in zip(ours, theirs):
        assert img.source_info() == img2.source_info() and cls.source_info() == cls2.source_info()
        for a, b in zip([*img.samples(), *cls.samples()], [*img2.samples(), *cls2.samples()]):
            np.testing.assert_array_equal(a, b)
        assert img.read_hints is not None and img.read_hints.base is not None  # one buffer: one span
        want = np.array([frame_hint(memoryview(np.asarray(s))) for s in img.samples()], np.int64)
        np.testing.assert_array_equal(decoder_frame_hints(img), want)


def test_a_truncated_archive_fails_the_same_samples_through_the_helper(tar_shard, tmp_path):
    path, _ = tar_shard
    with open(path, "rb") as f:
        data = f.read()
    cut, index = str(tmp_path / "cut.tar"), str(tmp_path / "cut.idx")
    with tarfile.open(path) as tar:  # DALI's index of the whole archive, then the archive cut short
        members = [m for m in tar if m.isreg()]
    lines = [f"v1.2 {len(members) // 2}"] + [
        " ".join(f"{m.name.split('.', 1)[1]} {m.offset_data} {m.size} {m.name}" for m in pair)
        for pair in zip(members[::2], members[1::2])]
    with open(index, "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(cut, "wb") as f:
        f.write(data[:len(data) * 3 // 5])

    def read(helper):
        @pipeline_def(batch_size=8, num_threads=4, device_id=None, seed=3, on_error="skip")
        def pipe():
            return tuple(fn.readers.webdataset(paths=[cut], ext=["jpg", "cls"], name="r", index_paths=[index]))

        with settings.override(reader_process=helper):
            p = pipe()
            p.build()
            try:
                return [[np.asarray(s).tobytes() for s in p.run()[0].samples()] for _ in range(3)]
            finally:
                p.close()

    assert read(True) == read(False)
