"""CPU image decoding: bytes in, an HWC array in the requested colour space and type out.

:func:`decode_cpu` is the one entry point; the decoder operators call it on
their thread pool and the GPU decoders fall back to it for formats the GPU
cannot decode. OpenCV decodes every format (it releases the GIL, and
libjpeg-turbo inside it is SIMD-accelerated); Pillow is the fallback for the
rare files that OpenCV rejects but Pillow reads.

Pipeline of one decode:

1. detect the format from the magic bytes and read the header (size, EXIF
   orientation, stored channels) without decoding, and refuse what no
   decoder should allocate: more than ``max_pixels`` pixels, a side more
   than ``max_aspect_ratio`` times the other, a file too short for the size
   it claims (all with the standard library alone, see
   :func:`stoker.operators.decoders.formats.claimed_size`); with ``strict``,
   also a PNG whose chunk CRCs do not match;
2. decode to a "native" array: channels in RGB order (1 gray, 2 gray+alpha,
   3 RGB, 4 RGBA; palettes expanded; CMYK converted to RGB), uint8 or uint16.
   With ``strict``, JPEGs go through TurboJPEG stopping at libjpeg's first
   warning (:func:`stoker.operators.decoders.turbo.decode_full`; the same
   pixels as OpenCV's decode), so corrupt entropy-coded data is an error;
3. apply the EXIF orientation (as a NumPy view, no copy);
4. cut the region of interest, in the coordinates of the oriented image (a
   view). Colour JPEGs with a window skip steps 2-4: libjpeg-turbo decodes
   only the window (:mod:`stoker.operators.decoders.turbo`, when a TurboJPEG 3
   library is installed), with the same pixels as the full decode;
5. convert to the output colour space and data type (the only copy).

Colour conversions follow DALI: GRAY is ITU-R BT.601 luma
(0.299 R + 0.587 G + 0.114 B, truncated as DALI does; JPEGs give libjpeg's
luma plane); YCbCr is BT.601 "studio range" (Y in [16, 235], Cb/Cr in
[16, 240]); ANY_DATA keeps the stored channels (gray stays 1 channel,
RGBA keeps alpha). Data types are converted to the target's dynamic range:
float in [0, 1], uint16 = uint8 * 257, 16-bit sources to uint8 by rounding
value / 257.
"""

from __future__ import annotations

import ctypes
import io
import platform
import sys

import cv2
import numpy as np

from stoker import settings, types
from stoker.operators.decoders import formats, turbo
from stoker.operators.decoders.formats import ImageFormatError, ImageInfo

__all__ = ["ImageDecodeError", "DEFAULT_MAX_PIXELS", "DEFAULT_MAX_ASPECT_RATIO", "decode_cpu", "orient",
           "convert_color", "convert_dtype", "read_info"]

read_info = formats.read_info

# glibc malloc settings made on the first decode (see _tune_allocator); None = not tried yet.
_ALLOCATOR_TUNED: bool | None = None
_MMAP_THRESHOLD = 32 << 20  # glibc's largest allowed value
_TRIM_THRESHOLD = 64 << 20

_IGNORE = cv2.IMREAD_IGNORE_ORIENTATION

# Largest image (height * width) decoded by default: 2**28 pixels is 768 MiB as 8-bit RGB. A header
# claiming more is refused before any pixel buffer is allocated (a corrupt or hostile file could
# otherwise ask for tens of gigabytes).
DEFAULT_MAX_PIXELS = 2 ** 28
# Largest ratio of the longer side to the shorter decoded by default. Photos, scans and panoramas
# stay under 100; a 1 x 100000 strip is a damaged header or a hostile file, and resizing it to a
# fixed shorter side (resize_shorter=224) would ask for a 224 x 22,400,000 image.
DEFAULT_MAX_ASPECT_RATIO = 1000.0


class ImageDecodeError(ValueError):
    """The image could not be decoded (corrupt, truncated or unsupported data)."""


