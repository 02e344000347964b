"""NumPy twin of ``stoker/kernels/video_color.cu`` (``nv12_to_rgb``): the same integer steps, so that
what the kernel computes is checked against the CPU reader's frames on machines without a GPU.

The tables (chroma taps, coefficients) are the GPU reader's own (``gpu_video_reader.chroma_taps``,
``ColorPlan.coef``); only the per-pixel arithmetic is written again here.
"""

import numpy as np

from stoker.operators.video.gpu_video_reader import ColorPlan, chroma_taps


def _wrap32(v: np.ndarray) -> np.ndarray:
    """int64 values as the kernel's 32-bit unsigned sums read back as int."""
    return ((v + (1 << 31)) % (1 << 32)) - (1 << 31)


def _clip30(v: np.ndarray) -> np.ndarray:
    """av_clip_uintp2(v, 30) on 32-bit ints: negative -> 0, past 30 bits -> 2^30 - 1."""
    return np.where(v < 0, 0, np.minimum(v, (1 << 30) - 1))


def nv12_to_rgb(y: np.ndarray, uv: np.ndarray, color: ColorPlan) -> np.ndarray:
    """``y`` (H, W) uint8 and ``uv`` (ceil(H/2), ceil(W/2), 2) uint8 interleaved chroma -> (H, W, 3)
    uint8 RGB, step for step as the kernel, with the tables the GPU reader builds for ``color``."""
    h, w = y.shape
    ch, cw = uv.shape[:2]
    return convert(y, uv, chroma_taps(cw, w, color.h_siting, 1 << 14), chroma_taps(ch, h, color.v_siting, 1 << 12),
                   color.coef)


def convert(y: np.ndarray, uv: np.ndarray, hx: np.ndarray, vy: np.ndarray, coef) -> np.ndarray:
    """The kernel's per-pixel arithmetic with its tables: ``hx`` (4, W) and ``vy`` (4, H) chroma
    taps, ``coef`` swscale's six yuv2rgb coefficients."""
    a, b, wa, wb = (np.asarray(t, np.int64) for t in hx)
    ra, rb, ka, kb = (np.asarray(t, np.int64) for t in vy)
    c = uv.astype(np.int64)
    horiz = np.minimum((c[:, a] * wa[None, :, None] + c[:, b] * wb[None, :, None]) >> 7, 32767)  # (ch, W, 2)
    chroma = (horiz[ra] * ka[:, None, None] + horiz[rb] * kb[:, None, None] - (128 << 19)) >> 10
    u, v = chroma[..., 0], chroma[..., 1]
    yoff, ycoef, v2r, v2g, u2g, u2b = (int(k) for k in coef)
    yc = _wrap32((y.astype(np.int64) << 9) - yoff) * ycoef + (1 << 21)
    r = _clip30(_wrap32(yc + v * v2r)) >> 22
    g = _clip30(_wrap32(yc + v * v2g + u * u2g)) >> 22
    bl = _clip30(_wrap32(yc + u * u2b)) >> 22
    return np.stack([r, g, bl], -1).astype(np.uint8)


def frame_nv12(frame) -> tuple[np.ndarray, np.ndarray]:
    """A PyAV frame's planes as NVDEC hands them over: luma (H, W) and interleaved chroma
    (ceil(H/2), ceil(W/2), 2), from its 4:2:0 planes (no resampling)."""
    if frame.format.name not in ("yuv420p", "yuvj420p"):
        frame = frame.reformat(format="yuv420p")
    h, w = frame.height, frame.width
    ch, cw = (h + 1) // 2, (w + 1) // 2

    def plane(k, rows, cols):
        p = frame.planes[k]
        return np.frombuffer(bytes(p), np.uint8).reshape(rows, p.line_size)[:, :cols]

    return plane(0, h, w), np.stack([plane(1, ch, cw), plane(2, ch, cw)], -1)
