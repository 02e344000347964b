"""Partial JPEG decoding: only the crop window, through libjpeg-turbo's TurboJPEG 3 API.

The cropping decoders (``image_random_crop``, ``image_crop``, ``image_slice``)
need a window of the image. libjpeg-turbo can decode just that: it skips the
inverse DCT, upsampling and colour conversion outside the window and stops
after its last row (the Huffman data above the window must still be read).
On the benchmark's ImageNet-like JPEGs that is ~20 % less time than a full
decode for a random-crop window. OpenCV does not expose it and the usual
Python bindings do not either (simplejpeg scales only; PyTurboJPEG has no
cropped decode and needs a system library), so the TurboJPEG functions are
called here through ``ctypes`` (which releases the GIL during each call).

The library is looked up once, in this order: ``STOKER_TURBOJPEG_LIB`` (a
path), the copy that the ``turbojpeg`` wheel ships (``pip install
turbojpeg``, the ``jpeg`` extra), then a system ``libturbojpeg``. It must be
TurboJPEG 3 (``tj3SetCroppingRegion``); without one, or with
``STOKER_TURBOJPEG=0``, :func:`decode_window` returns None and the caller
decodes the whole image with OpenCV and crops it.

Pixels equal the full decode's (the same libjpeg-turbo, default settings): the
window is widened to the iMCU boundary on the left, as the library requires,
and by one more iMCU on each side, whose pixels the chroma upsampling of the
edge columns reads; the margins are cut off afterwards. Any error (corrupt data,
an unusual layout) also returns None, so the full decode reports or handles it.

The same library decodes whole JPEGs for the decoders' ``strict`` mode
(:func:`decode_full`): every handle stops at libjpeg's first warning
(``TJPARAM_STOPONWARNING``), which is how corrupt entropy-coded data ("Corrupt
JPEG data: premature end of data segment", "bad Huffman code"...) and truncation
show; OpenCV only prints those warnings and returns the damaged pixels. The
pixels of a clean file equal OpenCV's (the same libjpeg-turbo code, default
settings; checked in the tests), at the same speed (see benchmarks/RESULTS.md,
"strict decoding"). Progressive files with more than 500 scans are refused
(``TJPARAM_SCANLIMIT``, libjpeg-turbo's advice against scan-flooding files). The mixed decoders'
entropy check reads a file the same way at 1/8 scale, without keeping the pixels
(:func:`entropy_problem`).

Progressive and grayscale files are decoded over the full width from the top down
to the window's last row, then cut: libjpeg-turbo's column cropping and row
skipping cost more than they save there (H100 host, ImageNet-like set, random-crop
windows, one thread: progressive 5.86 ms cropped against 4.53 ms whole, grayscale
1.76 against 1.46; baseline colour 1.59 against 2.11, so those keep the crop).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import importlib.util
import math
import os
import threading

import numpy as np

__all__ = ["available", "decode_window", "decode_full", "decode_padded", "decode_scaled", "entropy_problem",
           "JPEGDataError"]

_TJINIT_DECOMPRESS = 1
_TJPARAM_STOPONWARNING, _TJPARAM_SUBSAMP, _TJPARAM_JPEGWIDTH, _TJPARAM_JPEGHEIGHT = 0, 4, 5, 6
_TJPARAM_PROGRESSIVE, _TJPARAM_SCANLIMIT, _TJPARAM_COLORSPACE = 12, 13, 8
_TJCS_CMYK, _TJCS_YCCK = 3, 4
_TJERR_WARNING = 0
_TJPF_RGB, _TJPF_BGR, _TJPF_RGBX, _TJPF_BGRX, _TJPF_GRAY, _TJPF_CMYK = 0, 1, 2, 3, 6, 11
_PIXEL_FORMATS = {"rgb": (_TJPF_RGB, 3), "bgr": (_TJPF_BGR, 3), "gray": (_TJPF_GRAY, 1), "cmyk": (_TJPF_CMYK, 4)}
_TJSAMP_GRAY = 3
_SCAN_LIMIT = 500
_SCAN_LIMIT_MESSAGE = "Progressive JPEG image has more than"
# Width in pixels of an iMCU for each chroma subsampling (TJSAMP_444, 422, 420, GRAY, 440, 411, 441).
_MCU_WIDTH = (8, 16, 16, 8, 8, 32, 8)


class _Region(ctypes.Structure):
    _fields_ = [("x", ctypes.c_int), ("y", ctypes.c_int), ("w", ctypes.c_int), ("h", ctypes.c_int)]


class _Scale(ctypes.Structure):
    _fields_ = [("num", ctypes.c_int), ("denom", ctypes.c_int)]


_UNCROPPED = _Region(0, 0, 0, 0)
_UNSCALED = _Scale(1, 1)
_EIGHTH = _Scale(1, 8)


class JPEGDataError(ValueError):
    """libjpeg found corrupt data in a JPEG (a warning it would otherwise decode through); the
    message is libjpeg's."""


