"""Test clips written with PyAV: a moving pattern whose frames differ, in several codecs."""

import fractions
import os

import numpy as np

av = __import__("pytest").importorskip("av")


def frame_image(i: int, h: int, w: int) -> np.ndarray:
    """Frame ``i``: gradients that move with i and a white bar that drops 3 rows per frame."""
    y, x = np.mgrid[0:h, 0:w]
    img = np.zeros((h, w, 3), np.uint8)
    img[..., 0] = (x * 4 + i * 7) % 256
    img[..., 1] = (y * 4 + i * 13) % 256
    img[..., 2] = (i * 29) % 256
    top = (i * 3) % h
    img[top:top + 8, 10:30] = 255
    return img


def has_encoder(name: str) -> bool:
    try:
        av.codec.Codec(name, "w")
        return True
    except Exception:  # noqa: BLE001 - any failure means the wheel lacks it
        return False


H264 = "libx264" if has_encoder("libx264") else "mpeg4"


def write_clip(path, codec, n=30, h=48, w=64, fps=25, gop=10, vfr=False):
    """Write ``n`` frames of :func:`frame_image` with ``codec``; ``vfr`` spaces frames 40 or 90 ms apart."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with av.open(path, "w") as c:
        s = c.add_stream(codec, rate=fps)
        s.width, s.height = w, h
        s.pix_fmt = "yuvj420p" if codec == "mjpeg" else "yuv420p"
        s.codec_context.gop_size = gop
        if vfr:
            s.codec_context.time_base = fractions.Fraction(1, 1000)
        t = 0
        for i in range(n):
            fr = av.VideoFrame.from_ndarray(frame_image(i, h, w), format="rgb24")
            if vfr:
                fr.pts, fr.time_base = t, fractions.Fraction(1, 1000)
                t += 40 if i % 3 else 90
            for p in s.encode(fr):
                c.mux(p)
        for p in s.encode():
            c.mux(p)
    return str(path)


RGB_FLAGS = (av.video.reformatter.Interpolation.BILINEAR | av.video.reformatter.Interpolation.ACCURATE_RND
             | av.video.reformatter.Interpolation.FULL_CHR_H_INT | av.video.reformatter.Interpolation.FULL_CHR_H_INP)


def pyav_frames(path) -> np.ndarray:
    """Every frame decoded by PyAV straight through, RGB by swscale with accurate rounding and full
    chroma (stoker's and DALI's CPU conversion), FHWC."""
    with av.open(str(path)) as c:
        return np.stack([f.to_ndarray(format="rgb24", interpolation=RGB_FLAGS) for f in c.decode(video=0)])


def pyav_pts_seconds(path) -> np.ndarray:
    with av.open(str(path)) as c:
        s = c.streams.video[0]
        pts = sorted(p.pts for p in c.demux(s) if p.size)
        return np.asarray(pts, np.float64) * float(s.time_base)
