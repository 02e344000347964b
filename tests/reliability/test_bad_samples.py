"""Bad samples through fn.readers.file + fn.decoders.image (CPU), with on_error="raise" and "skip".

Each case is one class folder of 5 good JPEGs plus one special file. A broken
file must give a clear OperatorError under "raise" (operator, file, reason) and,
under "skip", full batches in which every good file appears exactly once per
epoch, the bad one listed in ``error_report()``. Unusual but valid files must
decode like an independent Pillow/OpenCV reference under both policies.
"""

from __future__ import annotations

import os
import struct
import time
import zlib

import cv2
import numpy as np
import pytest
from oracle import pipeline
from PIL import Image
from reliability_images import jpeg_bytes, photo, pillow_bytes, pillow_rgb, png_bytes

import stoker.fn as fn
from stoker import pipeline_def, types
from stoker.errors import OperatorError

GOOD = [f"good_{i}.jpg" for i in range(5)]
BAD = "c_special.jpg"  # sorts before the good_* files: read first, so "skip" must refill the batch
BATCH = 5
pytestmark = pytest.mark.timeout(60)


def _huge_png() -> bytes:
    """A small PNG whose IHDR (CRC fixed up) claims 100000 x 100000 pixels; JPEG cannot say that much."""
    data = bytearray(png_bytes(photo()))
    struct.pack_into(">II", data, 16, 100000, 100000)
    struct.pack_into(">I", data, 29, zlib.crc32(bytes(data[12:29])))
    return bytes(data)


def _huge_jpeg() -> bytes:
    """A small JPEG whose frame header is patched to claim 65535 x 65535 pixels (JPEG's maximum)."""
    data = bytearray(jpeg_bytes(photo()))
    sof = data.find(b"\xff\xc0")
    struct.pack_into(">HH", data, sof + 5, 65535, 65535)
    return bytes(data)


def _thin_jpeg() -> bytes:
    """A valid JPEG strip 4 x 5000: a side 1250 times the other, over max_aspect_ratio's default
    (1000). Every decoder refuses it from the header, the mixed ones' GPU paths included."""
    return jpeg_bytes(np.tile(photo(4, 50, seed=4), (1, 100, 1)))


