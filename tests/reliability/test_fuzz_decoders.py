"""Fuzzing the CPU decoders and the header parsers with mutated files of every container format.

Per format (JPEG, PNG, BMP, TIFF, PNM, WebP, GIF, JPEG 2000), valid seed files get bit flips,
truncations, byte overwrites, header-field overwrites with extreme values, insertions, deletions
and splices. The result may be a valid image or the documented error, nothing else:

* ``decode_cpu`` (strict or not, any output type) returns a sane HWC uint8 array or raises
  ImageDecodeError; ``read_info`` returns an ImageInfo or raises ImageFormatError, and so does
  ``claimed_size`` (GIF, unsupported, always raises);
* the operators (decoders.image, peek_image_shape) return their output or raise an OperatorError
  naming themselves and the sample's source;
* no example takes more than EXAMPLE_SECONDS (a hang also fails the run through pytest-timeout),
  and no example's peak resident memory grows by more than MEMORY_BUDGET (the decoders run with
  max_pixels=2**22, so a legitimate decode stays under ~64 MB): a header that talks a library
  into a big allocation fails the test. (This found OpenCV allocating a PNG chunk's claimed
  length: 4 GB for a 2 KB file.)

Short by default (STOKER_FUZZ_EXAMPLES, per format and test: 60); set it for a longer run, e.g.
STOKER_FUZZ_EXAMPLES=4000 (random seeds then, instead of CI's fixed derandomized ones).
"""

from __future__ import annotations

import contextlib
import os
import resource
import struct
import time

import cv2
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image
from reliability_images import jpeg_bytes, photo, pillow_bytes, png_bytes

from stoker import types
from stoker.errors import OperatorError
from stoker.operators.decoders.cpu import ImageDecodeError, decode_cpu
from stoker.operators.decoders.formats import ImageFormatError, ImageInfo, claimed_size, read_info

EXAMPLES = int(os.environ.get("STOKER_FUZZ_EXAMPLES", "60"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize="STOKER_FUZZ_EXAMPLES" not in os.environ,
                suppress_health_check=list(HealthCheck), database=None)
pytestmark = pytest.mark.timeout(120 + EXAMPLES)
MAX_PIXELS = 1 << 22  # 4 megapixels: at most ~32 MB per decoded image (16-bit RGBA)
EXAMPLE_SECONDS = 10.0
MEMORY_BUDGET = 512 << 20


def _pil(img, fmt: str, mode: str | None = None, **kw) -> bytes:
    im = Image.fromarray(img) if isinstance(img, np.ndarray) else img
    return pillow_bytes(im.convert(mode) if mode else im, fmt, **kw)


def _seeds() -> dict[str, list[bytes]]:
    img = photo(20, 24, seed=11)
    rgba = np.dstack([img, np.linspace(0, 255, 20 * 24).reshape(20, 24).astype(np.uint8)])
    exif = Image.Exif()
    exif[0x0112] = 6
    ok, rst = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_RST_INTERVAL, 1])
    assert ok
    gray16 = (np.arange(20 * 24, dtype=np.uint16).reshape(20, 24) * 131)
    return {
        "jpeg": [jpeg_bytes(img), _pil(img, "JPEG", exif=exif.tobytes(), progressive=True),
                 _pil(img, "JPEG", "CMYK"), _pil(img, "JPEG", "L"), rst.tobytes(), _pil(img, "JPEG", subsampling=0)],
        "png": [png_bytes(img), png_bytes(img[:, :, :1]), _pil(img, "PNG", "P", transparency=0),
                _pil(Image.fromarray(img[:, :, :2], "LA"), "PNG"), png_bytes(img.astype(np.uint16) * 257),
                _pil(rgba, "PNG")],
        "bmp": [_pil(img, "BMP"), _pil(img, "BMP", "P"), _pil(img, "BMP", "1"), _pil(rgba, "BMP"),
                _pil(img, "BMP", "L")],
        "tiff": [_pil(img, "TIFF"), _pil(img, "TIFF", compression="tiff_lzw"),
                 _pil(img, "TIFF", compression="tiff_deflate", exif=exif.tobytes()),
                 _pil(Image.fromarray(gray16), "TIFF"), _pil(rgba, "TIFF", compression="packbits")],
        "pnm": [_pil(img, "PPM"), _pil(img, "PPM", "L"), _pil(img, "PPM", "1"),
                b"P3\n24 20\n255\n" + " ".join(map(str, img.reshape(-1).tolist())).encode() + b"\n",
                b"P7\nWIDTH 24\nHEIGHT 20\nDEPTH 4\nMAXVAL 255\nTUPLTYPE RGB_ALPHA\nENDHDR\n" + rgba.tobytes(),
                b"P5\n24 20\n65535\n" + gray16.astype(">u2").tobytes()],
        "webp": [_pil(img, "WEBP", quality=80), _pil(img, "WEBP", lossless=True), _pil(rgba, "WEBP", quality=80),
                 _pil(img, "WEBP", quality=80, exif=exif.tobytes())],
        "gif": [_pil(img, "GIF"), _pil(rgba, "GIF")],
        "jpeg2000": [_pil(img, "JPEG2000"), _pil(img, "JPEG2000", no_jp2=True),
                     _pil(img, "JPEG2000", irreversible=True, quality_mode="rates", quality_layers=[20])],
    }


