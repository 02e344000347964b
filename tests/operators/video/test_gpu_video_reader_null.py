"""readers.video(device="gpu") on the null device (tests/null_device.py) with a stand-in
PyNvVideoCodec that decodes with PyAV and hands out NV12 frames: the GPU reader's host half, its
kernel tables and its error handling run as on a GPU, and the kernel is played by its NumPy twin
(``nv12_reference``), so the frames are checked against the CPU reader's without a GPU."""

import ctypes
import os
import sys
import types as pytypes

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
import null_device  # noqa: E402
from clips import H264, av, write_clip  # noqa: E402
from nv12_reference import convert, frame_nv12  # noqa: E402

from stoker import fn, pipeline_def, types  # noqa: E402


class _Decoder:
    """SimpleDecoder's surface: every frame of the clip as (H * 3 / 2, W) NV12 rows."""

    def __init__(self, path, **kwargs):
        assert kwargs["output_color_type"] == "native"
        self.reconfigure_decoder(path)

    def reconfigure_decoder(self, path):
        try:
            with av.open(str(path)) as c:
                self.frames = [np.concatenate([y, uv.reshape(uv.shape[0], -1)])
                               for y, uv in (frame_nv12(f) for f in c.decode(video=0))]
        except av.FFmpegError as e:
            raise RuntimeError(f"demuxer: {e}") from None

    def get_batch_frames_by_index(self, idx):
        return [self.frames[k] for k in idx]


def _memory(ptr: int, size: int) -> np.ndarray:
    return np.ctypeslib.as_array((ctypes.c_uint8 * size).from_address(ptr))


def _emulate(args) -> None:
    """``nv12_to_rgb`` in NumPy with the tables it was launched with: each table row's planes read and
    its frame written at their addresses."""
    itab, hx, vy, h, w, coef, kind, scale = args
    h, w = int(h), int(w)
    for y_ptr, y_pitch, uv_ptr, uv_pitch, dst in np.asarray(itab).reshape(-1, 5).tolist():
        y = _memory(y_ptr, h * y_pitch).reshape(h, y_pitch)[:, :w]
        ch, cw = (h + 1) // 2, (w + 1) // 2
        uv = _memory(uv_ptr, ch * uv_pitch).reshape(ch, uv_pitch)[:, :2 * cw].reshape(ch, cw, 2)
        rgb = convert(y, uv, np.asarray(hx), np.asarray(vy), np.asarray(coef))
        if int(kind) & 1:
            rgb = rgb[..., ::-1]
        if int(kind) & 2:
            out = rgb.astype(np.float32) * (np.float32(scale) if int(kind) & 4 else np.float32(1))
            _memory(dst, out.nbytes)[:] = out.reshape(-1).view(np.uint8)
        else:
            _memory(dst, rgb.size)[:] = rgb.reshape(-1)


@pytest.fixture
def gpu_reader(monkeypatch):
    from stoker.operators import gpu_registry
    from stoker.operators.readers.video import VideoReader
    from stoker.operators.video import gpu_video_reader as g

    nvc = pytypes.ModuleType("PyNvVideoCodec")
    nvc.SimpleDecoder = _Decoder
    nvc.OutputColorType = pytypes.SimpleNamespace(NATIVE="native", RGB="rgb")
    monkeypatch.setitem(sys.modules, "PyNvVideoCodec", nvc)
    with null_device.installed() as cp:
        cp.cuda.driver = pytypes.SimpleNamespace(ctxGetCurrent=lambda: 0)
        monkeypatch.setitem(null_device.EMULATED, "nv12_to_rgb", _emulate)
        monkeypatch.setitem(gpu_registry._GPU_IMPLS, "readers.video", g.run_gpu)
        monkeypatch.setattr(VideoReader, "prepare_host", gpu_registry._prepare_method(g.prepare), raising=False)
        yield


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    root = tmp_path_factory.mktemp("null_gpu_clips")
    return [write_clip(root / "a.mp4", H264, n=30, h=64, w=96), write_clip(root / "b.mp4", H264, n=20, h=48, w=64)]


def _run(device, iterations=3, on_error="raise", **kw):
    @pipeline_def(batch_size=3, num_threads=1, device_id=0, seed=2, on_error=on_error)
    def p():
        out = fn.readers.video(device=device, name="R", **kw)
        return tuple(out) if isinstance(out, (list, tuple)) else out

    pipe = p()
    pipe.build()
    got = []
    for _ in range(iterations):
        outs = pipe.run()
        got.append([[np.array(o.as_cpu().at(i) if device == "gpu" else o.at(i)) for i in range(len(o))]
                    for o in outs])
    return got, pipe


@pytest.mark.parametrize("kw", [
    dict(sequence_length=4, stride=2, step=5, enable_frame_num="sequence"),
    dict(sequence_length=5, pad_sequences=True, step=7, image_type=types.BGR),
    dict(sequence_length=3, dtype=types.FLOAT, normalized=True),
    dict(sequence_length=2, image_type=types.GRAY),
    dict(sequence_length=5, num_shards=2, shard_id=1),
])
def test_frames_equal_cpu_reader(gpu_reader, clips, kw):
    want, _ = _run("cpu", filenames=clips, **kw)
    null_device.LAUNCHES.clear()
    got, _ = _run("gpu", filenames=clips, **kw)
    launched = [name for name, _, _ in null_device.LAUNCHES].count("nv12_to_rgb")
    if kw.get("image_type") == types.GRAY:
        assert launched == 0  # (decoded on the host)
    else:  # one launch per sample window (3 a batch), not per frame; the pipeline runs a batch ahead
        assert 3 * 3 <= launched <= 3 * 4, launched
    for g, w in zip(got, want):
        for go, wo in zip(g, w):
            for a, b in zip(go, wo):
                assert a.dtype == b.dtype
                np.testing.assert_array_equal(a, b)


def test_bad_file_is_skipped(gpu_reader, clips, tmp_path):
    bad = tmp_path / "bad.mp4"
    bad.write_bytes(b"not a video" * 100)
    got, pipe = _run("gpu", on_error="skip", filenames=[clips[1], str(bad)], sequence_length=4)
    assert all(len(batch[0]) == 3 for batch in got)
    assert any("bad.mp4" in r["source"] for r in pipe.error_report())
