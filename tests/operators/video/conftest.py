"""Fixtures of the video tests: clips written once per session into a temp folder."""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from clips import H264, write_clip  # noqa: E402


@pytest.fixture(scope="session")
def clip_dir(tmp_path_factory):
    """{name: path}: h264 (libx264, else mpeg4) mp4, mpeg4 avi, vp9 webm, mjpeg avi (30 frames, key frame
    every 10), a 17-frame h264, a VFR mp4, a truncated mp4 and a file that is not a video."""
    root = tmp_path_factory.mktemp("clips")
    out = {
        "h264": write_clip(root / "h264.mp4", H264),
        "mpeg4": write_clip(root / "mpeg4.avi", "mpeg4", gop=7),
        "vp9": write_clip(root / "vp9.webm", "libvpx-vp9"),
        "mjpeg": write_clip(root / "mjpeg.avi", "mjpeg"),
        "short": write_clip(root / "short.mp4", H264, n=17, h=32, w=40),
        "vfr": write_clip(root / "vfr.mp4", H264, vfr=True),
    }
    data = open(out["h264"], "rb").read()
    with open(root / "truncated.mp4", "wb") as f:
        f.write(data[: len(data) // 2])
    with open(root / "garbage.mp4", "wb") as f:
        f.write(b"not a video at all " * 50)
    out["truncated"] = str(root / "truncated.mp4")
    out["garbage"] = str(root / "garbage.mp4")
    return out


@pytest.fixture(scope="session")
def class_root(tmp_path_factory):
    """file_root with two classes: cats (2 clips), dogs (1 clip)."""
    root = tmp_path_factory.mktemp("classes")
    write_clip(root / "cats" / "a.mp4", H264, n=20)
    write_clip(root / "cats" / "b.avi", "mpeg4", n=12)
    write_clip(root / "dogs" / "c.webm", "libvpx-vp9", n=16)
    return str(root)