def decode_cpu(data, output_type=types.RGB, dtype=np.uint8, adjust_orientation: bool = True,
               roi: tuple[int, int, int, int] | None = None, roi_fn=None,
               max_pixels: int | None = DEFAULT_MAX_PIXELS, strict: bool = False,
               max_aspect_ratio: float | None = DEFAULT_MAX_ASPECT_RATIO) -> np.ndarray:
    """Decode one encoded image to an HWC array.

    Args:
        data: the encoded file (1D uint8 array, bytes or memoryview).
        output_type: a ``types.DALIImageType`` (RGB, BGR, GRAY, YCbCr, ANY_DATA).
        dtype: output element type (NumPy dtype); values are scaled to its range.
        adjust_orientation: apply the EXIF orientation.
        roi: ``(y, x, h, w)`` window of the (oriented) image to return.
        roi_fn: instead of ``roi``, a function of the oriented ``(height, width)``
            that returns the window (used by the random-crop decoder).
        max_pixels: refuse images whose header claims more than this many
            pixels (height * width), before decoding; None or 0: no limit.
        strict: refuse corrupt data that the format libraries decode through
            with a warning (JPEG entropy-coded data, truncation; PNG chunk
            CRCs). Off here, as OpenCV decodes; the decoder operators turn it
            on by default (their ``strict`` argument).
        max_aspect_ratio: refuse images whose longer side is more than this
            many times the shorter, before decoding; None or 0: no limit.

    Returns:
        ``(H, W, C)`` array of ``dtype``, C-contiguous.

    Raises:
        ImageDecodeError: the data is not a decodable image, or the window does
            not fit in it.
    """
    tune_allocator_once()
    buf = as_uint8(data)
    output_type = types.DALIImageType(output_type)
    try:
        info = _decode_info(buf)
        check_size(buf, info, max_pixels, max_aspect_ratio)
    except ImageFormatError as e:
        raise ImageDecodeError(str(e)) from None
    if strict:
        _check_container(buf, info)
    if (roi is not None or roi_fn is not None) and info.format == formats.JPEG and info.channels == 3 \
            and not info.cmyk and info.bit_depth == 8 and output_type in (types.RGB, types.BGR) \
            and (info.orientation == 1 or not adjust_orientation):
        # Decode only the window (libjpeg-turbo's partial decoding) when the library is there.
        win = roi if roi is not None else roi_fn(info.height, info.width)
        win = _checked_window(info.height, info.width, win)
        out = turbo.decode_window(buf, win, bgr=output_type == types.BGR)
        if out is not None:
            return convert_dtype(out, dtype)
        roi, roi_fn = win, None  # no partial decoding: the same window from the full image
    img, order = _decode_native(buf, info, output_type, strict)
    if info.orientation != 1:
        # OpenCV's and Pillow's TIFF readers apply the orientation tag whatever they are told.
        pre_oriented = info.format == formats.TIFF
        if adjust_orientation and not pre_oriented:
            img = orient(img, info.orientation)
        elif not adjust_orientation and pre_oriented:
            img = orient(img, _INVERSE_ORIENTATION[info.orientation])
    if roi_fn is not None:
        roi = roi_fn(img.shape[0], img.shape[1])
    if roi is not None:
        img = crop_view(img, roi)
    if order == "BGR":  # decoded straight to BGR for a BGR output
        return convert_dtype(np.ascontiguousarray(img), dtype)
    out = convert_color(img, output_type)
    return convert_dtype(np.ascontiguousarray(out), dtype)


def tune_allocator_once() -> None:
    """What the first CPU decode does before anything else (see _tune_allocator); for the fused
    paths that decode without calling :func:`decode_cpu`, and for every pipeline with host
    operators when it is built."""
    if _ALLOCATOR_TUNED is None:
        _tune_allocator()


