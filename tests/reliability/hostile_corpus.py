"""A corpus of hostile image files (issue 17), made on the fly: decompression bombs of every format,
thin strips, corrupt entropy-coded JPEG data, PNGs with bad CRCs, truncated files of every format,
empty files, unsupported formats and wrong extensions, next to good files of every format.

``BAD`` maps a file name (its extension is what ``readers.file`` lists; some lie on purpose) to
how to make it and the fragments that the decoder's error message must contain; ``GOOD`` maps a
file name to its bytes maker. :func:`write` puts a selection into a class folder. Every maker is
small and deterministic: the whole corpus is about 2 MB and takes well under a second to build.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image
from reliability_images import jpeg_bytes, photo, pillow_bytes, png_bytes

BOMB = 60000  # per side: 3.6 gigapixels, over any max_pixels default
UNDER = 14000  # per side: 196 megapixels, under the default max_pixels (2**28) but a 588 MB image


def _img(h: int = 40, w: int = 48, seed: int = 1) -> np.ndarray:
    return photo(h, w, seed=seed)


def _pil(fmt: str, img: np.ndarray | None = None, mode: str | None = None, **kw) -> bytes:
    im = Image.fromarray(_img() if img is None else img)
    return pillow_bytes(im.convert(mode) if mode else im, fmt, **kw)


# --- good files of every format ---------------------------------------------------------------

def good_files() -> dict[str, bytes]:
    """File name -> bytes of a valid image of each format (some under another format's extension)."""
    img = _img()
    return {
        "good_jpeg.jpg": jpeg_bytes(img),
        "good_png.png": png_bytes(img),
        "good_bmp.bmp": _pil("BMP"),
        "good_tiff.tif": _pil("TIFF", compression="tiff_lzw"),
        "good_pnm.ppm": _pil("PPM"),
        "good_webp.webp": _pil("WEBP", quality=90),
        "good_jp2.jp2": _pil("JPEG2000"),
        "good_png_named.jpg": png_bytes(_img(seed=2)),  # wrong extension, valid data: decoded
        "good_jpeg_named.png": jpeg_bytes(_img(seed=3)),
        "good_jpeg_header_junk.jpg": jpeg_with_header_junk(),  # libjpeg skips the junk: tolerated
    }


def jpeg_with_header_junk() -> bytes:
    """Three stray bytes between APP0 and DQT (libjpeg warns and decodes the same pixels)."""
    data = jpeg_bytes(_img(seed=4))
    pos = 4 + int.from_bytes(data[4:6], "big")
    return data[:pos] + b"\x00\x12\x34" + data[pos:]


# --- decompression bombs: small files whose header claims huge images -------------------------

def jpeg_claiming(h: int, w: int) -> bytes:
    data = bytearray(jpeg_bytes(_img()))
    sof = data.find(b"\xff\xc0")
    struct.pack_into(">HH", data, sof + 5, h, w)
    return bytes(data)


def png_claiming(h: int, w: int) -> bytes:
    data = bytearray(png_bytes(_img()))
    struct.pack_into(">II", data, 16, w, h)
    struct.pack_into(">I", data, 29, zlib.crc32(bytes(data[12:29])))  # a valid IHDR CRC: only the size lies
    return bytes(data)


def bmp_claiming(h: int, w: int) -> bytes:
    data = bytearray(_pil("BMP"))
    struct.pack_into("<ii", data, 18, w, h)
    return bytes(data)


def tiff_claiming(h: int, w: int) -> bytes:
    data = bytearray(_pil("TIFF"))
    (ifd,) = struct.unpack_from("<I", data, 4)
    (count,) = struct.unpack_from("<H", data, ifd)
    for k in range(count):
        at = ifd + 2 + 12 * k
        tag, typ = struct.unpack_from("<HH", data, at)
        if tag in (256, 257):
            struct.pack_into("<H" if typ == 3 else "<I", data, at + 8, w if tag == 256 else h)
    return bytes(data)


def pnm_claiming(h: int, w: int) -> bytes:
    return b"P6\n%d %d\n255\n" % (w, h) + bytes(_img().tobytes()[:3000])


def webp_claiming(h: int, w: int) -> bytes:
    """A WebP with alpha (so Pillow writes the extended VP8X header) whose canvas is patched."""
    rgba = np.dstack([_img(), np.full(_img().shape[:2], 200, np.uint8)])
    data = bytearray(pillow_bytes(Image.fromarray(rgba, "RGBA"), "WEBP", quality=80))
    assert data[12:16] == b"VP8X"
    data[24:27] = (w - 1).to_bytes(3, "little")
    data[27:30] = (h - 1).to_bytes(3, "little")
    return bytes(data)


def jp2_claiming(h: int, w: int) -> bytes:
    data = bytearray(_pil("JPEG2000"))
    siz = data.find(b"\xff\x4f\xff\x51")
    struct.pack_into(">II", data, siz + 8, w, h)  # SIZ: Xsiz, Ysiz (offsets 0)
    ihdr = data.find(b"ihdr")
    struct.pack_into(">II", data, ihdr + 4, h, w)
    return bytes(data)


# --- thin strips -------------------------------------------------------------------------------

def thin_png(h: int = 1, w: int = 100000) -> bytes:
    """A valid PNG strip of noise (about 300 KB for 1 x 100000: the issue's case)."""
    rng = np.random.default_rng(17)
    return png_bytes(rng.integers(0, 256, (h, w, 3), dtype=np.uint8))


def thin_jpeg() -> bytes:
    return jpeg_bytes(np.tile(_img(8, 64), (1, 600, 1))[:2, :])  # 2 x 38400


# --- corrupt data behind valid headers ---------------------------------------------------------

def _scan_start(data: bytes) -> int:
    sos = data.find(b"\xff\xda")
    return sos + 2 + int.from_bytes(data[sos + 2:sos + 4], "big")


def jpeg_corrupt_scan() -> bytes:
    """Headers intact, 200 bytes zeroed in the middle of the entropy-coded data: libjpeg prints
    "Corrupt JPEG data: premature end of data segment" and returns garbage without strict."""
    data = bytearray(jpeg_bytes(_img(160, 200, seed=5)))
    start = _scan_start(bytes(data))
    mid = (start + len(data) - 2) // 2
    data[mid:mid + 200] = bytes(200)
    return bytes(data)


def jpeg_scan_cut_short() -> bytes:
    """The middle third of the scan data removed, end marker kept."""
    data = jpeg_bytes(_img(160, 200, seed=6))
    start = _scan_start(data)
    third = (len(data) - 2 - start) // 3
    return data[:start + third] + data[start + 2 * third:]


def png_bad_crc() -> bytes:
    """The IDAT chunk's stored CRC flipped; the compressed data itself intact (Pillow decodes it)."""
    data = bytearray(png_bytes(_img(seed=7)))
    idat = data.find(b"IDAT")
    (length,) = struct.unpack_from(">I", data, idat - 4)
    data[idat + 4 + length] ^= 0xFF
    return bytes(data)


def png_bad_data() -> bytes:
    """A byte of the compressed data changed and the CRC made to match: zlib's check catches it."""
    data = bytearray(png_bytes(_img(seed=8)))
    idat = data.find(b"IDAT")
    (length,) = struct.unpack_from(">I", data, idat - 4)
    data[idat + 4 + length // 2] ^= 0x55
    struct.pack_into(">I", data, idat + 4 + length, zlib.crc32(bytes(data[idat:idat + 4 + length])))
    return bytes(data)


def png_huge_chunk() -> bytes:
    """A 2 KB PNG whose IDAT chunk claims 4 GB: OpenCV's reader allocated and filled that much."""
    data = bytearray(png_bytes(_img(seed=10)))
    idat = data.find(b"IDAT")
    struct.pack_into(">I", data, idat - 4, 0xFF000064)
    return bytes(data)


def truncated(maker: Callable[[], bytes], keep: float = 0.6) -> Callable[[], bytes]:
    return lambda: (lambda d: d[:int(len(d) * keep)])(maker())


def gif() -> bytes:
    return _pil("GIF")


def jpeg_bad_huffman_table() -> bytes:
    data = bytearray(jpeg_bytes(_img()))
    dht = data.find(b"\xff\xc4")
    data[dht + 5:dht + 21] = b"\xff" * 16  # code counts summing past 256
    return bytes(data)


def pnm_absurd_header() -> bytes:
    return b"P6\n99999999999999 1\n255\n" + bytes(64)


# --- broken marker structure in the scan (what the mixed decoders' strict scan check finds) ------

def jpeg_restart(h: int = 96, w: int = 128, seed: int = 11, **kw) -> bytes:
    """A baseline JPEG with a restart marker after every MCU row (Pillow's restart_marker_rows)."""
    return _pil("JPEG", _img(h, w, seed=seed), quality=90, restart_marker_rows=1, **kw)


def _rst_positions(data: bytes) -> list[int]:
    start = _scan_start(data)
    return [i for i in range(start, len(data) - 1) if data[i] == 0xFF and 0xD0 <= data[i + 1] <= 0xD7]


def jpeg_rst_swapped() -> bytes:
    """The codes of the second and third RST markers exchanged (RST1 and RST2)."""
    data = bytearray(jpeg_restart())
    a, b = _rst_positions(bytes(data))[1:3]
    data[a + 1], data[b + 1] = data[b + 1], data[a + 1]
    return bytes(data)


def jpeg_rst_removed() -> bytes:
    """One RST marker (the fourth) cut out, with its two bytes: one marker too few."""
    data = jpeg_restart()
    at = _rst_positions(data)[3]
    return data[:at] + data[at + 2:]


def jpeg_restart_chunk_deleted() -> bytes:
    """Everything from the middle of the second restart interval to the middle of the fourth
    removed (bytes lost in transfer): the markers left are out of order and too few."""
    data = jpeg_restart()
    rst = _rst_positions(data)
    return data[:(rst[0] + rst[1]) // 2] + data[(rst[2] + rst[3]) // 2:]


def jpeg_marker_in_scan(code: int = 0xD8) -> bytes:
    """A marker (a second SOI by default) written over two bytes in the middle of the scan."""
    data = bytearray(jpeg_bytes(_img(160, 200, seed=12)))
    start = _scan_start(bytes(data))
    mid = (start + len(data) - 2) // 2
    while data[mid - 1] == 0xFF or data[mid + 2] == 0x00:  # not inside an FF 00 pair
        mid += 1
    data[mid:mid + 2] = bytes([0xFF, code])
    return bytes(data)


def jpeg_without_eoi() -> bytes:
    """A complete scan whose end-of-image marker was cut off (2 bytes short)."""
    return jpeg_bytes(_img(seed=13))[:-2]


# Broken marker structure: file name -> Case (the strict CPU decoder's message fragments). Kept
# apart from BAD, whose cases the decoders' other tests iterate over.
STRUCTURAL: dict[str, Case] = {}  # filled below, once Case exists


# --- the cases ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Case:
    """One hostile file: its bytes maker and the fragments its error message must contain."""

    make: Callable[[], bytes]
    reason: tuple[str, ...]


def _bombs() -> dict[str, Case]:
    cases = {}
    makers = {"jpg": jpeg_claiming, "png": png_claiming, "bmp": bmp_claiming, "tif": tiff_claiming,
              "ppm": pnm_claiming, "webp": webp_claiming, "jp2": jp2_claiming}
    for ext, maker in makers.items():
        side = 65535 if ext == "jpg" else BOMB  # JPEG's largest side
        cases[f"bomb_{ext}.{ext}"] = Case(lambda m=maker, s=side: m(s, s), ("max_pixels", f"{side}x{side}"))
    # under max_pixels: the formats whose header says how much data the pixels need are refused
    # before decoding; the others fail in their decoder, which stops at the missing data
    under = {"png": ("need at least",), "bmp": ("need at least",), "ppm": ("need at least",),
             "jpg": ("corrupt JPEG data",), "tif": ("TIFF",), "jp2": ("JPEG2000",), "webp": ("WEBP",)}
    for ext, reason in under.items():
        maker = makers[ext]
        cases[f"under_max_{ext}.{ext}"] = Case(lambda m=maker: m(UNDER, UNDER), reason)
    return cases


def _truncations() -> dict[str, Case]:
    makers = {"jpg": (lambda: jpeg_bytes(_img(seed=9)), "JPEG"), "png": (lambda: png_bytes(_img(seed=9)), "PNG"),
              "bmp": (lambda: _pil("BMP"), "BMP"), "tif": (lambda: _pil("TIFF"), "TIFF"),
              "ppm": (lambda: _pil("PPM"), "PNM"), "webp": (lambda: _pil("WEBP", quality=90), "WEBP"),
              "jp2": (lambda: _pil("JPEG2000"), "JPEG2000")}
    return {f"truncated_{ext}.{ext}": Case(truncated(maker), (fmt,)) for ext, (maker, fmt) in makers.items()}


BAD: dict[str, Case] = {
    **_bombs(),
    "thin_png.png": Case(thin_png, ("max_aspect_ratio", "100000x1")),
    "thin_jpeg.jpg": Case(thin_jpeg, ("max_aspect_ratio",)),
    "thin_bmp.bmp": Case(lambda: bmp_claiming(1, 100000), ("max_aspect_ratio",)),
    "jpeg_corrupt_scan.jpg": Case(jpeg_corrupt_scan, ("corrupt JPEG data", "strict")),
    "jpeg_scan_cut_short.jpg": Case(jpeg_scan_cut_short, ("corrupt JPEG data",)),
    "jpeg_bad_huffman_table.jpg": Case(jpeg_bad_huffman_table, ("JPEG",)),
    "png_bad_crc.png": Case(png_bad_crc, ("CRC mismatch", "IDAT")),
    "png_bad_data.png": Case(png_bad_data, ("PNG",)),
    "png_huge_chunk.png": Case(png_huge_chunk, ("4278190180 bytes", "past the end")),
    **_truncations(),
    "zero_bytes.jpg": Case(lambda: b"", ("empty",)),
    "random_bytes.png": Case(lambda: np.random.default_rng(3).bytes(2000), ("unrecognized image format",)),
    "html_named.jpg": Case(lambda: b"<html><body>404 Not Found</body></html>\n", ("unrecognized image format",)),
    "gif_named.png": Case(gif, ("GIF is not supported",)),
    "pnm_absurd_header.pgm": Case(pnm_absurd_header, ("PNM",)),
}


STRUCTURAL.update({
    "jpeg_rst_swapped.jpg": Case(jpeg_rst_swapped, ("corrupt JPEG data",)),
    "jpeg_rst_removed.jpg": Case(jpeg_rst_removed, ("corrupt JPEG data",)),
    "jpeg_restart_chunk_deleted.jpg": Case(jpeg_restart_chunk_deleted, ("corrupt JPEG data",)),
    "jpeg_soi_in_scan.jpg": Case(jpeg_marker_in_scan, ("JPEG",)),
    "jpeg_tem_in_scan.jpg": Case(lambda: jpeg_marker_in_scan(0x01), ("JPEG",)),
    "jpeg_without_eoi.jpg": Case(jpeg_without_eoi, ("JPEG",)),
})


def write(folder: Path, names: list[str] | None = None, good: bool = True) -> dict[str, bytes]:
    """Write the good files (unless ``good=False``) and the named bad cases (all when None) into
    ``folder``; returns name -> bytes of what was written."""
    folder.mkdir(parents=True, exist_ok=True)
    files = dict(good_files()) if good else {}
    for name in (sorted(BAD) if names is None else names):
        files[name] = BAD[name].make()
    for name, data in files.items():
        (folder / name).write_bytes(data)
    return files
