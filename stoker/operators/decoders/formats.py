"""Image container formats: detection by magic bytes and header parsing.

Everything here reads only the first bytes of a file (JPEG markers up to the
frame header, PNG chunks up to the image data, TIFF's first directory), so
``peek_image_shape`` and the decoders' planning steps never decode pixels.
:func:`claimed_size` reads the size that every supported format's header
claims with the standard library alone, so that the decoders can refuse an
oversized or absurdly thin image before any library allocates its pixels.
Pillow's lazy ``Image.open`` (which also parses headers only) gives the
channel counts of the formats whose headers are not fully parsed here (BMP,
WebP, JPEG 2000, PNM). The integrity checks of the decoders' ``strict`` mode
that need no decoding (PNG chunk CRCs, a JPEG's end marker) live here too.
"""

from __future__ import annotations

import io
import struct
import zlib
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
    if head[:6] in (b"GIF87a", b"GIF89a"):
        # Named, so that the message says why: DALI's decoders do not read GIF either.
        raise ImageFormatError("unrecognized image format: GIF is not supported; supported: JPEG, PNG, BMP, "
                               "TIFF, WebP, JPEG 2000, PNM")
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


def _pillow_open(data, fmt: str):
    """Pillow's header-only open of ``fmt`` without its decompression-bomb check.

    ``Image.open`` raises ``DecompressionBombError`` (not an OSError) for more than
    2 * ``Image.MAX_IMAGE_PIXELS`` pixels, which is a process-wide setting; the size
    limit here is the decoders' ``max_pixels`` instead, checked on :func:`claimed_size`.
    So the format's plugin class, which only parses the header, is called directly."""
    from PIL import BmpImagePlugin, Jpeg2KImagePlugin, PpmImagePlugin, TiffImagePlugin, WebPImagePlugin

    factory = {BMP: BmpImagePlugin.BmpImageFile, TIFF: TiffImagePlugin.TiffImageFile,
               WEBP: WebPImagePlugin.WebPImageFile, JPEG2000: Jpeg2KImagePlugin.Jpeg2KImageFile,
               PNM: PpmImagePlugin.PpmImageFile}[fmt]
    return factory(io.BytesIO(bytes(data)))


def _pillow_info(data, fmt: str) -> ImageInfo:
    from PIL import Image

    if fmt == WEBP:
        # WebP's header says it all (size, alpha, orientation), and Pillow's WebP plugin decodes the
        # file with libwebp while opening it, checking the size in ways that change between Pillow
        # versions (a bomb's canvas: DecompressionBombError in one, "corrupt" in another).
        size = claimed_size(data, fmt)
        return ImageInfo(fmt, size.height, size.width, _webp_channels(data), _webp_orientation(data))
    try:
        with _pillow_open(data, fmt) as im:
            w, h = im.size
            mode = im.mode
            channels = _MODE_CHANNELS.get(mode, len(im.getbands()))
            if mode == "P" and "transparency" in im.info:
                channels = 4
            depth = 16 if mode.startswith("I;16") or mode == "I" else 8
    except Image.DecompressionBombError as e:  # (the plugins leave the check to Image.open, bypassed here)
        raise ImageFormatError(f"{fmt.upper()} header: {e}") from None
    except Exception as e:  # Pillow's parsers raise many types on hostile headers
        # (KeyError, TypeError, ZeroDivisionError, EOFError ... besides OSError): all mean "unreadable".
        raise ImageFormatError(f"corrupt {fmt.upper()} header: {e or type(e).__name__}") from None
    orientation = 1
    if fmt == TIFF:
        orientation = exif_orientation(bytes(data))
        if orientation >= 5:  # Pillow reports a TIFF's size after its orientation; we keep stored sizes
            w, h = h, w
    return ImageInfo(fmt, h, w, channels, orientation, depth)