def _tune_allocator() -> bool:
    """Keep freed image-sized blocks in glibc's heap instead of returning them to the kernel.

    Every decoded image, resized image and normalized output is a fresh 0.1-1 MB
    array. With glibc's defaults, blocks that size are handed back to the kernel
    when freed (``mmap`` above the threshold, heap trimming below it), so each new
    one is faulted in again page by page: about 130 page faults and 0.4 ms of
    kernel time per image in the training pipeline, a quarter of its CPU time.
    Raising the mmap and trim thresholds (``mallopt``) keeps up to 64 MB of freed
    heap per malloc arena for reuse. This is process-wide; it is skipped when the
    process already sets any ``MALLOC_*_`` tuning variable, off the glibc
    platform, or with ``STOKER_MALLOC_TUNING=0``. Returns whether it was applied.
    """
    global _ALLOCATOR_TUNED
    _ALLOCATOR_TUNED = False
    if not settings.get().malloc_tuning or not sys.platform.startswith("linux"):
        return False
    if any(k.startswith("MALLOC_") and k.endswith("_") for k in settings.external_env_names()):
        return False  # the user tunes glibc malloc themselves
    if platform.libc_ver()[0] != "glibc":
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    m_trim_threshold, m_mmap_threshold = -1, -3  # from glibc's malloc.h
    _ALLOCATOR_TUNED = bool(mallopt(m_mmap_threshold, _MMAP_THRESHOLD)) and bool(
        mallopt(m_trim_threshold, _TRIM_THRESHOLD))
    return _ALLOCATOR_TUNED


def crop_view(img: np.ndarray, roi) -> np.ndarray:
    """``img[y:y+h, x:x+w]`` after checking that the window lies inside the image."""
    y, x, h, w = _checked_window(img.shape[0], img.shape[1], roi)
    return img[y:y + h, x:x + w]


def _checked_window(H: int, W: int, roi) -> tuple[int, int, int, int]:
    y, x, h, w = (int(v) for v in roi)
    if y < 0 or x < 0 or h < 0 or w < 0 or y + h > H or x + w > W:
        raise ImageDecodeError(
            f"the region of interest (y={y}, x={x}, h={h}, w={w}) does not fit in the {H}x{W} image")
    return y, x, h, w


def check_size(buf: np.ndarray, info: ImageInfo, max_pixels, max_aspect_ratio) -> None:
    """Refuse, from the header alone, an image that should not be decoded: more than
    ``max_pixels`` pixels, a side more than ``max_aspect_ratio`` times the other, or a file too
    short for the size it claims (truncated, or a header lying about the size: the decoding
    library would allocate the claimed pixels before finding out)."""
    h, w, fmt, size = info.height, info.width, info.format.upper(), None
    if info.format != formats.JPEG:
        size = formats.claimed_size(buf, info.format)
        h, w = size.height, size.width
    if max_pixels and h * w > max_pixels:
        raise ImageDecodeError(
            f"the {fmt} header claims {w}x{h} = {h * w} pixels, more than max_pixels={max_pixels}; raise "
            "the decoder's max_pixels argument (0: no limit) to decode it")
    if max_aspect_ratio and max(h, w) > max_aspect_ratio * min(h, w):
        raise ImageDecodeError(
            f"the {fmt} header claims {w}x{h} pixels, a side more than max_aspect_ratio={max_aspect_ratio:g} "
            "times the other (a damaged header?); raise the decoder's max_aspect_ratio argument (0: no limit) "
            "to decode it")
    if size is not None and buf.size < size.min_bytes:
        raise ImageDecodeError(
            f"the {fmt} header claims {w}x{h} pixels, which need at least {size.min_bytes} bytes of data, but "
            f"the file has {buf.size} (truncated, or a damaged header)")
    if info.format == formats.PNG:  # chunk lengths (strict adds the CRCs): see png_integrity_problem
        problem = formats.png_integrity_problem(buf, crc=False)
        if problem:
            raise ImageDecodeError(f"corrupt PNG data: {problem}")


def _check_container(buf: np.ndarray, info: ImageInfo) -> None:
    """strict: the integrity checks that need no decoding (PNG chunk CRCs; a JPEG's end marker when
    TurboJPEG, which reports truncation itself, is not installed)."""
    problem = None
    if info.format == formats.PNG:
        problem = formats.png_integrity_problem(buf)
    elif info.format == formats.JPEG and not turbo.available():
        problem = formats.jpeg_end_problem(buf)
    if problem:
        raise ImageDecodeError(f"corrupt {info.format.upper()} data: {problem}; {_STRICT_HINT}")


_STRICT_HINT = "the decoder's strict=False would decode what can be read"


