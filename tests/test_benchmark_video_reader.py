"""benchmarks/video_reader.py: its clip writer, one tiny CPU measurement per CPU case (stoker's
readers.video_resize, plain PyAV + cv2) and the ratio table, in process and short."""

from __future__ import annotations

import importlib.util
import os
import sys

import pytest

pytest.importorskip("av")
pytest.importorskip("cv2")

BENCH = os.path.join(os.path.dirname(__file__), "..", "benchmarks")


@pytest.fixture(scope="module")
def vr():
    sys.path.insert(0, BENCH)  # (the script imports cpu_pipeline, beside it)
    spec = importlib.util.spec_from_file_location("video_reader_bench", os.path.join(BENCH, "video_reader.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_clips_and_one_cpu_measurement(vr, tmp_path):
    if not vr.has_encoder("libx264"):
        pytest.skip("no libx264 encoder in this PyAV wheel")
    clips = vr.make_clips(str(tmp_path), ["h264"], clips=1, seconds=1.2, gop=12)
    (path,) = clips["h264"]
    import av

    with av.open(path) as c:
        s = c.streams.video[0]
        assert (s.codec_context.name, s.width, s.height) == ("h264", 1280, 720)
        assert sum(1 for p in c.demux(s) if p.size) == 36
    assert vr.make_clips(str(tmp_path), ["h264"], clips=1, seconds=1.2, gop=12) == clips  # kept, not rewritten
    a = vr.parse_args(["--seconds", "0.3", "--batch", "1", "--threads", "1", "--sequence-length", "4"])
    assert vr.cases("cpu", ["stoker", "dali", "pyav"]) == [("stoker", "video_resize"), ("pyav", "decode+cv2")]
    assert "DALI" in vr.skip_reason("dali", "cpu")
    rows = [vr.child_pipeline("stoker", "video_resize", "h264", clips["h264"], a),
            vr.child_pyav("h264", clips["h264"], a)]
    for row in rows:
        assert row["fps"] > 0 and row["clips_s"] > 0
        row["round"] = 1
    assert rows[0]["sample_shape"] == [4, 224, 224, 3]
    table = vr.ratio_table(rows)
    assert "| h264 | 1 | video_resize |" in table and table.rstrip().endswith("x |")