_state: dict = {}
_lock = threading.Lock()
_local = threading.local()


def _candidates():
    from stoker import settings  # (lazily: the decode helpers load this file by its path)

    chosen = settings.get().turbojpeg_lib
    if chosen:
        yield chosen
    try:
        spec = importlib.util.find_spec("turbojpeg")
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.origin:
        # the wheel's extension module sits next to its bundled libraries (auditwheel's .libs folder)
        yield from sorted(glob.glob(os.path.join(os.path.dirname(spec.origin), "turbojpeg.libs", "libturbojpeg*.so*")))
    name = ctypes.util.find_library("turbojpeg")
    if name:
        yield name


def _load():
    with _lock:
        if "lib" in _state:
            return _state["lib"]
        from stoker import settings

        lib = None
        if settings.get().turbojpeg:
            for path in _candidates():
                try:
                    cand = ctypes.CDLL(path)
                except OSError:
                    continue
                if hasattr(cand, "tj3SetCroppingRegion") and hasattr(cand, "tj3Decompress8"):
                    lib = cand
                    _declare(lib)
                    # The same library through PyDLL, for the calls that take microseconds: they
                    # keep the GIL. Each release is a chance to wait behind another thread's
                    # Python for a whole switch interval; only the decode itself is worth it.
                    _state["quick"] = ctypes.PyDLL(path)
                    _declare(_state["quick"])
                    _state["path"] = path
                    break
        _state["lib"] = lib
        return lib


def _declare(lib) -> None:
    vp, c_int, c_size = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t
    lib.tj3Init.restype, lib.tj3Init.argtypes = vp, [c_int]
    lib.tj3Destroy.restype, lib.tj3Destroy.argtypes = None, [vp]
    lib.tj3DecompressHeader.restype, lib.tj3DecompressHeader.argtypes = c_int, [vp, vp, c_size]
    lib.tj3Get.restype, lib.tj3Get.argtypes = c_int, [vp, c_int]
    lib.tj3SetCroppingRegion.restype, lib.tj3SetCroppingRegion.argtypes = c_int, [vp, _Region]
    lib.tj3SetScalingFactor.restype, lib.tj3SetScalingFactor.argtypes = c_int, [vp, _Scale]
    lib.tj3Decompress8.restype, lib.tj3Decompress8.argtypes = c_int, [vp, vp, c_size, vp, c_int, c_int]
    lib.tj3Set.restype, lib.tj3Set.argtypes = c_int, [vp, c_int, c_int]
    lib.tj3GetErrorStr.restype, lib.tj3GetErrorStr.argtypes = ctypes.c_char_p, [vp]
    lib.tj3GetErrorCode.restype, lib.tj3GetErrorCode.argtypes = c_int, [vp]


def available() -> bool:
    """Whether a TurboJPEG 3 library was found (and not turned off)."""
    return _load() is not None


def library_path() -> str | None:
    """The library in use, or None."""
    return _state.get("path") if available() else None