def as_uint8(data) -> np.ndarray:
    """Encoded bytes as a 1-D uint8 array (a view where it can be; ImageDecodeError for data that
    is not bytes)."""
    if isinstance(data, np.ndarray):
        if data.dtype != np.uint8:
            if data.dtype.itemsize != 1:
                raise ImageDecodeError(f"expected encoded bytes (a 1D uint8 tensor), got dtype {data.dtype}")
            data = data.view(np.uint8)
        return np.ascontiguousarray(data.reshape(-1))  # header parsers read it through a memoryview
    return np.frombuffer(data, np.uint8)


def _decode_info(buf: np.ndarray) -> ImageInfo:
    """The header facts decoding needs (format, orientation, stored channels; the size of JPEGs
    and PNGs: the other formats' size comes from formats.claimed_size)."""
    fmt = formats.detect_format(buf[:16].tobytes())
    if fmt in (formats.JPEG, formats.PNG):
        return formats.read_info(memoryview(buf))
    if fmt == formats.TIFF:
        return ImageInfo(fmt, 0, 0, 0, formats.exif_orientation(buf.tobytes()))
    if fmt == formats.WEBP:
        return ImageInfo(fmt, 0, 0, 0, formats._webp_orientation(memoryview(buf)))
    return ImageInfo(fmt, 0, 0, 0)


# --- decoding to the native array ----------------------------------------------

def _decode_native(buf: np.ndarray, info: ImageInfo, output_type, strict: bool = False) -> tuple[np.ndarray, str]:
    """Decode to (array HWC in RGB order, "RGB") or, for a direct BGR decode, (array, "BGR")."""
    if info.format == formats.JPEG:
        if strict:
            decoded = _decode_jpeg_strict(buf, info, output_type)
            if decoded is not None:
                return decoded
        if info.cmyk:
            # Pillow's CMYK -> RGB matches DALI's exactly; OpenCV's rounds one level higher.
            return _decode_pillow(buf, info), "RGB"
        if info.channels == 1 or output_type == types.GRAY:
            # libjpeg-turbo emits the luma plane directly: no colour conversion at all.
            img = _imdecode(buf, cv2.IMREAD_GRAYSCALE | _IGNORE)
            if img is not None:
                return img[:, :, None], "RGB"
        elif output_type == types.BGR:
            img = _imdecode(buf, cv2.IMREAD_COLOR_BGR | _IGNORE)
            if img is not None:
                return img, "BGR"
        else:
            img = _imdecode(buf, cv2.IMREAD_COLOR_RGB | _IGNORE)
            if img is not None:
                return img, "RGB"
        return _decode_pillow(buf, info), "RGB"

    if info.format == formats.PNG and info.channels == 3 and info.bit_depth == 8 and \
            output_type in (types.RGB, types.BGR):
        # Straight to the output's channel order: the BGR -> RGB copy of the general path below
        # doubled the peak memory of a large image (15000 x 15000: 675 MB more).
        bgr = output_type == types.BGR
        img = _imdecode(buf, (cv2.IMREAD_COLOR_BGR if bgr else cv2.IMREAD_COLOR_RGB) | _IGNORE)
        if img is not None:
            return img, "BGR" if bgr else "RGB"
    img = _imdecode(buf, cv2.IMREAD_UNCHANGED | _IGNORE)
    if img is None:
        return _decode_pillow(buf, info), "RGB"
    if img.ndim == 2:
        img = img[:, :, None]
    c = img.shape[2]
    if c == 3:
        img = img[:, :, ::-1]
    elif c == 4:
        if info.channels == 2:  # gray + alpha, expanded by OpenCV to BGRA
            img = img[:, :, [0, 3]]
        else:
            img = cv2.cvtColor(img, cv2.COLOR_BGRA2RGBA)
    return _native_depth(img), "RGB"


def _imdecode(buf: np.ndarray, flags: int) -> np.ndarray | None:
    """cv2.imdecode, None where it fails: most failures return None, a few raise cv2.error (an
    image over OpenCV's own size limits, some broken TIFF and JPEG 2000 layouts); either way
    Pillow gets a try and gives the reason."""
    try:
        return cv2.imdecode(buf, flags)
    except cv2.error:
        return None


