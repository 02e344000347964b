"""peek_image_shape: header-only shapes, checked against the decoder and DALI."""

from __future__ import annotations

from unittest import mock

import numpy as np
import pytest
from decoder_helpers import as_u8, run_dali, run_stoker

from stoker.errors import OperatorError
from stoker.operators.decoders import formats
from stoker.operators.decoders.cpu import decode_cpu

# DALI reads simple WebP files only (not the extended layout that carries EXIF).
_DALI_BROKEN = {"exif8.webp"}


@pytest.mark.parametrize("image_type", ["RGB", "GRAY", "ANY_DATA"])
def test_peek_agrees_with_decoded_shape(images, image_type):
    from stoker import types

    names = list(images)
    datas = [as_u8(images[n]) for n in names]
    peek, peek_raw = run_stoker(datas, lambda x, fn, t: (
        fn.peek_image_shape(x, image_type=getattr(t, image_type)),
        fn.peek_image_shape(x, image_type=getattr(t, image_type), adjust_orientation=False, dtype=t.INT32)))
    for name, s, r, d in zip(names, peek, peek_raw, datas):
        assert s.dtype == np.int64 and r.dtype == np.int32
        assert tuple(s) == decode_cpu(d, getattr(types, image_type)).shape, name
        assert tuple(r) == decode_cpu(d, getattr(types, image_type), adjust_orientation=False).shape, name


def test_peek_does_not_decode(images):
    """Header parsing only: no OpenCV or Pillow pixel decoding happens."""
    datas = [as_u8(images[n]) for n in ("rgb.jpg", "rgb.png", "exif6.jpg", "rgb16.png")]
    with mock.patch("cv2.imdecode", side_effect=AssertionError("decoded")):
        (shapes,) = run_stoker(datas, lambda x, fn, t: fn.peek_image_shape(x))
    assert [tuple(s) for s in shapes] == [(37, 53, 3), (37, 53, 3), (53, 37, 3), (37, 53, 3)]


@pytest.mark.oracle
def test_peek_matches_dali(images):
    names = [n for n in images if n not in _DALI_BROKEN]
    datas = [as_u8(images[n]) for n in names]

    def build(x, fn, t):
        return fn.peek_image_shape(x), fn.peek_image_shape(x, adjust_orientation=False, dtype=t.INT32)

    ours = run_stoker(datas, build)
    ref = run_dali(datas, build)
    for k in range(2):
        for name, a, b in zip(names, ours[k], ref[k]):
            assert a.dtype == b.dtype and a.tolist() == b.tolist(), (name, a, b)


def test_peek_bad_header_names_file(images, tmp_path):
    from stoker import fn, pipeline_def

    bad = tmp_path / "not_an_image.jpg"
    bad.write_bytes(b"GIF89a but not really")

    @pipeline_def(batch_size=1, num_threads=1, device_id=None)
    def pipe():
        enc, _ = fn.readers.file(files=[str(bad)])
        return fn.peek_image_shape(enc)

    p = pipe()
    p.build()
    with pytest.raises(OperatorError, match="unrecognized image format") as e:
        p.run()
    assert str(bad) in str(e.value)


def test_jpeg_header_parser_with_large_exif_and_progressive():
    """SOF found after a big APP1 block; progressive (SOF2) frames work too."""
    import io

    from PIL import Image

    img = Image.fromarray(np.zeros((20, 30, 3), np.uint8))
    ex = Image.Exif()
    ex[0x0112] = 8
    ex[0x010E] = "x" * 30000  # ImageDescription: a 30 kB EXIF block before the frame header
    buf = io.BytesIO()
    img.save(buf, "JPEG", exif=ex.tobytes(), progressive=True)
    info = formats.read_info(buf.getvalue())
    assert (info.height, info.width, info.channels, info.orientation) == (20, 30, 3, 8)
    assert info.shape() == (30, 20, 3)


@pytest.mark.parametrize("blob,fmt", [
    (b"\xff\xd8\xff\xe0", formats.JPEG), (b"\x89PNG\r\n\x1a\n", formats.PNG), (b"BM\x00\x00", formats.BMP),
    (b"II*\x00", formats.TIFF), (b"MM\x00*", formats.TIFF), (b"RIFF\x00\x00\x00\x00WEBPVP8 ", formats.WEBP),
    (b"\x00\x00\x00\x0cjP  \r\n\x87\n", formats.JPEG2000), (b"\xff\x4f\xff\x51", formats.JPEG2000),
    (b"P6\n", formats.PNM), (b"P5 ", formats.PNM),
])
def test_detect_format_by_magic(blob, fmt):
    assert formats.detect_format(blob + b"\x00" * 8) == fmt


def test_detect_format_rejects_unknown():
    with pytest.raises(formats.ImageFormatError, match="unrecognized"):
        formats.detect_format(b"GIF89a" + b"\x00" * 10)
    with pytest.raises(formats.ImageFormatError, match="empty"):
        formats.detect_format(b"")