class _Handle:
    """One decompressor per thread: TurboJPEG handles are not thread-safe."""

    def __init__(self, lib):
        self.lib = lib
        self.ptr = lib.tj3Init(_TJINIT_DECOMPRESS)
        if self.ptr:
            # Stop at the first warning: a partial decode then fails over to the full decode, which
            # reports or (strict=False) tolerates it; a strict full decode refuses the file at once.
            lib.tj3Set(self.ptr, _TJPARAM_STOPONWARNING, 1)
            lib.tj3Set(self.ptr, _TJPARAM_SCANLIMIT, _SCAN_LIMIT)

    def __del__(self):
        if self.ptr:
            self.lib.tj3Destroy(self.ptr)
            self.ptr = None


def _handle():
    """This thread's decompressor (None without the library)."""
    lib = _state["lib"] if "lib" in _state else _load()
    if lib is None:
        return None
    handle = getattr(_local, "handle", None)
    if handle is None or handle.lib is not lib:
        handle = _local.handle = _Handle(lib)
    return handle.ptr or None


def decode_full(buf: np.ndarray, pixel_format: str, expect: tuple[int, int] | None = None) -> np.ndarray | None:
    """Decode a whole JPEG (1D uint8 ``buf``), stopping at libjpeg's first warning.

    ``pixel_format``: "rgb", "bgr", "gray" (libjpeg's luma plane, as OpenCV's grayscale read)
    or "cmyk" (4-component files). ``expect``: the (height, width) the caller checked against
    its limits; a file whose frame libjpeg reads differently is left to the caller.

    Returns the HWC uint8 array, or None when the library is unavailable or cannot decode the
    file (a fatal error, an unsupported layout such as 12-bit samples: the caller's own decode
    reports or handles it). Raises :class:`JPEGDataError` with libjpeg's message when the data is
    corrupt (a warning) or floods the decoder with progressive scans."""
    h = _handle()
    if h is None:
        return None
    if not buf.flags.c_contiguous:
        buf = np.ascontiguousarray(buf)
    ptr, size = buf.ctypes.data, buf.size
    quick = _state["quick"]
    if quick.tj3DecompressHeader(h, ptr, size) != 0:
        return _failure(quick, h)
    W, H = quick.tj3Get(h, _TJPARAM_JPEGWIDTH), quick.tj3Get(h, _TJPARAM_JPEGHEIGHT)
    if W <= 0 or H <= 0 or (expect is not None and (H, W) != tuple(expect)):
        return None
    # a partial or scaled decode's region and scale stay set otherwise
    if quick.tj3SetScalingFactor(h, _UNSCALED) != 0 or quick.tj3SetCroppingRegion(h, _UNCROPPED) != 0:
        return None
    pf, channels = _PIXEL_FORMATS[pixel_format]
    out = np.empty((H, W, channels), np.uint8)
    if _state["lib"].tj3Decompress8(h, ptr, size, out.ctypes.data, 0, pf) != 0:
        return _failure(quick, h)
    return out


