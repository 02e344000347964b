"""The GPU video reader's colour conversion, checked without a GPU.

``nv12_reference.nv12_to_rgb`` does the kernel's integer steps (``video_color.cu``) in NumPy with the
GPU reader's own tables; here it is compared with the CPU reader's conversion (one swscale call,
``clips.RGB_FLAGS``) on the same decoded planes, for the codecs, sizes, matrices and ranges NVDEC
streams come in. Equal level for level where the chroma is exactly 2x subsampled (every H.264/HEVC
stream); odd frame sizes differ by 1 level on a few edge pixels (swscale merges the edge taps of
its non-2x filter before rounding them).
"""

import numpy as np
import pytest
from clips import RGB_FLAGS, av, frame_image, has_encoder
from nv12_reference import frame_nv12, nv12_to_rgb

from stoker.operators.video.gpu_video_reader import chroma_taps, color_plan


def noise_image(i: int, h: int, w: int) -> np.ndarray:
    """Random colours: a sharp edge at every pixel (lossless H.264 keeps them)."""
    return np.random.default_rng(i).integers(0, 256, (h, w, 3), dtype=np.uint8)


def write(path, codec, n=4, h=64, w=96, pix="yuv420p", colorspace=None, color_range=None, image=frame_image,
          options=None):
    """``n`` frames of ``image`` encoded with ``codec``, the stream and frames tagged as given."""
    with av.open(str(path), "w") as c:
        s = c.add_stream(codec, rate=25, options=options or {})
        s.width, s.height, s.pix_fmt = w, h, pix
        if colorspace is not None:
            s.codec_context.colorspace = colorspace
        if color_range is not None:
            s.codec_context.color_range = color_range
        for i in range(n):
            fr = av.VideoFrame.from_ndarray(image(i, h, w), format="rgb24").reformat(format=pix)
            if colorspace is not None:
                fr.colorspace = colorspace
            if color_range is not None:
                fr.color_range = color_range
            for p in s.encode(fr):
                c.mux(p)
        for p in s.encode():
            c.mux(p)
    return str(path)


def compare(path) -> tuple[int, float, int]:
    """(max, mean, frames) of |reference - CPU reader| over the clip's frames, with the colour plan
    the GPU reader reads from the stream."""
    worst, total, n = 0, 0.0, 0
    with av.open(path) as c:
        cc = c.streams.video[0].codec_context
        plan = color_plan(cc.name, cc.format.name, int(cc.colorspace), int(cc.color_range))
        assert plan is not None, (cc.name, cc.format.name, cc.colorspace)
        for fr in c.decode(video=0):
            want = fr.to_ndarray(format="rgb24", interpolation=RGB_FLAGS)
            got = nv12_to_rgb(*frame_nv12(fr), plan)
            d = np.abs(got.astype(np.int16) - want)
            worst, total, n = max(worst, int(d.max())), total + float(d.mean()), n + 1
    return worst, total / n, n


H264 = "libx264" if has_encoder("libx264") else None
CASES = {
    "h264 pattern": dict(codec=H264),
    "h264 720p": dict(codec=H264, n=2, h=720, w=1280),
    "h264 noise lossless": dict(codec=H264, image=noise_image, options={"qp": "0"}),
    "h264 bt709": dict(codec=H264, colorspace=1),
    "h264 bt2020": dict(codec=H264, colorspace=9, image=noise_image, options={"qp": "0"}),
    "h264 full range": dict(codec=H264, color_range=2, image=noise_image, options={"qp": "0"}),
    # (one frame thread and no B-frames: x265 under load once gave the MP4 muxer a packet it refused,
    # "not yet implemented in FFmpeg"; the colours under test do not depend on either)
    "hevc 720p": dict(codec="libx265", n=2, h=720, w=1280,
                      options={"x265-params": "log-level=none:frame-threads=1:bframes=0"}),
    "mpeg4": dict(codec="mpeg4"),
    "vp9": dict(codec="libvpx-vp9"),
    "mjpeg full range": dict(codec="mjpeg", pix="yuvj420p"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_reference_equals_cpu_reader(tmp_path, name):
    kw = dict(CASES[name])
    codec = kw.pop("codec")
    if codec is None or not has_encoder(codec):
        pytest.skip(f"no {codec} encoder in this PyAV")
    ext = {"mpeg4": "avi", "mjpeg": "avi", "libvpx-vp9": "webm", "libx265": "mkv"}.get(codec, "mp4")
    worst, mean, n = compare(write(tmp_path / f"clip.{ext}", codec, **kw))
    assert n >= 2 and worst == 0, (worst, mean)


def test_odd_sizes_within_one_level(tmp_path):
    if not has_encoder("libvpx-vp9"):
        pytest.skip("no libvpx-vp9 encoder in this PyAV")
    worst, mean, _ = compare(write(tmp_path / "odd.webm", "libvpx-vp9", h=51, w=71))
    assert worst <= 1 and mean < 1e-3, (worst, mean)


def test_taps_are_swscale_bilinear():
    """2x upsampling: left-sited chroma alternates (1, 0) and (1/2, 1/2); centred chroma takes
    (1/4, 3/4) and (3/4, 1/4) weights, the edges repeating the outer sample."""
    left = chroma_taps(4, 8, 0, 1 << 14)
    assert left[0].tolist() == [0, 0, 1, 1, 2, 2, 3, 3] and left[1].tolist() == [1, 1, 2, 2, 3, 3, 3, 3]
    assert left[2].tolist() == [16384, 8192] * 4 and (left[2] + left[3] == 16384).all()
    mid = chroma_taps(4, 8, 128, 1 << 12)
    assert mid[0].tolist() == [0, 0, 0, 1, 1, 2, 2, 3] and mid[1].tolist() == [0, 1, 1, 2, 2, 3, 3, 3]
    assert mid[2].tolist()[1:7] == [3072, 1024, 3072, 1024, 3072, 1024] and (mid[2] + mid[3] == 4096).all()


def test_streams_the_kernel_leaves_to_the_host():
    assert color_plan("h264", "yuv420p10le", 2, 0) is None  # 10-bit: NVDEC's P016, not NV12
    assert color_plan("h264", "yuv444p", 2, 0) is None
    assert color_plan("h264", "yuv420p", 8, 0) is None  # YCgCo
    assert color_plan("theora", "yuv420p", 2, 0) is None  # siting not measured
    assert color_plan("hevc", "yuv420p", 1, 1).h_siting == 0 and color_plan("vp9", "yuv420p", 2, 1).h_siting == 128