def _decode_jpeg_strict(buf: np.ndarray, info: ImageInfo, output_type) -> tuple[np.ndarray, str] | None:
    """A JPEG through TurboJPEG, stopping at libjpeg's first warning (corrupt entropy-coded data,
    a premature end of the file...), which becomes an ImageDecodeError. Returns what
    _decode_native returns, or None to let the ordinary path decode: no TurboJPEG, a layout it does
    not decode (12-bit samples...), a fatal error (which the ordinary path then reports), or a CMYK
    file (checked here, decoded by Pillow as usual)."""
    if info.cmyk:
        mode = "cmyk"
    elif info.channels == 1 or output_type == types.GRAY:
        mode = "gray"
    else:
        mode = "bgr" if output_type == types.BGR else "rgb"
    expect = (info.height, info.width)
    # Every warning counts, "N extraneous bytes before marker 0xd9" (junk between the scan data and
    # the end marker) too, although some writers leave such padding: it is also how most damaged
    # scans end (39 of the 56 detected in 150 randomly damaged 500x375 files; 16-byte overwrites
    # were detected half the time, single bit flips one time in six).
    try:
        img = turbo.decode_full(buf, mode, expect)
    except turbo.JPEGDataError as first:
        # Stray bytes between header segments give the same warning but no damaged pixels: try
        # again without them, and refuse the file only if its image data is corrupt.
        clean = formats.jpeg_without_header_junk(buf)
        if clean is None:
            raise ImageDecodeError(f"corrupt JPEG data (libjpeg: {first}); {_STRICT_HINT}") from None
        try:
            img = turbo.decode_full(np.frombuffer(clean, np.uint8), mode, expect)
        except turbo.JPEGDataError as e:
            raise ImageDecodeError(f"corrupt JPEG data (libjpeg: {e}); {_STRICT_HINT}") from None
    if img is None or mode == "cmyk":
        return None
    if mode == "gray":
        return img, "RGB"
    return img, mode.upper()


def _native_depth(img: np.ndarray) -> np.ndarray:
    """Bring unusual sample types (float or 32-bit TIFFs, ...) to uint8/uint16."""
    if img.dtype in (np.uint8, np.uint16):
        return img
    if img.dtype.kind == "f":
        return np.rint(np.clip(img, 0.0, 1.0) * 65535.0).astype(np.uint16)
    if img.dtype == np.int8:
        return np.clip(img, 0, None).astype(np.uint8)
    return np.clip(img, 0, 65535).astype(np.uint16)


def _decode_pillow(buf: np.ndarray, info: ImageInfo) -> np.ndarray:
    """Pillow fallback; raises ImageDecodeError with Pillow's reason when it fails too."""
    from PIL import Image

    try:
        with Image.open(io.BytesIO(buf.tobytes())) as im:
            im.load()
            mode = im.mode
            if mode == "P":
                im = im.convert("RGBA" if "transparency" in im.info else "RGB")
            elif mode == "PA":
                im = im.convert("RGBA")
            elif mode == "1":
                im = im.convert("L")
            elif mode in ("CMYK", "YCbCr", "LAB", "HSV", "RGBX"):
                im = im.convert("RGB")
            elif mode == "La":
                im = im.convert("LA")
            elif mode == "RGBa":
                im = im.convert("RGBA")
            arr = np.asarray(im)
    except Image.DecompressionBombError:
        # Only between 2 * Image.MAX_IMAGE_PIXELS and max_pixels, after OpenCV failed: say so plainly.
        raise ImageDecodeError(
            f"cannot decode {info.format.upper()} data (corrupt or truncated?): OpenCV failed, and Pillow "
            f"refuses images over 2 * PIL.Image.MAX_IMAGE_PIXELS pixels") from None
    except Exception as e:  # Pillow's decoders raise many types on hostile data: all mean "unreadable"
        reason = str(e) or type(e).__name__
        if reason.startswith("cannot identify image file"):
            reason = "the data is not a readable image"
        raise ImageDecodeError(f"cannot decode {info.format.upper()} data (corrupt or truncated?): {reason}") from None
    if arr.ndim == 2:
        arr = arr[:, :, None]
    if arr.dtype.byteorder == ">":
        arr = arr.astype(arr.dtype.newbyteorder("="))
    return _native_depth(arr)


# --- orientation -----------------------------------------------------------------

# Every EXIF orientation undoes itself except the two quarter turns, which undo each other.
_INVERSE_ORIENTATION = {1: 1, 2: 2, 3: 3, 4: 4, 5: 5, 6: 8, 7: 7, 8: 6}