SEEDS = _seeds()
FORMATS = sorted(SEEDS)
ALL_SEEDS = [s for seeds in SEEDS.values() for s in seeds]
_EXTREMES = [0, 1, 0xFF, 0x7F, 0x80, 0xFFFF, 0x7FFF, 0x8000, 0xFFFFFFFF, 0x7FFFFFFF, 0x80000000, 65500, 100000]


@st.composite
def mutated(draw, fmt: str | None = None):
    """A seed file of ``fmt`` (any format when None) with 1-4 random mutations, half of their
    positions in the first 64 bytes, where the headers (and their size fields) are."""
    data = bytearray(draw(st.sampled_from(SEEDS[fmt] if fmt else ALL_SEEDS)))
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "byte", "field", "truncate", "splice", "insert", "delete"]))
        n = len(data)
        if n == 0:
            break
        pos = draw(st.one_of(st.integers(0, min(63, n - 1)), st.integers(0, n - 1)))
        if kind == "flip":
            data[pos] ^= 1 << draw(st.integers(0, 7))
        elif kind == "byte":
            data[pos] = draw(st.sampled_from([0x00, 0xFF, 0x7F, 0x80, draw(st.integers(0, 255))]))
        elif kind == "field":  # a 16- or 32-bit header field set to an extreme, in either byte order
            size = draw(st.sampled_from([2, 4]))
            value = draw(st.sampled_from(_EXTREMES)) & ((1 << (8 * size)) - 1)
            blob = struct.pack((draw(st.sampled_from("<>"))) + ("H" if size == 2 else "I"), value)
            data[pos:pos + size] = blob[:max(0, n - pos)]
        elif kind == "truncate":
            del data[pos:]
        elif kind == "splice":
            other = draw(st.sampled_from(ALL_SEEDS))
            data[pos:] = other[draw(st.integers(0, len(other) - 1)):]
        elif kind == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=16))
        else:
            del data[pos:pos + draw(st.integers(1, 16))]
    return bytes(data)


