"""Image container formats: detection by magic bytes and header parsing.

Everything here reads only the first bytes of a file (JPEG markers up to the
frame header, PNG chunks up to the image data, TIFF's first directory), so
``peek_image_shape`` and the decoders' planning steps never decode pixels.
Pillow's lazy ``Image.open`` (which also parses headers only) covers the
formats whose headers are not parsed here (BMP, WebP, JPEG 2000, PNM).
"""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass

JPEG, PNG, BMP, TIFF, WEBP, JPEG2000, PNM = "jpeg", "png", "bmp", "tiff", "webp", "jpeg2000", "pnm"

_JP2_BOX = b"\x00\x00\x00\x0cjP  \r\n\x87\n"


class ImageFormatError(ValueError):
    """The bytes are not an image of a supported format, or its header is broken."""


@dataclass(frozen=True)
class ImageInfo:
    """What an image's header says.

    ``height``/``width`` are as stored (before EXIF orientation); ``channels``
    counts the stored colour channels after palette expansion (1 gray, 2 gray +
    alpha, 3 colour, 4 colour + alpha; CMYK JPEGs count as 3 because they are
    decoded to RGB); ``orientation`` is the EXIF orientation (1..8, 1 = as
    stored); ``bit_depth`` is 8 or 16.
    """

    format: str
    height: int
    width: int
    channels: int
    orientation: int = 1
    bit_depth: int = 8
    cmyk: bool = False  # a 4-component (CMYK / YCCK) JPEG

    @property
    def transposed(self) -> bool:
        """True when the orientation swaps height and width (EXIF 5..8)."""
        return self.orientation >= 5

    def shape(self, adjust_orientation: bool = True) -> tuple[int, int, int]:
        """(H, W, C) of the decoded image, as stored or after applying the orientation."""
        if adjust_orientation and self.transposed:
            return self.width, self.height, self.channels
        return self.height, self.width, self.channels


def detect_format(data: bytes | memoryview) -> str:
    """The image format of ``data`` from its magic bytes; raises ImageFormatError if unknown."""
    head = bytes(data[:16])
    if head[:3] == b"\xff\xd8\xff":
        return JPEG
    if head[:8] == b"\x89PNG\r\n\x1a\n":
        return PNG
    if head[:2] == b"BM":
        return BMP
    if head[:4] in (b"II*\x00", b"MM\x00*", b"II+\x00", b"MM\x00+"):
        return TIFF
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return WEBP
    if head[:12] == _JP2_BOX or head[:4] == b"\xff\x4f\xff\x51":
        return JPEG2000
    if len(head) >= 3 and head[0:1] == b"P" and head[1:2] in b"1234567" and head[2:3] in b" \t\r\n#":
        return PNM
    if not head:
        raise ImageFormatError("empty input: no encoded image data")
    raise ImageFormatError(
        f"unrecognized image format (first bytes {head[:8].hex(' ')}); supported: "
        "JPEG, PNG, BMP, TIFF, WebP, JPEG 2000, PNM")


def read_info(data: bytes | memoryview) -> ImageInfo:
    """Parse the header of an encoded image (no pixel decoding)."""
    data = memoryview(data).cast("B") if not isinstance(data, bytes) else data
    fmt = detect_format(data)
    try:
        if fmt == JPEG:
            return _jpeg_info(data)
        if fmt == PNG:
            return _png_info(data)
        return _pillow_info(data, fmt)
    except ImageFormatError:
        raise
    except (struct.error, IndexError, ValueError, OSError, SyntaxError) as e:
        raise ImageFormatError(f"corrupt {fmt.upper()} header: {e}") from None


# --- JPEG ----------------------------------------------------------------------

_SOF = {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}