def _truncated() -> bytes:
    data = jpeg_bytes(photo(64, 64, seed=3))
    return data[: len(data) // 3]


def _bad_huffman_table() -> bytes:
    """A JPEG whose headers are fine (the GPU engines take it) but whose Huffman table is bogus:
    the error comes only from decoding the entropy-coded data."""
    data = bytearray(jpeg_bytes(photo()))
    dht = data.find(b"\xff\xc4")
    data[dht + 5:dht + 21] = b"\xff" * 16  # code counts summing past 256
    return bytes(data)


def _cmyk_jpeg(ycck: bool) -> bytes:
    rgb = Image.fromarray(photo(20, 28, seed=5))
    data = bytearray(pillow_bytes(rgb.convert("CMYK"), "JPEG", quality=95))
    if ycck:  # Adobe APP14 transform flag 2: the four components are YCCK, not CMYK
        app14 = data.find(b"Adobe")  # APP14 body: "Adobe", version (2), flags0 (2), flags1 (2), transform
        assert app14 > 0, "Pillow wrote no Adobe marker"
        pos = app14 + 11
        assert data[pos] in (0, 1, 2)
        data[pos] = 2
    return bytes(data)


# name -> (bytes maker, reason fragments, operator as errors name it: the instance name if given)
BROKEN = {
    "truncated_jpeg": (_truncated, ["JPEG"], "decoders.image"),
    "bad_huffman_table": (_bad_huffman_table, ["JPEG"], "decoders.image"),
    "zero_bytes": (lambda: b"", ["empty"], "decoders.image"),
    "random_bytes": (lambda: np.random.default_rng(7).bytes(3000), ["unrecognized image format"], "decoders.image"),
    "huge_header": (_huge_png, ["max_pixels", "100000x100000"], "decoders.image"),
    "thin_jpeg": (_thin_jpeg, ["max_aspect_ratio", "5000x4"], "decoders.image"),
    "unreadable": (lambda: jpeg_bytes(photo()), ["cannot read file", "ermission"], "Reader"),
    "deleted": (lambda: jpeg_bytes(photo()), ["cannot read file", "No such file"], "Reader"),
}


def _make_dataset(root, special: bytes | None):
    cls = root / "cls"
    cls.mkdir(parents=True)
    for i, name in enumerate(GOOD):
        (cls / name).write_bytes(jpeg_bytes(photo(16 + i, 20, seed=i)))
    if special is not None:
        (cls / BAD).write_bytes(special)
    return cls


def _pipe(root, on_error, output_type=types.RGB, dtype=types.UINT8, **dec):
    @pipeline_def(batch_size=BATCH, num_threads=2, device_id=None, seed=0, on_error=on_error)
    def p():
        jpegs, labels = fn.readers.file(file_root=str(root), name="Reader")
        images = fn.decoders.image(jpegs, output_type=output_type, dtype=dtype, **dec)
        return images, labels, fn.get_property(jpegs, key="source_info")

    pipe = p()
    pipe.build()
    return pipe


def _names(sources) -> list[str]:
    return [os.path.basename(bytes(np.asarray(sources.at(i))).decode()) for i in range(len(sources))]


@pytest.fixture(params=sorted(BROKEN))
def broken(request, tmp_path):
    case = request.param
    make, reason, operator = BROKEN[case]
    cls = _make_dataset(tmp_path / "data", make())
    bad = cls / BAD
    if case == "unreadable":
        os.chmod(bad, 0)
        if os.access(bad, os.R_OK):
            pytest.skip("running with privileges that read a chmod 000 file")
    yield case, tmp_path / "data", bad, reason, operator
    if bad.exists():
        os.chmod(bad, 0o644)


def _break_after_listing(case, bad):
    if case == "deleted":  # the reader listed it at build; it disappears before the first read
        bad.unlink()


def test_raise_names_operator_file_and_reason(broken):
    case, root, bad, reason, operator = broken
    pipe = _pipe(root, "raise")
    _break_after_listing(case, bad)
    try:
        with pytest.raises(OperatorError) as info:
            pipe.run()
        err = info.value
        assert err.operator == operator
        assert BAD in err.source and BAD in str(err)
        for fragment in reason:
            assert fragment in str(err), f"{fragment!r} missing from: {err}"
    finally:
        pipe.close()


def test_skip_keeps_batches_full_and_each_good_file_once_per_epoch(broken):
    case, root, bad, _, operator = broken
    pipe = _pipe(root, "skip")
    _break_after_listing(case, bad)
    try:
        for _epoch in range(2):  # 5 good files = one full batch per epoch
            images, labels, sources = pipe.run()
            assert len(images) == len(labels) == BATCH
            assert sorted(_names(sources)) == GOOD
            for i in range(BATCH):
                img = images.at(i)
                assert img.dtype == np.uint8 and img.ndim == 3 and img.shape[2] == 3
        # The pipeline prefetches: later iterations may already have reported too.
        report = [r for r in pipe.error_report() if r["iteration"] < 2]
        assert [os.path.basename(r["source"]) for r in report] == [BAD, BAD]  # once per epoch
        assert all(r["operator"] == operator and r["action"] == "skipped" and r["reason"] for r in report)
    finally:
        pipe.close()


def test_huge_header_is_refused_before_decoding(tmp_path):
    """The limit is read from the header: refusing is instant and allocates no pixel buffer."""
    from stoker.operators.decoders.cpu import ImageDecodeError, decode_cpu

    for data in (_huge_png(), _huge_jpeg()):
        t0 = time.perf_counter()
        with pytest.raises(ImageDecodeError, match="max_pixels"):
            decode_cpu(data)
        assert time.perf_counter() - t0 < 0.5
    # A lower limit refuses a normal image; a limit it fits under decodes it.
    small = jpeg_bytes(photo(24, 32))
    with pytest.raises(ImageDecodeError, match="max_pixels=700"):
        decode_cpu(small, max_pixels=700)
    assert decode_cpu(small, max_pixels=768).shape == (24, 32, 3)
    # Other formats are checked through their header too.
    png = png_bytes(photo(24, 32))
    with pytest.raises(ImageDecodeError, match="max_pixels"):
        decode_cpu(png, max_pixels=100)
    bmp = pillow_bytes(Image.fromarray(photo(24, 32)), "BMP")
    with pytest.raises(ImageDecodeError, match="max_pixels"):
        decode_cpu(bmp, max_pixels=100)


def test_max_pixels_argument_is_checked(tmp_path):
    from stoker.errors import PipelineBuildError

    _make_dataset(tmp_path / "data", None)
    with pytest.raises(PipelineBuildError, match="max_pixels"):
        _pipe(tmp_path / "data", "raise", max_pixels=-1)
    pipe = _pipe(tmp_path / "data", "raise", max_pixels=100)  # 16x20 = 320 > 100
    try:
        with pytest.raises(OperatorError, match="max_pixels=100"):
            pipe.run()
    finally:
        pipe.close()


def test_pipeline_level_max_pixels_is_the_decoders_default(tmp_path):
    from stoker.errors import PipelineBuildError

    _make_dataset(tmp_path / "data", None)

    def make(**dec):
        @pipeline_def(batch_size=BATCH, num_threads=2, device_id=None, seed=0, max_pixels=100)
        def p():
            jpegs, _ = fn.readers.file(file_root=str(tmp_path / "data"))
            return fn.decoders.image(jpegs, **dec)

        pipe = p()
        pipe.build()
        return pipe

    pipe = make()
    try:
        with pytest.raises(OperatorError, match="max_pixels=100"):
            pipe.run()
    finally:
        pipe.close()
    pipe = make(max_pixels=0)  # the decoder's own argument wins: no limit
    try:
        (images,) = pipe.run()
        assert len(images) == BATCH
    finally:
        pipe.close()
    with pytest.raises(PipelineBuildError, match="max_pixels"):
        pipeline_def(lambda: fn.decoders.image(fn.readers.file(file_root=str(tmp_path))[0]),
                     batch_size=1, device_id=None, max_pixels=-5)()


# --- valid but unusual files: decoded correctly under both policies ------------------------

def _png_named_jpg():
    img = photo(18, 22, seed=9)
    return png_bytes(img), img, types.RGB, types.UINT8


def _png16():
    rng = np.random.default_rng(2)
    img16 = rng.integers(0, 65536, (12, 14, 3), dtype=np.uint16)
    ref = np.rint(img16.astype(np.float64) / 257.0).astype(np.uint8)  # 16 -> 8 bit: round(v / 257)
    return png_bytes(img16), ref, types.RGB, types.UINT8


def _png16_any_data():
    rng = np.random.default_rng(3)
    img16 = rng.integers(0, 65536, (12, 14, 3), dtype=np.uint16)
    return png_bytes(img16), img16, types.ANY_DATA, types.UINT16


def _gray_alpha():
    rng = np.random.default_rng(4)
    la = rng.integers(0, 256, (10, 12, 2), dtype=np.uint8)
    return pillow_bytes(Image.fromarray(la, "LA"), "PNG"), la, types.ANY_DATA, types.UINT8


def _gray_alpha_rgb():
    rng = np.random.default_rng(5)
    la = rng.integers(0, 256, (10, 12, 2), dtype=np.uint8)
    return pillow_bytes(Image.fromarray(la, "LA"), "PNG"), np.repeat(la[:, :, :1], 3, 2), types.RGB, types.UINT8


def _cmyk():
    data = _cmyk_jpeg(ycck=False)
    return data, pillow_rgb(data), types.RGB, types.UINT8


def _ycck():
    data = _cmyk_jpeg(ycck=True)
    return data, pillow_rgb(data), types.RGB, types.UINT8


def _stray_bytes():
    """Junk between two JPEG segments: libjpeg skips it with a warning, so the file must decode."""
    data = jpeg_bytes(photo(18, 22, seed=6))
    pos = 4 + int.from_bytes(data[4:6], "big")  # end of APP0
    data = data[:pos] + b"\x00\x12\x34" + data[pos:]
    ref = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)[:, :, ::-1]
    return data, ref, types.RGB, types.UINT8