def _status_kb(field: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            return next((int(line.split()[1]) for line in f if line.startswith(field + ":")), None)
    except OSError:
        return None


def _reset_peak_rss() -> bool:
    """Reset the kernel's peak-RSS mark (VmHWM) of this process (Linux 4.0+)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


@contextlib.contextmanager
def bounded():
    """Fail an example that runs past EXAMPLE_SECONDS or whose peak resident memory grows by more
    than MEMORY_BUDGET (Linux: the peak-RSS mark is reset before each example and read after).
    A data-segment cap several times larger keeps a runaway allocation from taking the machine
    down; it must stay above the budget, as an allocation it refuses fails silently inside C code."""
    measured = _reset_peak_rss()
    rss_before = _status_kb("VmRSS")
    limit_set = None
    vm_data = _status_kb("VmData")
    if vm_data is not None:
        soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
        cap = vm_data * 1024 + 8 * MEMORY_BUDGET
        if hard == resource.RLIM_INFINITY or cap < hard:
            resource.setrlimit(resource.RLIMIT_DATA, (cap, hard))
            limit_set = (soft, hard)
    t0 = time.perf_counter()
    try:
        yield
    finally:
        if limit_set is not None:
            resource.setrlimit(resource.RLIMIT_DATA, limit_set)
    elapsed = time.perf_counter() - t0
    assert elapsed < EXAMPLE_SECONDS, f"one example took {elapsed:.1f} s"
    peak = _status_kb("VmHWM")
    if measured and peak is not None and rss_before is not None:
        grew = (peak - rss_before) * 1024
        assert grew < MEMORY_BUDGET, f"one example's peak memory grew by {grew >> 20} MB"


def _check_image(out, output_type):
    assert isinstance(out, np.ndarray) and out.dtype == np.uint8 and out.ndim == 3
    assert out.shape[0] > 0 and out.shape[1] > 0 and out.shape[0] * out.shape[1] <= MAX_PIXELS
    if output_type in (types.RGB, types.BGR, types.YCbCr):
        assert out.shape[2] == 3
    elif output_type == types.GRAY:
        assert out.shape[2] == 1
    else:
        assert 1 <= out.shape[2] <= 4
    assert out.flags.c_contiguous


@pytest.mark.parametrize("fmt", FORMATS)
@FUZZ
@given(data=st.data())
def test_decode_cpu_gives_an_image_or_image_decode_error(fmt, data):
    blob = data.draw(mutated(fmt))
    output_type = data.draw(st.sampled_from([types.RGB, types.BGR, types.GRAY, types.ANY_DATA]))
    strict = data.draw(st.booleans())
    with bounded():
        try:
            out = decode_cpu(blob, output_type, max_pixels=MAX_PIXELS, strict=strict)
        except ImageDecodeError:
            return
    assert not blob.startswith(b"GIF8"), "GIF is not a supported format"
    _check_image(out, output_type)


@pytest.mark.parametrize("fmt", FORMATS)
@FUZZ
@given(data=st.data())
def test_header_parsers_give_a_size_or_image_format_error(fmt, data):
    blob = data.draw(mutated(fmt))
    with bounded():
        try:
            info = read_info(blob)
        except ImageFormatError:
            info = None
        try:
            size = claimed_size(blob)
        except ImageFormatError:
            size = None
    if info is not None:
        assert isinstance(info, ImageInfo)
        assert info.height > 0 and info.width > 0 and 1 <= info.channels <= 4 and 1 <= info.orientation <= 8
    if size is not None:
        assert size.height > 0 and size.width > 0 and size.min_bytes >= 0
    if blob.startswith(b"GIF8"):  # (a splice may have made it another format)
        assert info is None and size is None


@FUZZ
@given(data=st.binary(max_size=64))
def test_short_random_bytes(data):
    for fn in (lambda: decode_cpu(data, strict=True), lambda: decode_cpu(data), lambda: read_info(data),
               lambda: claimed_size(data)):
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

    def make(cls, **args):
        static, _ = cls.schema.bind(args, lambda v: False)
        op = cls(static, "cpu")
        return op

    def run(op, data):
        batch = TensorListCPU([np.frombuffer(data, np.uint8)], "", ["fuzz.bin"])
        ctx = BatchContext(1, sources=["fuzz.bin"])
        return op.run_cpu(ctx, [batch], {})[0].at(0)

    return make(ImageDecoder, max_pixels=MAX_PIXELS), make(PeekImageShape), run


@pytest.mark.parametrize("fmt", FORMATS)
@FUZZ
@given(data=st.data())
def test_operators_give_output_or_operator_error(fmt, data, operators):
    blob = data.draw(mutated(fmt))
    decoder, peek, run = operators
    with bounded():
        try:
            out = run(decoder, blob)
        except OperatorError as e:
            assert e.operator == "decoders.image" and e.source == "fuzz.bin"
        else:
            _check_image(np.asarray(out), types.RGB)
        try:
            shape = np.asarray(run(peek, blob))
        except OperatorError as e:
            assert e.operator == "peek_image_shape" and e.source == "fuzz.bin"
        else:
            assert shape.shape == (3,) and (shape > 0).all()


def test_every_seed_decodes_except_gif():
    """The seeds are valid files (so the mutations start from real structure), GIF aside."""
    for fmt, seeds in SEEDS.items():
        for k, seed in enumerate(seeds):
            if fmt == "gif":
                with pytest.raises(ImageDecodeError, match="GIF"):
                    decode_cpu(seed)
                continue
            out = decode_cpu(seed, strict=True)
            assert sorted(out.shape[:2]) == [20, 24], (fmt, k)  # (EXIF orientation 6 turns some)


def test_the_memory_guard_catches_a_big_allocation():
    """bounded() itself: an example that touches more than the budget fails."""
    if not _reset_peak_rss():
        pytest.skip("no /proc/self/clear_refs: peak memory cannot be measured per example")
    with pytest.raises(AssertionError, match="peak memory"):
        with bounded():
            np.ones(MEMORY_BUDGET + (64 << 20), np.uint8)