def _webp_channels(data) -> int:
    """4 when a WebP header flags alpha (VP8X's alpha bit, VP8L's alpha_is_used bit), else 3."""
    kind = bytes(data[12:16])
    if kind == b"VP8X":
        return 4 if data[20] & 0x10 else 3
    if kind == b"VP8L" and len(data) >= 25:
        return 4 if struct.unpack_from("<I", data, 21)[0] >> 28 & 1 else 3
    return 3


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


# --- the size each header claims, read before any library allocates pixels ---------------------

# deflate's best case is a 258-byte match coded in 2 bits: no zlib stream inflates more than 1032x.
_DEFLATE_MAX_RATIO = 1032
_PNM_HEADER_MAX = 1 << 16  # a PNM header (with comments) longer than this is taken as corrupt


@dataclass(frozen=True)
class ClaimedSize:
    """An image's size as its header states it, read with the standard library alone.

    ``min_bytes`` is the least data a file of that size can hold (0 where the format's
    compression allows any size): a shorter file is truncated or lies about its size, and is
    refused before a decoder allocates the pixels it claims."""

    height: int
    width: int
    min_bytes: int = 0


def claimed_size(data, fmt: str | None = None) -> ClaimedSize:
    """The size that the header of an encoded image claims, for every supported format, without
    decoding and without an image library (so nothing is allocated for a hostile header).

    Raises ImageFormatError when the header is unreadable or claims an empty image."""
    if not isinstance(data, bytes):
        data = memoryview(data).cast("B")
    fmt = fmt or detect_format(data)
    try:
        size = _SIZE_READERS[fmt](data)
    except ImageFormatError:
        raise
    except (struct.error, IndexError, ValueError) as e:
        raise ImageFormatError(f"corrupt or truncated {fmt.upper()} header: {e}") from None
    if size.height <= 0 or size.width <= 0:
        raise ImageFormatError(f"corrupt {fmt.upper()} header: it claims {size.width}x{size.height} pixels")
    return size


def _jpeg_size(data) -> ClaimedSize:
    info = _jpeg_info(data)
    return ClaimedSize(info.height, info.width)


_PNG_SAMPLES = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}