VALID = {"jpeg_stray_bytes": _stray_bytes, "png_named_jpg": _png_named_jpg,
         "png_16bit": _png16, "png_16bit_any_data": _png16_any_data,
         "gray_alpha_png": _gray_alpha, "gray_alpha_png_rgb": _gray_alpha_rgb, "cmyk_jpeg": _cmyk,
         "ycck_jpeg": _ycck}


@pytest.mark.parametrize("on_error", ["raise", "skip"])
@pytest.mark.parametrize("case", sorted(VALID))
def test_unusual_valid_files_decode_like_the_reference(case, on_error, tmp_path):
    data, ref, output_type, dtype = VALID[case]()
    _make_dataset(tmp_path / "data", data)
    pipe = _pipe(tmp_path / "data", on_error, output_type=output_type, dtype=dtype)
    try:
        images, labels, sources = pipe.run()
        got = dict(zip(_names(sources), (images.at(i) for i in range(len(images)))))
        assert len(images) == BATCH and BAD in got
        np.testing.assert_array_equal(got[BAD], ref.reshape(got[BAD].shape))
        assert pipe.error_report() == []
    finally:
        pipe.close()


def test_cmyk_and_ycck_differ_from_a_naive_read(tmp_path):
    """Guard for the two cases above: the YCCK flag really changes the colours, so a decoder
    ignoring the Adobe transform would fail the comparison."""
    assert not np.array_equal(pillow_rgb(_cmyk_jpeg(False)), pillow_rgb(_cmyk_jpeg(True)))


# --- the listing ------------------------------------------------------------------------------

def test_directory_named_like_an_image_is_not_listed(tmp_path):
    cls = _make_dataset(tmp_path / "data", None)
    (cls / "dir.jpg").mkdir()
    (cls / "dir.jpg" / "inner.jpg").write_bytes(jpeg_bytes(photo()))
    for policy in ("raise", "skip"):
        pipe = _pipe(tmp_path / "data", policy)
        try:
            assert pipe.epoch_size("Reader") == len(GOOD)
            _, _, sources = pipe.run()
            assert sorted(_names(sources)) == GOOD
            assert pipe.error_report() == []
        finally:
            pipe.close()