def _jpeg_info(data) -> ImageInfo:
    pos, n = 2, len(data)
    orientation = 1
    while pos + 4 <= n:
        if data[pos] != 0xFF:
            # Stray bytes before a marker: libjpeg skips them with a warning and decodes the file,
            # so the header parser must not refuse it either.
            skip = bytes(data[pos:]).find(b"\xff")
            if skip < 0:
                break
            pos += skip
            continue
        marker = data[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        if marker == 0x00:  # a stuffed zero is data, not a marker
            pos += 2
            continue
        if marker in (0x01, *range(0xD0, 0xD8)):  # markers without a length
            pos += 2
            continue
        (length,) = struct.unpack_from(">H", data, pos + 2)
        if length < 2:
            raise ImageFormatError(f"corrupt JPEG: segment length {length} at byte {pos}")
        body = pos + 4
        if marker == 0xE1 and bytes(data[body:body + 6]) == b"Exif\x00\x00":
            orientation = exif_orientation(bytes(data[body + 6:pos + 2 + length]))
        elif marker in _SOF:
            precision, h, w, comps = struct.unpack_from(">BHHB", data, body)
            if h == 0 or w == 0:
                raise ImageFormatError(f"corrupt JPEG: frame header says {w}x{h} pixels")
            channels = 1 if comps == 1 else 3
            return ImageInfo(JPEG, h, w, channels, orientation, 16 if precision > 8 else 8, cmyk=comps == 4)
        elif marker == 0xDA:
            break
        pos += 2 + length
    raise ImageFormatError("corrupt or truncated JPEG: no frame header (SOF) found")


# --- PNG -----------------------------------------------------------------------

_PNG_CHANNELS = {0: 1, 2: 3, 3: 3, 4: 2, 6: 4}


def _png_info(data) -> ImageInfo:
    if bytes(data[12:16]) != b"IHDR":
        raise ImageFormatError("corrupt PNG: the first chunk is not IHDR")
    w, h, depth, ctype = struct.unpack_from(">IIBB", data, 16)
    if ctype not in _PNG_CHANNELS or w == 0 or h == 0:
        raise ImageFormatError(f"corrupt PNG header: {w}x{h}, color type {ctype}")
    channels = _PNG_CHANNELS[ctype]
    orientation = 1
    pos, n = 33, len(data)
    while pos + 8 <= n:  # walk the chunks before the pixel data: tRNS and eXIf live there
        length, kind = struct.unpack_from(">I4s", data, pos)
        if kind == b"IDAT" or kind == b"IEND":
            break
        if kind == b"tRNS" and ctype == 3:
            channels = 4
        elif kind == b"eXIf":
            orientation = exif_orientation(bytes(data[pos + 8:pos + 8 + length]))
        pos += 12 + length
    return ImageInfo(PNG, h, w, channels, orientation, 16 if depth == 16 else 8)


# --- everything else, through Pillow's header-only open ------------------------

_MODE_CHANNELS = {"1": 1, "L": 1, "P": 3, "I": 1, "I;16": 1, "I;16B": 1, "I;16L": 1, "F": 1,
                  "LA": 2, "La": 2, "PA": 4, "RGB": 3, "YCbCr": 3, "LAB": 3, "HSV": 3, "CMYK": 3,
                  "RGBA": 4, "RGBa": 4, "RGBX": 3}


def _pillow_info(data, fmt: str) -> ImageInfo:
    from PIL import Image

    with Image.open(io.BytesIO(bytes(data))) as im:
        w, h = im.size
        mode = im.mode
        channels = _MODE_CHANNELS.get(mode, len(im.getbands()))
        if mode == "P" and "transparency" in im.info:
            channels = 4
        depth = 16 if mode.startswith("I;16") or mode == "I" else 8
    orientation = 1
    if fmt == TIFF:
        orientation = exif_orientation(bytes(data))
        if orientation >= 5:  # Pillow reports a TIFF's size after its orientation; we keep stored sizes
            w, h = h, w
    elif fmt == WEBP:
        orientation = _webp_orientation(data)
    return ImageInfo(fmt, h, w, channels, orientation, depth)


def _webp_orientation(data) -> int:
    pos, n = 12, len(data)
    while pos + 8 <= n:
        kind, length = struct.unpack_from("<4sI", data, pos)
        if kind == b"EXIF":
            blob = bytes(data[pos + 8:pos + 8 + length])
            if blob.startswith(b"Exif\x00\x00"):
                blob = blob[6:]
            return exif_orientation(blob)
        pos += 8 + length + (length & 1)
    return 1


# --- EXIF ------------------------------------------------------------------------

def exif_orientation(tiff: bytes) -> int:
    """The orientation tag (0x0112) of a TIFF-structured EXIF block; 1 when absent or invalid."""
    if len(tiff) < 8:
        return 1
    order = {b"II": "<", b"MM": ">"}.get(tiff[:2])
    if order is None:
        return 1
    try:
        (ifd,) = struct.unpack_from(order + "I", tiff, 4)
        (count,) = struct.unpack_from(order + "H", tiff, ifd)
        for k in range(count):
            tag, typ, _, value = struct.unpack_from(order + "HHI4s", tiff, ifd + 2 + 12 * k)
            if tag == 0x0112:
                (v,) = struct.unpack_from(order + ("H" if typ == 3 else "I"), value)
                return v if 1 <= v <= 8 else 1
    except struct.error:
        return 1
    return 1