def entropy_problem(buf: np.ndarray) -> str | None:
    """libjpeg's first warning (or error) while reading all of a JPEG's entropy-coded data, as a
    strict decode would; None when it reads clean, or without the library. For the mixed decoders'
    entropy check (:mod:`stoker.backend.jpeg_entropy_check`).

    How: a decode at 1/8 scale into gray (CMYK for 4-component files, which have no gray output).
    DCT scaling makes each 8x8 block one pixel from its DC coefficient, so the inverse DCT, upsampling
    and colour conversion cost next to nothing, but every block's Huffman codes must still be read
    to find the next one, through the same decoder, marker reader and end-of-file checks as a full
    decode: it warns on exactly the files the full decode warns on (benchmarks/jpeg_entropy_check_cost.py
    compares them on damaged files), at about 60 % of its time (entropy decoding is the rest)."""
    h = _handle()
    if h is None:
        return None
    if not buf.flags.c_contiguous:
        buf = np.ascontiguousarray(buf)
    ptr, size = buf.ctypes.data, buf.size
    quick = _state["quick"]
    if quick.tj3DecompressHeader(h, ptr, size) != 0 or quick.tj3SetScalingFactor(h, _EIGHTH) != 0 or \
            quick.tj3SetCroppingRegion(h, _UNCROPPED) != 0:
        return _problem(quick, h)
    cmyk = quick.tj3Get(h, _TJPARAM_COLORSPACE) in (_TJCS_CMYK, _TJCS_YCCK)
    need = -(-quick.tj3Get(h, _TJPARAM_JPEGWIDTH) // 8) * -(-quick.tj3Get(h, _TJPARAM_JPEGHEIGHT) // 8) * 4
    out = getattr(_local, "eighth", None)
    if out is None or out.size < need:  # (reused: a fresh buffer per file costs page faults)
        out = _local.eighth = np.empty(max(need, 1 << 16), np.uint8)
    if _state["lib"].tj3Decompress8(h, ptr, size, out.ctypes.data, 0, _TJPF_CMYK if cmyk else _TJPF_GRAY) != 0:
        return _problem(quick, h)
    return None


def _problem(quick, h) -> str:
    """The message of a failed call (the handle is replaced, see _failure)."""
    message = (quick.tj3GetErrorStr(h) or b"").decode("utf-8", "replace").strip()
    _local.handle = None
    return message or "libjpeg failed without a message"


def _failure(quick, h) -> None:
    """After a failed call: raise JPEGDataError for a warning (corrupt data) or the scan limit,
    else None (a fatal error, left to the caller's own decoder). Either way the thread's handle is
    replaced: a call stopped by a warning leaves libjpeg's marker reader mid-stream (TurboJPEG does
    not abort it), and the next file would then fail with the same warning."""
    message = (quick.tj3GetErrorStr(h) or b"").decode("utf-8", "replace").strip()
    warned = quick.tj3GetErrorCode(h) == _TJERR_WARNING
    _local.handle = None
    if warned or message.startswith(_SCAN_LIMIT_MESSAGE):
        raise JPEGDataError(message or "libjpeg warned about corrupt data")
    return None


def _opened(buf: np.ndarray):
    """``(handle, quick library, buf)`` with ``buf``'s header read into this thread's handle (``buf``
    made contiguous: TurboJPEG reads one flat buffer), or None without the library or when the
    header is refused (the handle is then replaced, see _failure)."""
    h = _handle()
    if h is None:
        return None
    if not buf.flags.c_contiguous:
        buf = np.ascontiguousarray(buf)
    quick = _state["quick"]
    if quick.tj3DecompressHeader(h, buf.ctypes.data, buf.size) != 0:
        _local.handle = None
        return None
    return h, quick, buf


def _decoded_span(quick, h, sub: int, window, W: int) -> tuple[int, int, int]:
    """``(x0, x1, top)``: the columns and first row libjpeg decodes for the ``(y, x, h, w)``
    window of an opened image: whole rows from the top for gray or progressive files (cheaper
    there than cropping), else the window's rows and its columns widened to whole iMCUs (the
    library crops on them) and by one more on each side (read by the chroma upsampling; see the
    module docstring)."""
    y, x, _, ww = window
    if sub == _TJSAMP_GRAY or quick.tj3Get(h, _TJPARAM_PROGRESSIVE) == 1:
        return 0, W, 0
    mcu = _MCU_WIDTH[sub]
    return max(0, x - x % mcu - mcu), min(W, x + ww + mcu), y


def _opened_window(buf: np.ndarray, window):
    """``(handle, library, buf, subsampling, height, width)`` of a JPEG whose header TurboJPEG read,
    when the ``(y, x, h, w)`` window is non-empty and inside the image and the subsampling is one
    the partial decodes know; else None."""
    y, x, hh, ww = window
    if hh <= 0 or ww <= 0:
        return None  # a 0-sized region means "everything" to TurboJPEG
    opened = _opened(buf)
    if opened is None:
        return None
    h, quick, buf = opened
    sub = quick.tj3Get(h, _TJPARAM_SUBSAMP)
    W, H = quick.tj3Get(h, _TJPARAM_JPEGWIDTH), quick.tj3Get(h, _TJPARAM_JPEGHEIGHT)
    if not 0 <= sub < len(_MCU_WIDTH) or y < 0 or x < 0 or y + hh > H or x + ww > W:
        return None
    return h, quick, buf, sub, H, W


def decode_window(buf: np.ndarray, window, bgr: bool = False) -> np.ndarray | None:
    """Decode the ``(y, x, h, w)`` window of a colour JPEG (1D uint8 ``buf``) to an HWC uint8 array
    (RGB, or BGR), or return None when partial decoding is unavailable or fails."""
    y, x, hh, ww = (int(v) for v in window)
    found = _opened_window(buf, (y, x, hh, ww))
    if found is None:
        return None
    h, quick, buf, sub, H, W = found
    ptr, size = buf.ctypes.data, buf.size
    x0, x1, top = _decoded_span(quick, h, sub, (y, x, hh, ww), W)
    if quick.tj3SetScalingFactor(h, _UNSCALED) != 0 or \
            quick.tj3SetCroppingRegion(h, _Region(x0, top, x1 - x0, y + hh - top)) != 0:
        return None
    out = np.empty((y + hh - top, x1 - x0, 3), np.uint8)
    if _state["lib"].tj3Decompress8(h, ptr, size, out.ctypes.data, 0, _TJPF_BGR if bgr else _TJPF_RGB) != 0:
        _local.handle = None  # see _failure
        return None
    if x0 == x and x1 == x + ww and top == y:
        return out
    return np.ascontiguousarray(out[y - top:, x - x0:x - x0 + ww])



def decode_padded(buf: np.ndarray, window, margins, bgr: bool = False, expect: tuple[int, int] | None = None):
    """Decode the ``(y, x, h, w)`` window of a colour JPEG (1D uint8 ``buf``; the whole image for
    ``(0, 0, H, W)``) into 4 bytes per pixel (RGBX, or BGRX; the X byte is 255), with room for
    ``margins`` = (top, bottom, left, right) more pixels around the window, for the fused decode +
    resize (:mod:`stoker.pipeline.padded_decode`): Pillow keeps RGB images in this layout and
    reads the buffer as it is.

    Returns ``(image, (row, col))``: an (rows, cols, 4) uint8 array and where the window's first pixel
    lies in it. The window's pixels are those of :func:`decode_full` and :func:`decode_window` (the
    same decoder settings and region, only a wider pixel format); what lies around it is
    unspecified (decoded neighbours or garbage): the caller fills the margins. The array ends
    with one more row than ``rows``, past its shape, so that a row pitch mapping of any
    sub-rectangle stays inside the allocation. ``expect``: the (height, width) the caller read
    from the header (as decode_full). None when the library is unavailable or
    the file fails or warns (corrupt data, an unusual layout): the caller then decodes as usual,
    which reports or handles it."""
    y, x, hh, ww = (int(v) for v in window)
    found = _opened_window(buf, (y, x, hh, ww))
    if found is None or found[3] == _TJSAMP_GRAY:
        return None
    h, quick, buf, sub, H, W = found
    ptr, size = buf.ctypes.data, buf.size
    if expect is not None and (H, W) != tuple(expect):
        return None  # libjpeg reads the frame differently from the caller's header parser
    if (y, x, hh, ww) == (0, 0, H, W):
        x0, x1, top, region = 0, W, 0, _UNCROPPED  # as decode_full
    else:  # as decode_window
        x0, x1, top = _decoded_span(quick, h, sub, (y, x, hh, ww), W)
        region = _Region(x0, top, x1 - x0, y + hh - top)
    mt, mb, ml, mr = (int(m) for m in margins)
    r0, c0 = max(0, mt - (y - top)), max(0, ml - (x - x0))  # where the decoded region starts
    row, col = r0 + y - top, c0 + x - x0  # where the window starts
    rows, cols = row + hh + mb, max(c0 + x1 - x0, col + ww + mr)
    if quick.tj3SetScalingFactor(h, _UNSCALED) != 0 or quick.tj3SetCroppingRegion(h, region) != 0:
        return None
    flat = np.empty((rows + 1) * cols * 4, np.uint8)
    out = flat[:rows * cols * 4].reshape(rows, cols, 4)
    if _state["lib"].tj3Decompress8(h, ptr, size, out.ctypes.data + (r0 * cols + c0) * 4, cols * 4,
                                    _TJPF_BGRX if bgr else _TJPF_RGBX) != 0:
        _local.handle = None  # see _failure
        return None
    return out, (row, col)


def scaled_size(extent: int, eighths: int) -> int:
    """An image side of ``extent`` pixels decoded at ``eighths``/8 of its size (libjpeg rounds up)."""
    return -(-extent * eighths // 8)


def decode_scaled(buf: np.ndarray, window, eighths: int, bgr: bool = False):
    """Decode a colour JPEG (1D uint8 ``buf``) at ``eighths``/8 of its size (1..8; libjpeg-turbo's
    DCT scaling: each 8x8 block of coefficients becomes an ``eighths`` x ``eighths`` block of
    pixels), covering at least the ``(y, x, h, w)`` window given in the scaled image's pixels.

    Returns ``(image, (top, left))``: an HWC uint8 array (RGB, or BGR) and the scaled image's
    position of its first pixel: the window's rows, and columns from up to two iMCUs before it to
    one after it (TurboJPEG crops on iMCU columns; see decode_window for the margin); or None when the library is
    unavailable or the file fails (corrupt data, an unusual layout): the caller then decodes it in
    full. The pixels are not those of the full decode: use it only where they are shrunk anyway
    (see stoker.pipeline.reduced_decode)."""
    opened = _opened(buf)
    if opened is None:
        return None
    h, quick, buf = opened
    ptr, size = buf.ctypes.data, buf.size
    sub = quick.tj3Get(h, _TJPARAM_SUBSAMP)
    W, H = quick.tj3Get(h, _TJPARAM_JPEGWIDTH), quick.tj3Get(h, _TJPARAM_JPEGHEIGHT)
    if not 0 <= sub < len(_MCU_WIDTH) or sub == _TJSAMP_GRAY or W <= 0 or H <= 0:
        return None
    g = math.gcd(eighths, 8)  # TurboJPEG takes its factors in lowest terms only
    if quick.tj3SetScalingFactor(h, _Scale(eighths // g, 8 // g)) != 0:
        return None
    sw, sh = scaled_size(W, eighths), scaled_size(H, eighths)
    y, x, hh, ww = (int(v) for v in window)
    if hh <= 0 or ww <= 0 or y < 0 or x < 0 or y + hh > sh or x + ww > sw:
        return None
    if quick.tj3Get(h, _TJPARAM_PROGRESSIVE) == 1:
        x0, x1 = 0, sw  # whole rows: cropping costs more than it saves there (module docstring)
    else:
        # TurboJPEG crops on (scaled) iMCU columns; one more on each side, as in decode_window, so
        # that the chroma upsampling of the window's edge columns sees its real neighbours.
        mcu = scaled_size(_MCU_WIDTH[sub], eighths)
        x0, x1 = max(0, x - x % mcu - mcu), min(sw, x + ww + mcu)
    bottom = y + hh
    if quick.tj3SetCroppingRegion(h, _Region(x0, y, x1 - x0, bottom - y)) != 0:
        return None
    out = np.empty((bottom - y, x1 - x0, 3), np.uint8)
    if _state["lib"].tj3Decompress8(h, ptr, size, out.ctypes.data, 0, _TJPF_BGR if bgr else _TJPF_RGB) != 0:
        _local.handle = None  # see _failure
        return None
    return out, (y, x0)