def _empty_class_tree(root):
    for cls in ("a", "b_empty", "c"):
        (root / cls).mkdir(parents=True)
    for cls in ("a", "c"):
        (root / cls / "x.jpg").write_bytes(jpeg_bytes(photo()))


def _labels_and_sources(pipe):
    _, labels, sources = pipe.run()
    return [int(np.asarray(labels.at(i))[0]) for i in range(len(labels))], \
        [bytes(np.asarray(sources.at(i))).decode() for i in range(len(sources))]


def test_empty_class_folder_keeps_its_label_index(tmp_path):
    """Like DALI: labels are ranks of all sorted class folders, empty ones included."""
    _empty_class_tree(tmp_path)

    @pipeline_def(batch_size=2, num_threads=1, device_id=None, seed=0)
    def p():
        jpegs, labels = fn.readers.file(file_root=str(tmp_path))
        return fn.decoders.image(jpegs), labels, fn.get_property(jpegs, key="source_info")

    pipe = p()
    pipe.build()
    try:
        assert _labels_and_sources(pipe) == ([0, 2], ["a/x.jpg", "c/x.jpg"])
    finally:
        pipe.close()


@pytest.mark.oracle
def test_empty_class_folder_matches_dali(tmp_path):
    _empty_class_tree(tmp_path)

    def body(f, t):
        jpegs, labels = f.readers.file(file_root=str(tmp_path))
        return f.decoders.image(jpegs), labels, f.get_property(jpegs, key="source_info")

    results = []
    for lib in ("dali", "stoker"):
        pipe = pipeline(lib, body, 2, num_threads=1, seed=0)
        results.append((_labels_and_sources(pipe), pipe.epoch_size()))
        if hasattr(pipe, "close"):
            pipe.close()
    assert results[0][0] == results[1][0]
    assert list(results[0][1].values()) == list(results[1][1].values())


def test_file_list_entry_that_is_a_directory_is_a_clear_sample_error(tmp_path):
    """files=[...] naming a directory fails (or is skipped) like any unreadable file."""
    cls = _make_dataset(tmp_path / "data", None)
    (cls / "dir.jpg").mkdir()
    files = [f"cls/{n}" for n in GOOD[:2]] + ["cls/dir.jpg"] + [f"cls/{n}" for n in GOOD[2:]]

    def make(policy):
        @pipeline_def(batch_size=BATCH, num_threads=2, device_id=None, seed=0, on_error=policy)
        def p():
            jpegs, _ = fn.readers.file(file_root=str(tmp_path / "data"), files=files)
            return fn.decoders.image(jpegs), fn.get_property(jpegs, key="source_info")

        pipe = p()
        pipe.build()
        return pipe

    pipe = make("raise")
    try:
        with pytest.raises(OperatorError, match="dir.jpg") as info:
            pipe.run()
        assert info.value.operator == "readers.file"  # unnamed reader: the schema name
    finally:
        pipe.close()
    pipe = make("skip")
    try:
        _, sources = pipe.run()
        assert sorted(_names(sources)) == GOOD
    finally:
        pipe.close()


def test_cv2_reference_sanity():
    """The JPEG fixtures decode with OpenCV (so failures above come from the special files)."""
    assert cv2.imdecode(np.frombuffer(jpeg_bytes(photo()), np.uint8), cv2.IMREAD_COLOR) is not None


@pytest.mark.parametrize("on_error", ["raise", "skip"])
def test_permission_denied_when_running_as_root(on_error, tmp_path, monkeypatch):
    """The chmod 000 case above is skipped under root; here the reader's open() is made to fail
    with EACCES for the special file, as it would for an unprivileged user."""
    import builtins
    import errno

    from stoker.operators.readers import storage  # where the readers open local files

    cls = _make_dataset(tmp_path / "data", jpeg_bytes(photo()))

    def guarded_open(path, *args, **kwargs):
        if os.path.basename(str(path)) == BAD:
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
        return builtins.open(path, *args, **kwargs)

    monkeypatch.setattr(storage, "open", guarded_open, raising=False)
    pipe = _pipe(tmp_path / "data", on_error)
    try:
        if on_error == "raise":
            with pytest.raises(OperatorError, match="Permission denied") as info:
                pipe.run()
            assert info.value.operator == "Reader" and str(cls / BAD) in str(info.value)
        else:
            _, _, sources = pipe.run()
            assert sorted(_names(sources)) == GOOD
            assert os.path.basename(pipe.error_report()[0]["source"]) == BAD
    finally:
        pipe.close()
