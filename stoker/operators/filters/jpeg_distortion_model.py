"""A NumPy model of libjpeg-turbo's lossy JPEG round trip (baseline, 4:2:0, islow DCTs, fancy
upsampling): what ``cv2.imencode('.jpg')`` followed by ``cv2.imdecode`` does to a uint8 RGB image,
computed without a codec.

Why it can be exact: between quantization and dequantization a JPEG round trip is lossless
(Huffman coding), so the output is a fixed integer function of the input, made of the codec's own
integer steps. This module transcribes those steps (in our words) and ``kernels/jpeg_distortion.cu``
transcribes this module, so the GPU operator can give the CPU operator's pixels bit for bit:

encoder (jccolor.c, jcprepct.c, jcsample.c, jfdctint.c, jcdctmgr.c, jcparam.c)
  - RGB -> YCbCr in 16-bit fixed point (Y rounds by 1/2, Cb/Cr by 1/2 - 2^-16);
  - the image is extended to whole MCUs by repeating its last column and row; the chroma planes
    are box-averaged 2x2 with the bias 1, 2, 1, 2 ... along a row, from rows extended to an even
    count, and the chroma plane's own last row is repeated down to whole blocks;
  - level shift (-128), forward DCT (islow: 13-bit constants, 2 extra bits after the row pass,
    output 8x the orthonormal DCT), quantization as rounded division by ``8 q`` (half away from
    zero; libjpeg-turbo multiplies by a reciprocal, which :func:`reciprocal_quantize` shows equal);
  - the tables are the standard luminance/chrominance tables scaled by the quality
    (:func:`quant_tables`, baseline: clamped to 1..255);
decoder (jidctint.c, jdsample.c, jdcolor.c)
  - dequantization, inverse DCT (islow) with libjpeg's range-limit table (a 10-bit wrap, then a
    clamp to 0..255 after adding 128);
  - chroma upsampling by the triangle filter ("fancy", 9/16 3/16 3/16 1/16 with the rounding
    +8 on even and +7 on odd output columns, edges repeated), or by pixel replication when the
    chroma plane is at most 2 columns wide (libjpeg-turbo's rule);
  - YCbCr -> RGB by the 16-bit fixed-point tables, clamped to 0..255.

Every array here is int64, so no step can overflow; the CUDA transcription uses 64-bit
integers where libjpeg uses its 64-bit ``JLONG`` (the DCTs) and 32-bit ones elsewhere, and
``>>`` of a negative number is arithmetic in NumPy, in C on the compilers libjpeg-turbo
supports, and in CUDA.
"""

from __future__ import annotations

import functools

import numpy as np

# jcparam.c: the tables of ITU-T T.81 Annex K, natural (row-major) order
STD_LUMA = (16, 11, 10, 16, 24, 40, 51, 61, 12, 12, 14, 19, 26, 58, 60, 55,
            14, 13, 16, 24, 40, 57, 69, 56, 14, 17, 22, 29, 51, 87, 80, 62,
            18, 22, 37, 56, 68, 109, 103, 77, 24, 35, 55, 64, 81, 104, 113, 92,
            49, 64, 78, 87, 103, 121, 120, 101, 72, 92, 95, 98, 112, 100, 103, 99)
STD_CHROMA = (17, 18, 24, 47, 99, 99, 99, 99, 18, 21, 26, 66, 99, 99, 99, 99,
              24, 26, 56, 99, 99, 99, 99, 99, 47, 66, 99, 99, 99, 99, 99, 99,
              *([99] * 32))

SCALEBITS = 16
ONE_HALF = 1 << (SCALEBITS - 1)
CBCR_OFFSET = 128 << SCALEBITS
CONST_BITS = 13
PASS1_BITS = 2


def fix(x: float, bits: int = SCALEBITS) -> int:
    """libjpeg's FIX(x): x in fixed point of ``bits`` fraction bits, rounded."""
    return int(x * (1 << bits) + 0.5)


# the DCTs' constants, FIX(c) at CONST_BITS (jfdctint.c / jidctint.c)
C0_298, C0_390, C0_541, C0_765 = (fix(c, CONST_BITS) for c in (0.298631336, 0.390180644, 0.541196100, 0.765366865))
C0_899, C1_175, C1_501, C1_847 = (fix(c, CONST_BITS) for c in (0.899976223, 1.175875602, 1.501321110, 1.847759065))
C1_961, C2_053, C2_562, C3_072 = (fix(c, CONST_BITS) for c in (1.961570560, 2.053119869, 2.562915447, 3.072711026))