def _png_size(data) -> ClaimedSize:
    if bytes(data[12:16]) != b"IHDR":
        raise ImageFormatError("corrupt PNG: the first chunk is not IHDR")
    w, h, depth, ctype = struct.unpack_from(">IIBB", data, 16)
    if ctype not in _PNG_SAMPLES or depth not in (1, 2, 4, 8, 16):
        raise ImageFormatError(f"corrupt PNG header: bit depth {depth}, color type {ctype}")
    raw = h * ((w * _PNG_SAMPLES[ctype] * depth + 7) // 8)  # the pixel bytes, filter bytes left out
    return ClaimedSize(h, w, raw // _DEFLATE_MAX_RATIO)


def _bmp_size(data) -> ClaimedSize:
    (dib,) = struct.unpack_from("<I", data, 14)
    if dib == 12:  # OS/2 1.x core header: 16-bit sizes, no compression
        w, h, _, bpp = struct.unpack_from("<HHHH", data, 18)
        compression = 0
    elif 16 <= dib <= 1024:
        w, h, _, bpp = struct.unpack_from("<iiHH", data, 18)
        compression = struct.unpack_from("<I", data, 30)[0] if dib >= 20 else 0
    else:
        raise ImageFormatError(f"corrupt BMP header: DIB header size {dib}")
    w, h = abs(w), abs(h)  # a negative height means rows stored top-down
    need = 0
    if compression in (0, 3, 6) and bpp in (1, 2, 4, 8, 16, 24, 32) and w and h:
        # uncompressed rows, 4-byte aligned (the last one's padding not required)
        need = 14 + dib + (h - 1) * (((w * bpp + 31) // 32) * 4) + (w * bpp + 7) // 8
    return ClaimedSize(h, w, need)


def _pnm_size(data) -> ClaimedSize:
    head = bytes(data[:_PNM_HEADER_MAX])
    kind = head[1] - ord("0")
    if kind == 7:
        return _pam_size(head)
    fields = 2 if kind in (1, 4) else 3  # width, height (, maxval)
    values, pos = [], 2
    while len(values) < fields:
        while pos < len(head) and (head[pos] in b" \t\r\n\v\f" or head[pos] == ord("#")):
            if head[pos] == ord("#"):  # a comment runs to the end of the line
                end = head.find(b"\n", pos)
                pos = len(head) if end < 0 else end
            pos += 1
        start = pos
        while pos < len(head) and 48 <= head[pos] <= 57:
            pos += 1
        if pos == start or pos - start > 10:
            raise ImageFormatError("corrupt PNM header: expected width, height and maxval as decimal numbers")
        values.append(int(head[start:pos]))
    w, h = values[0], values[1]
    maxval = values[2] if fields == 3 else 1
    if not 1 <= maxval <= 65535:
        raise ImageFormatError(f"corrupt PNM header: maxval {maxval} (1..65535)")
    per_sample = 1 if maxval < 256 else 2
    data_start = pos + 1  # one whitespace character separates the header from binary data
    need = {1: w * h, 2: w * h, 3: 3 * w * h,  # ASCII: at least one character per sample
            4: data_start + h * ((w + 7) // 8), 5: data_start + w * h * per_sample,
            6: data_start + 3 * w * h * per_sample}[kind]
    return ClaimedSize(h, w, need)


def _pam_size(head: bytes) -> ClaimedSize:
    end = head.find(b"ENDHDR")
    if end < 0:
        raise ImageFormatError("corrupt PAM header: no ENDHDR line")
    fields = {}
    for line in head[3:end].split(b"\n"):
        parts = line.split(b"#", 1)[0].split()
        if len(parts) >= 2 and parts[0] in (b"WIDTH", b"HEIGHT", b"DEPTH", b"MAXVAL"):
            fields[parts[0]] = int(parts[1])
    if not {b"WIDTH", b"HEIGHT", b"DEPTH", b"MAXVAL"} <= fields.keys():
        raise ImageFormatError("corrupt PAM header: WIDTH, HEIGHT, DEPTH and MAXVAL are required")
    w, h, depth, maxval = fields[b"WIDTH"], fields[b"HEIGHT"], fields[b"DEPTH"], fields[b"MAXVAL"]
    if not 1 <= maxval <= 65535 or not 1 <= depth <= 4:
        raise ImageFormatError(f"corrupt PAM header: DEPTH {depth}, MAXVAL {maxval}")
    data_start = end + len(b"ENDHDR") + 1
    return ClaimedSize(h, w, data_start + w * h * depth * (1 if maxval < 256 else 2))


def _tiff_size(data) -> ClaimedSize:
    order = "<" if bytes(data[:2]) == b"II" else ">"
    (magic,) = struct.unpack_from(order + "H", data, 2)
    if magic == 43:  # BigTIFF: 8-byte offsets and counts, 20-byte entries
        (ifd,) = struct.unpack_from(order + "Q", data, 8)
        (count,) = struct.unpack_from(order + "Q", data, ifd)
        first, entry, value_at, kinds = ifd + 8, 20, 12, {3: "H", 4: "I", 16: "Q"}
    else:
        (ifd,) = struct.unpack_from(order + "I", data, 4)
        (count,) = struct.unpack_from(order + "H", data, ifd)
        first, entry, value_at, kinds = ifd + 2, 12, 8, {3: "H", 4: "I"}
    found = {}
    for k in range(min(count, (len(data) - first) // entry)):
        at = first + k * entry
        tag, typ = struct.unpack_from(order + "HH", data, at)
        if tag in (256, 257) and typ in kinds:
            (found[tag],) = struct.unpack_from(order + kinds[typ], data, at + value_at)
    if 256 not in found or 257 not in found:
        raise ImageFormatError("corrupt or truncated TIFF: its first directory has no ImageWidth/ImageLength")
    return ClaimedSize(found[257], found[256])


def _webp_size(data) -> ClaimedSize:
    kind = bytes(data[12:16])
    if kind == b"VP8 ":  # lossy: 14-bit sizes after the key frame's start code
        if bytes(data[23:26]) != b"\x9d\x01\x2a":
            raise ImageFormatError("corrupt WebP: no VP8 key frame start code")
        w, h = struct.unpack_from("<HH", data, 26)
        return ClaimedSize(h & 0x3FFF, w & 0x3FFF)
    if kind == b"VP8L":  # lossless: signature byte, then (width - 1) and (height - 1) in 14 bits each
        if data[20] != 0x2F:
            raise ImageFormatError("corrupt WebP: no VP8L signature")
        (bits,) = struct.unpack_from("<I", data, 21)
        return ClaimedSize(((bits >> 14) & 0x3FFF) + 1, (bits & 0x3FFF) + 1)
    if kind == b"VP8X":  # extended: the canvas, (width - 1) and (height - 1) in 24 bits each
        if len(data) < 30:
            raise ImageFormatError("truncated WebP header")
        w = int.from_bytes(bytes(data[24:27]), "little") + 1
        h = int.from_bytes(bytes(data[27:30]), "little") + 1
        return ClaimedSize(h, w)
    raise ImageFormatError(f"corrupt WebP: unknown first chunk {kind!r}")


def _jp2_size(data) -> ClaimedSize:
    if bytes(data[:4]) == b"\xff\x4f\xff\x51":  # a bare codestream
        return _j2k_siz(data, 0)
    pos, n, ihdr = 0, len(data), None
    while pos + 8 <= n:  # the JP2 boxes: the codestream (jp2c) is what the decoder reads
        length, kind = struct.unpack_from(">I4s", data, pos)
        head = 8
        if length == 1:
            (length,) = struct.unpack_from(">Q", data, pos + 8)
            head = 16
        elif length == 0:
            length = n - pos
        if length < head:
            raise ImageFormatError(f"corrupt JPEG 2000: box {kind!r} of length {length}")
        if kind == b"jp2h":  # header superbox: image header (ihdr) first
            if bytes(data[pos + head + 4:pos + head + 8]) == b"ihdr":
                ihdr = struct.unpack_from(">II", data, pos + head + 8)
        elif kind == b"jp2c":
            return _j2k_siz(data, pos + head)
        pos += length
    if ihdr is None:
        raise ImageFormatError("corrupt or truncated JPEG 2000: no image header")
    return ClaimedSize(ihdr[0], ihdr[1])


def _j2k_siz(data, at: int) -> ClaimedSize:
    if bytes(data[at:at + 4]) != b"\xff\x4f\xff\x51":
        raise ImageFormatError("corrupt JPEG 2000 codestream: no SIZ marker after SOC")
    xsiz, ysiz, xo, yo = struct.unpack_from(">IIII", data, at + 8)
    return ClaimedSize(ysiz - yo, xsiz - xo)


_SIZE_READERS = {JPEG: _jpeg_size, PNG: _png_size, BMP: _bmp_size, PNM: _pnm_size, TIFF: _tiff_size,
                 WEBP: _webp_size, JPEG2000: _jp2_size}


# --- integrity checks of the decoders' strict mode that need no decoding ------------------------

def png_integrity_problem(data, crc: bool = True) -> str | None:
    """What is wrong with a PNG's chunk structure, or None: a chunk that runs past the end of the
    data, a chunk whose CRC does not match its contents, no IEND chunk (the last two only with
    ``crc``: strict mode).

    The decoders check the chunk lengths of every PNG before OpenCV sees it: OpenCV 5's reader
    allocates (and fills) the length a chunk claims, so a 2 KB file claiming a 4 GB IDAT chunk
    cost 4 GB and 4 s (found by the fuzzers). libpng checks only some chunks' CRCs and Pillow
    skips IDAT's, so a damaged PNG can decode silently to wrong pixels; zlib's CRC-32 runs at
    over 1 GB/s, a fraction of the decode's own cost."""
    if not isinstance(data, bytes):
        data = memoryview(data).cast("B")
    pos, n = 8, len(data)
    while pos + 12 <= n:
        length, kind = struct.unpack_from(">I4s", data, pos)
        end = pos + 12 + length
        if end > n:
            name = kind.decode("latin-1").encode("unicode_escape").decode()
            return f"the {name} chunk at byte {pos} claims {length} bytes, past the end of the data (truncated?)"
        if crc and zlib.crc32(data[pos + 4:pos + 8 + length]) != struct.unpack_from(">I", data, pos + 8 + length)[0]:
            name = kind.decode("latin-1").encode("unicode_escape").decode()
            return f"CRC mismatch in the {name} chunk at byte {pos} (damaged data)"
        if kind == b"IEND":
            return None
        pos = end
    return "no IEND chunk (truncated file)" if crc else None


def jpeg_end_problem(data) -> str | None:
    """A JPEG without an end-of-image marker after its first scan is truncated: the message, or
    None. (Only strict decoding without TurboJPEG uses this; TurboJPEG reports the truncation.)"""
    if not isinstance(data, bytes):
        data = memoryview(data).cast("B")
    if b"\xff\xd9" in bytes(data[-32:]):  # FF D9 cannot occur inside entropy-coded data
        return None
    sos = _jpeg_first_scan(bytes(data))
    if sos is None or bytes(data[sos:]).rfind(b"\xff\xd9") < 0:
        return "the data ends before the JPEG's end-of-image marker (truncated file)"
    return None


def _jpeg_first_scan(buf: bytes) -> int | None:
    """Offset of the first SOS marker, found by walking the segments (an EXIF thumbnail's own
    markers are inside its APP1 segment and are skipped with it)."""
    pos, n = 2, len(buf)
    while pos + 4 <= n:
        if buf[pos] != 0xFF or buf[pos + 1] == 0x00:
            pos = buf.find(b"\xff", pos + 1)
            if pos < 0:
                return None
            continue
        marker = buf[pos + 1]
        if marker == 0xFF or marker == 0x01 or 0xD0 <= marker <= 0xD7:
            pos += 1 if marker == 0xFF else 2
            continue
        if marker == 0xDA:
            return pos
        pos += 2 + struct.unpack_from(">H", buf, pos + 2)[0]
    return None


def jpeg_without_header_junk(data) -> bytes | None:
    """The JPEG with the stray bytes between its header segments (before the first scan) cut out,
    or None when it has none.

    libjpeg skips such bytes with a "Corrupt JPEG data: N extraneous bytes before marker" warning
    and decodes the very same pixels, and some writers leave them; strict decoding retries on
    this copy, so that it refuses damaged image data rather than a sloppy header."""
    buf = bytes(data)
    pos, n, parts, start = 2, len(buf), [], 0
    while pos + 4 <= n:
        if buf[pos] != 0xFF or buf[pos + 1] == 0x00:  # junk (a stuffed FF 00 counts as junk here)
            nxt = buf.find(b"\xff", pos + 1)
            if nxt < 0:
                break
            parts.append(buf[start:pos])
            start = pos = nxt
            continue
        marker = buf[pos + 1]
        if marker == 0xFF:  # fill byte: allowed before any marker
            pos += 1
        elif marker == 0x01 or 0xD0 <= marker <= 0xD7:
            pos += 2
        elif marker == 0xDA:
            break
        else:
            pos += 2 + struct.unpack_from(">H", buf, pos + 2)[0]
    if not parts:
        return None
    return b"".join(parts) + buf[start:]


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