def orient(img: np.ndarray, orientation: int) -> np.ndarray:
    """Apply an EXIF orientation (1..8) to an HWC array, as a view."""
    if orientation == 2:
        return img[:, ::-1]
    if orientation == 3:
        return img[::-1, ::-1]
    if orientation == 4:
        return img[::-1]
    t = img.transpose(1, 0, 2)
    if orientation == 5:
        return t
    if orientation == 6:  # stored rotated 90 degrees counter-clockwise: turn it clockwise
        return t[:, ::-1]
    if orientation == 7:
        return t[::-1, ::-1]
    if orientation == 8:
        return t[::-1]
    return img


# --- colour and type conversion ---------------------------------------------------

_GRAY_W = np.array([0.299, 0.587, 0.114], np.float32)
# BT.601 studio range, for values in [0, 1]: rows Y, Cb, Cr; last column is the offset.
_YCBCR = np.array([[65.481, 128.553, 24.966, 16.0],
                   [-37.797, -74.203, 112.0, 128.0],
                   [112.0, -93.786, -18.214, 128.0]], np.float64) / 255.0


def convert_color(img: np.ndarray, output_type) -> np.ndarray:
    """Native HWC (RGB order, 1-4 channels) to ``output_type``; keeps the element type."""
    c = img.shape[2]
    if output_type == types.ANY_DATA:
        return img
    if output_type in (types.RGB, types.BGR):
        if c <= 2:
            return np.repeat(img[:, :, :1], 3, axis=2)
        rgb = img[:, :, :3]
        return rgb[:, :, ::-1] if output_type == types.BGR else rgb
    if output_type == types.GRAY:
        if c <= 2:
            return img[:, :, :1]
        return _gray(img[:, :, :3])
    if output_type == types.YCbCr:
        return _ycbcr(img)
    raise ImageDecodeError(f"unsupported output_type {output_type!r}")


def _gray(rgb: np.ndarray) -> np.ndarray:
    # Truncated, not rounded: DALI's CPU decoder truncates the luma, and parity matters more here
    # than the half level that rounding would win.
    src = np.ascontiguousarray(rgb).astype(np.float32)
    luma = cv2.transform(src, _GRAY_W.reshape(1, 3))
    return luma.astype(rgb.dtype).reshape(rgb.shape[0], rgb.shape[1], 1)


def _ycbcr(img: np.ndarray) -> np.ndarray:
    maxval = 65535.0 if img.dtype == np.uint16 else 255.0
    m = _YCBCR.copy()
    m[:, 3] *= maxval  # offsets in the source's scale
    if img.shape[2] <= 2:  # gray: Cb = Cr = mid-range, Y from the luma weights' sum
        g = img[:, :, 0].astype(np.float32)
        y = g * np.float32(m[0, :3].sum()) + np.float32(m[0, 3])
        out = np.empty(g.shape + (3,), np.float32)
        out[:, :, 0] = y
        out[:, :, 1:] = np.float32(128.0 / 255.0 * maxval)
    else:
        src = np.ascontiguousarray(img[:, :, :3]).astype(np.float32)
        out = cv2.transform(src, m.astype(np.float32))
    return np.clip(np.rint(out), 0, maxval).astype(img.dtype)


def convert_dtype(img: np.ndarray, dtype) -> np.ndarray:
    """Scale a uint8/uint16 image to the dynamic range of ``dtype`` (floats: [0, 1])."""
    dtype = np.dtype(dtype)
    if img.dtype == dtype:
        return img
    src_max = float(np.iinfo(img.dtype).max)
    if dtype.kind == "f":
        return (img.astype(np.float32) * np.float32(1.0 / src_max)).astype(dtype, copy=False)
    if dtype.kind not in "iu":
        raise ImageDecodeError(f"unsupported output dtype {dtype}")
    dst_max = float(np.iinfo(dtype).max)
    if img.dtype == np.uint8 and dtype == np.uint16:
        return img.astype(np.uint16) * np.uint16(257)
    scaled = np.rint(img.astype(np.float64) * (dst_max / src_max))
    return np.clip(scaled, 0, dst_max).astype(dtype)