def quality_scale(quality: int) -> int:
    """jpeg_quality_scaling: the percentage the standard tables are scaled by."""
    return int(quality_scales(np.array([quality]))[0])


def quality_scales(qualities: np.ndarray) -> np.ndarray:
    """:func:`quality_scale` of an array of qualities (clamped to 1..100 first), int64."""
    q = np.clip(np.asarray(qualities, np.int64), 1, 100)
    return np.where(q < 50, 5000 // q, 200 - 2 * q)


def quant_table_rows(qualities: np.ndarray) -> np.ndarray:
    """(k, 128) int64: for each of ``qualities``, the luminance then the chrominance quantization
    table in natural order (jpeg_set_quality with force_baseline: ``(base * scale + 50) // 100``
    clamped to 1..255). What the GPU kernel reads."""
    base = np.array(STD_LUMA + STD_CHROMA, np.int64)
    return np.clip((base * quality_scales(qualities)[:, None] + 50) // 100, 1, 255)


@functools.cache
def quant_tables(quality: int) -> np.ndarray:
    """(2, 64) int32 luminance and chrominance quantization tables of ``quality``."""
    out = quant_table_rows(np.array([quality]))[0].reshape(2, 64).astype(np.int32)
    out.flags.writeable = False
    return out


def reciprocal_quantize(x: np.ndarray, divisor: int, elem_bits: int = 16) -> np.ndarray:
    """libjpeg-turbo's quantization of DCT outputs ``x`` by ``divisor`` (= 8 q): the reciprocal,
    correction and shift of jcdctmgr.c's compute_reciprocal, for DCTELEM of ``elem_bits`` (16 in
    SIMD builds, 32 without). The tests compare it with :func:`quantize` over every input."""
    b = divisor.bit_length() - 1
    r = elem_bits + b
    fq, fr = divmod(1 << r, divisor)
    c = divisor // 2
    if fr == 0:  # a power of two: the reciprocal would need one bit more
        fq >>= 1
        r -= 1
    elif fr <= divisor // 2:
        c += 1
    else:
        fq += 1
    mag = ((np.abs(x).astype(np.int64) + c) * fq) >> r
    return np.where(x < 0, -mag, mag)


def quantize(x: np.ndarray, divisor: np.ndarray) -> np.ndarray:
    """Rounded division of DCT outputs by ``divisor``, half away from zero (what the reciprocal
    computes: see :func:`reciprocal_quantize`)."""
    mag = (np.abs(x) + (divisor >> 1)) // divisor
    return np.where(x < 0, -mag, mag)


def rgb_to_ycc(rgb: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """jccolor.c's rgb_ycc_convert on a (..., 3) array: Y, Cb, Cr (int64, 0..255)."""
    r, g, b = (rgb[..., k].astype(np.int64) for k in range(3))
    y = (fix(0.29900) * r + fix(0.58700) * g + fix(0.11400) * b + ONE_HALF) >> SCALEBITS
    # Cb/Cr round by 1/2 - epsilon so that 255.5 cannot occur (no clamp needed)
    cb = (-fix(0.16874) * r - fix(0.33126) * g + fix(0.5) * b + CBCR_OFFSET + ONE_HALF - 1) >> SCALEBITS
    cr = (fix(0.5) * r - fix(0.41869) * g - fix(0.08131) * b + CBCR_OFFSET + ONE_HALF - 1) >> SCALEBITS
    return y, cb, cr


def ycc_to_rgb(y: np.ndarray, cb: np.ndarray, cr: np.ndarray) -> np.ndarray:
    """jdcolor.c's ycc_rgb_convert (its tables as formulas): (..., 3) uint8 RGB."""
    cb = cb - 128
    cr = cr - 128
    r = y + ((fix(1.40200) * cr + ONE_HALF) >> SCALEBITS)
    g = y + ((-fix(0.34414) * cb + ONE_HALF - fix(0.71414) * cr) >> SCALEBITS)
    b = y + ((fix(1.77200) * cb + ONE_HALF) >> SCALEBITS)
    return np.clip(np.stack([r, g, b], -1), 0, 255).astype(np.uint8)


def downsample(plane: np.ndarray, rows: int) -> np.ndarray:
    """jcsample.c's h2v2_downsample of an (even rows, even cols) plane: each 2x2 sum plus the
    bias 1, 2, 1, 2 ... along the output row, >> 2; then the result's last row repeated down to
    ``rows`` (jcprepct.c pads the downsampled plane, not the image)."""
    s = plane[0::2, 0::2] + plane[0::2, 1::2] + plane[1::2, 0::2] + plane[1::2, 1::2]
    bias = 1 + (np.arange(s.shape[1]) & 1)
    s = (s + bias) >> 2
    return np.pad(s, ((0, rows - s.shape[0]), (0, 0)), mode="edge")


def to_blocks(plane: np.ndarray) -> np.ndarray:
    """(8a, 8b) plane -> (a, b, 8, 8) blocks."""
    a, b = plane.shape[0] // 8, plane.shape[1] // 8
    return plane.reshape(a, 8, b, 8).transpose(0, 2, 1, 3)


def from_blocks(blocks: np.ndarray) -> np.ndarray:
    """(a, b, 8, 8) blocks -> (8a, 8b) plane."""
    a, b = blocks.shape[:2]
    return blocks.transpose(0, 2, 1, 3).reshape(8 * a, 8 * b)


def descale(x: np.ndarray, n: int) -> np.ndarray:
    """libjpeg's DESCALE: x / 2^n rounded half up (an arithmetic shift)."""
    return (x + (1 << (n - 1))) >> n


def _fdct_1d(d: list, last: bool) -> list:
    """One pass of jfdctint.c's islow forward DCT over 8 arrays; ``last``: the column pass (which
    removes the row pass's PASS1_BITS)."""
    t0, t7 = d[0] + d[7], d[0] - d[7]
    t1, t6 = d[1] + d[6], d[1] - d[6]
    t2, t5 = d[2] + d[5], d[2] - d[5]
    t3, t4 = d[3] + d[4], d[3] - d[4]
    t10, t13 = t0 + t3, t0 - t3
    t11, t12 = t1 + t2, t1 - t2
    out = [None] * 8
    if last:
        out[0], out[4] = descale(t10 + t11, PASS1_BITS), descale(t10 - t11, PASS1_BITS)
        sh = CONST_BITS + PASS1_BITS
    else:
        out[0], out[4] = (t10 + t11) << PASS1_BITS, (t10 - t11) << PASS1_BITS
        sh = CONST_BITS - PASS1_BITS
    z1 = (t12 + t13) * C0_541
    out[2] = descale(z1 + t13 * C0_765, sh)
    out[6] = descale(z1 - t12 * C1_847, sh)
    z1, z2, z3, z4 = t4 + t7, t5 + t6, t4 + t6, t5 + t7
    z5 = (z3 + z4) * C1_175
    t4, t5, t6, t7 = t4 * C0_298, t5 * C2_053, t6 * C3_072, t7 * C1_501
    z1, z2 = z1 * -C0_899, z2 * -C2_562
    z3, z4 = z3 * -C1_961 + z5, z4 * -C0_390 + z5
    out[7] = descale(t4 + z1 + z3, sh)
    out[5] = descale(t5 + z2 + z4, sh)
    out[3] = descale(t6 + z2 + z3, sh)
    out[1] = descale(t7 + z1 + z4, sh)
    return out


def fdct(blocks: np.ndarray) -> np.ndarray:
    """jfdctint.c's jpeg_fdct_islow of level-shifted (..., 8, 8) int64 blocks: rows, then
    columns; the result is 8x the orthonormal DCT."""
    rows = np.stack(_fdct_1d([blocks[..., k] for k in range(8)], False), -1)
    return np.stack(_fdct_1d([rows[..., k, :] for k in range(8)], True), -2)


def _idct_1d(c: list, last: bool) -> list:
    """One pass of jidctint.c's islow inverse DCT over 8 arrays; ``last``: the row pass (which
    removes PASS1_BITS and the 3 bits of the 8x scaling)."""
    z2, z3 = c[2], c[6]
    z1 = (z2 + z3) * C0_541
    t2 = z1 - z3 * C1_847
    t3 = z1 + z2 * C0_765
    t0 = (c[0] + c[4]) << CONST_BITS
    t1 = (c[0] - c[4]) << CONST_BITS
    t10, t13, t11, t12 = t0 + t3, t0 - t3, t1 + t2, t1 - t2
    t0, t1, t2, t3 = c[7], c[5], c[3], c[1]
    z1, z2, z3, z4 = t0 + t3, t1 + t2, t0 + t2, t1 + t3
    z5 = (z3 + z4) * C1_175
    t0, t1, t2, t3 = t0 * C0_298, t1 * C2_053, t2 * C3_072, t3 * C1_501
    z1, z2 = z1 * -C0_899, z2 * -C2_562
    z3, z4 = z3 * -C1_961 + z5, z4 * -C0_390 + z5
    t0, t1, t2, t3 = t0 + z1 + z3, t1 + z2 + z4, t2 + z2 + z3, t3 + z1 + z4
    sh = CONST_BITS + PASS1_BITS + 3 if last else CONST_BITS - PASS1_BITS
    return [descale(v, sh) for v in (t10 + t3, t11 + t2, t12 + t1, t13 + t0,
                                     t13 - t0, t12 - t1, t11 - t2, t10 - t3)]


def range_limit(v: np.ndarray) -> np.ndarray:
    """The IDCT's range-limit table: the output (before the +128 level shift) read as a 10-bit
    two's-complement number, then shifted and clamped to 0..255."""
    w = ((v + 512) & 1023) - 512
    return np.clip(w + 128, 0, 255)


def idct(coefs: np.ndarray) -> np.ndarray:
    """jidctint.c's jpeg_idct_islow of dequantized (..., 8, 8) int64 blocks: columns, then rows;
    samples 0..255. (Its shortcuts for all-zero AC terms give the same values as the full
    computation.)"""
    cols = np.stack(_idct_1d([coefs[..., k, :] for k in range(8)], False), -2)
    return range_limit(np.stack(_idct_1d([cols[..., k] for k in range(8)], True), -1))


def fancy_upsample(c: np.ndarray, h: int, w: int) -> np.ndarray:
    """jdsample.c's h2v2_fancy_upsample of a decoded (ceil(h/2), ceil(w/2)) chroma plane to
    (h, w): 3/4 nearer + 1/4 farther sample in each direction, edges repeated; even output
    columns round with +8, odd ones with +7. Planes at most 2 columns wide are replicated
    instead (h2v2_upsample), as libjpeg-turbo chooses."""
    if c.shape[1] <= 2:
        return np.repeat(np.repeat(c, 2, 0), 2, 1)[:h, :w]
    up = np.concatenate([c[:1], c[:-1]], 0)  # row above (the first row above itself)
    down = np.concatenate([c[1:], c[-1:]], 0)  # row below
    # vertical sums of output rows 2i (with the row above) and 2i + 1 (with the row below)
    v = np.stack([3 * c + up, 3 * c + down], 1).reshape(2 * c.shape[0], c.shape[1])
    left = np.concatenate([v[:, :1], v[:, :-1]], 1)
    right = np.concatenate([v[:, 1:], v[:, -1:]], 1)
    out = np.stack([(3 * v + left + 8) >> 4, (3 * v + right + 7) >> 4], 2).reshape(v.shape[0], -1)
    return out[:h, :w]


def _code(blocks: np.ndarray, table: np.ndarray) -> np.ndarray:
    """Level shift, forward DCT, quantization, dequantization and inverse DCT of (..., 8, 8)
    sample blocks (0..255) with quantization table ``table`` (64,): the decoded samples."""
    q = table.astype(np.int64).reshape(8, 8)
    coefs = quantize(fdct(blocks - 128), q << 3)
    return idct(coefs * q)


def round_trip(rgb: np.ndarray, quality: int) -> np.ndarray:
    """An (H, W, 3) uint8 RGB image through libjpeg-turbo's JPEG encode (4:2:0, ``quality``) and
    decode: the pixels ``jpeg_compression_distortion`` gives on the CPU."""
    h, w = rgb.shape[:2]
    if h == 0 or w == 0:
        return rgb.copy()
    tables = quant_tables(quality)
    hm, wm = -(-h // 16) * 16, -(-w // 16) * 16  # whole MCUs
    # The last column/row repeated to whole MCUs; colour conversion is per pixel, so converting
    # the repeated pixels equals repeating the converted ones.
    y, cb, cr = rgb_to_ycc(np.pad(rgb, ((0, hm - h), (0, wm - w), (0, 0)), mode="edge"))
    he = h + (h & 1)  # rows taken into the chroma planes: the image's, made even
    y_out = from_blocks(_code(to_blocks(y), tables[0]))[:h, :w]
    ch, cw = (h + 1) // 2, (w + 1) // 2
    chroma = [from_blocks(_code(to_blocks(downsample(p[:he], hm // 2)), tables[1]))[:ch, :cw] for p in (cb, cr)]
    cb_up, cr_up = (fancy_upsample(p, h, w) for p in chroma)
    return ycc_to_rgb(y_out, cb_up, cr_up)
