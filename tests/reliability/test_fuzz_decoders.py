"""Fuzzing the CPU decoders and the header parsers with mutated JPEG/PNG files.

Bit flips, truncations, byte overwrites and splices of valid files may give a
valid image or the documented error, nothing else: decode_cpu returns an HWC
uint8 array or raises ImageDecodeError; read_info returns an ImageInfo or
raises ImageFormatError; the operators (decoders.image, peek_image_shape)
return their output or raise OperatorError. A crash or hang fails the run
(pytest-timeout). Short by default; set STOKER_FUZZ_EXAMPLES for a longer run.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image
from reliability_images import jpeg_bytes, photo, pillow_bytes, png_bytes

from stoker import types
from stoker.errors import OperatorError
from stoker.operators.decoders.cpu import ImageDecodeError, decode_cpu
from stoker.operators.decoders.formats import ImageFormatError, ImageInfo, read_info

EXAMPLES = int(os.environ.get("STOKER_FUZZ_EXAMPLES", "150"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize="STOKER_FUZZ_EXAMPLES" not in os.environ,
                suppress_health_check=list(HealthCheck), database=None)
pytestmark = pytest.mark.timeout(60 + EXAMPLES // 5)


def _seeds() -> list[bytes]:
    img = photo(20, 24, seed=11)
    exif = Image.Exif()
    exif[0x0112] = 6
    return [
        jpeg_bytes(img),
        pillow_bytes(Image.fromarray(img), "JPEG", exif=exif.tobytes(), progressive=True),
        pillow_bytes(Image.fromarray(img).convert("CMYK"), "JPEG"),
        png_bytes(img),
        png_bytes(img[:, :, :1]),
        pillow_bytes(Image.fromarray(img).convert("P"), "PNG", transparency=0),
        pillow_bytes(Image.fromarray(img[:, :, :2], "LA"), "PNG"),
        png_bytes(img.astype(np.uint16) * 257),
    ]


SEEDS = _seeds()


@st.composite
def mutated(draw):
    """A seed file with a few random mutations (kept near the header, where parsers are fragile)."""
    data = bytearray(draw(st.sampled_from(SEEDS)))
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "byte", "truncate", "splice", "insert", "delete"]))
        n = len(data)
        if n == 0:
            break
        # Half of the positions in the first 64 bytes (headers), half anywhere.
        pos = draw(st.one_of(st.integers(0, min(63, n - 1)), st.integers(0, n - 1)))
        if kind == "flip":
            data[pos] ^= 1 << draw(st.integers(0, 7))
        elif kind == "byte":
            data[pos] = draw(st.sampled_from([0x00, 0xFF, 0x7F, 0x80, draw(st.integers(0, 255))]))
        elif kind == "truncate":
            del data[pos:]
        elif kind == "splice":
            other = draw(st.sampled_from(SEEDS))
            start = draw(st.integers(0, len(other) - 1))
            data[pos:] = other[start:]
        elif kind == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=16))
        else:
            del data[pos:pos + draw(st.integers(1, 16))]
    return bytes(data)


def _check_image(out, output_type):
    assert isinstance(out, np.ndarray) and out.dtype == np.uint8 and out.ndim == 3
    assert out.shape[0] > 0 and out.shape[1] > 0
    if output_type in (types.RGB, types.BGR, types.YCbCr):
        assert out.shape[2] == 3
    elif output_type == types.GRAY:
        assert out.shape[2] == 1
    assert out.flags.c_contiguous


@FUZZ
@given(data=mutated(), output_type=st.sampled_from([types.RGB, types.BGR, types.GRAY, types.ANY_DATA]))
def test_decode_cpu_gives_an_image_or_image_decode_error(data, output_type):
    try:
        out = decode_cpu(data, output_type)
    except ImageDecodeError:
        return
    _check_image(out, output_type)


@FUZZ
@given(data=mutated())
def test_read_info_gives_info_or_image_format_error(data):
    try:
        info = read_info(data)
    except ImageFormatError:
        return
    assert isinstance(info, ImageInfo)
    assert info.height > 0 and info.width > 0 and 1 <= info.channels <= 4 and 1 <= info.orientation <= 8


@FUZZ
@given(data=st.binary(max_size=64))
def test_short_random_bytes(data):
    for fn in (lambda: decode_cpu(data), lambda: read_info(data)):
        try:
            fn()
        except (ImageDecodeError, ImageFormatError):
            pass


@pytest.fixture(scope="module")
def operators():
    """decoders.image and peek_image_shape run eagerly through the same run_cpu the pipeline calls."""
    from stoker.operators.base import BatchContext
    from stoker.operators.decoders.image import ImageDecoder, PeekImageShape
    from stoker.tensors import TensorListCPU

    def make(cls):
        static, _ = cls.schema.bind({}, lambda v: False)
        return cls(static, "cpu")

    def run(op, data):
        batch = TensorListCPU([np.frombuffer(data, np.uint8)], "", ["fuzz.bin"])
        ctx = BatchContext(1, sources=["fuzz.bin"])
        return op.run_cpu(ctx, [batch], {})[0].at(0)

    return make(ImageDecoder), make(PeekImageShape), run


@FUZZ
@given(data=mutated())
def test_operators_give_output_or_operator_error(data, operators):
    decoder, peek, run = operators
    try:
        out = run(decoder, data)
    except OperatorError as e:
        assert e.operator == "decoders.image" and e.source == "fuzz.bin"
    else:
        _check_image(np.asarray(out), types.RGB)
    try:
        shape = np.asarray(run(peek, data))
    except OperatorError as e:
        assert e.operator == "peek_image_shape"
    else:
        assert shape.shape == (3,) and (shape > 0).all()
