"""readers.video with device="gpu" (NVDEC through PyNvVideoCodec) against the CPU reader (PyAV).

NVDEC hands over NV12 and stoker's kernel (video_color.cu) converts it with the CPU reader's swscale
arithmetic, so frames should be equal; labels, frame numbers and timestamps are the CPU reader's.
"""

import numpy as np
import pytest

pytest.importorskip("av")
from clips import H264, write_clip  # noqa: E402

from stoker import fn, pipeline_def, types  # noqa: E402

# Levels. The kernel's NumPy twin equals the CPU reader's frames exactly on these clips (H.264, even
# sizes; tests/operators/video/test_nv12_color.py), so the only room left is NVDEC's own decode: a
# conforming H.264 decoder outputs the same YUV as FFmpeg's, bit for bit. One level of mean and p99
# leaves room for nothing but a rounding slip; a wrong matrix, siting or frame moves the mean past 3.
MEAN_TOL, P99_TOL = 1.0, 1


@pytest.fixture(autouse=True)
def gpu_video_loaded():
    pytest.importorskip("PyNvVideoCodec")
    import stoker.operators.video.gpu_video_reader  # noqa: F401 - registers the GPU half
    from stoker.operators import gpu_registry

    gpu_registry.load_gpu_impls()


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    root = tmp_path_factory.mktemp("gpu_clips")
    return [write_clip(root / "a.mp4", H264, n=40, h=64, w=96), write_clip(root / "b.mp4", H264, n=25, h=48, w=64)]


def run(device, iterations=3, **kw):
    @pipeline_def(batch_size=4, num_threads=2, device_id=0, seed=2)
    def p():
        out = fn.readers.video(device=device, name="R", **kw)
        return tuple(out) if isinstance(out, (list, tuple)) else out

    pipe = p()
    pipe.build()
    got = []
    for _ in range(iterations):
        outs = pipe.run()
        host = [o.as_cpu() if device == "gpu" else o for o in outs]
        got.append(([[np.array(o.at(i)) for i in range(len(o))] for o in host],
                    [outs[0][i].source_info() for i in range(len(outs[0]))]))
    return got


@pytest.mark.gpu
@pytest.mark.parametrize("kw", [
    dict(sequence_length=4, stride=2, step=5),
    dict(sequence_length=8, random_shuffle=True),
    dict(sequence_length=6, stride=3, pad_sequences=True, step=7),
    dict(sequence_length=3, dtype=types.FLOAT, normalized=True),
    dict(sequence_length=5, num_shards=2, shard_id=1),
])
def test_gpu_matches_cpu(clips, kw):
    args = dict(filenames=clips, labels=[], enable_frame_num="sequence", enable_timestamps=True, **kw)
    want = run("cpu", **args)
    got = run("gpu", **args)
    for (g, gs), (w, ws) in zip(got, want):
        assert gs == ws
        for k in range(len(w[0])):
            a, b = g[0][k].astype(np.float64), w[0][k].astype(np.float64)
            scale = 255.0 if kw.get("normalized") else 1.0
            assert a.shape == b.shape and g[0][k].dtype == w[0][k].dtype
            d = np.abs(a - b) * scale
            p99 = float(np.percentile(d, 99))
            assert d.mean() <= MEAN_TOL and p99 <= P99_TOL, (gs[k], d.mean(), p99, d.max())
            for j in range(1, len(w)):
                np.testing.assert_array_equal(g[j][k], w[j][k])


@pytest.mark.gpu
def test_gpu_bad_file_is_skipped(clips, tmp_path):
    bad = tmp_path / "bad.mp4"
    bad.write_bytes(b"not a video" * 100)

    @pipeline_def(batch_size=4, num_threads=2, device_id=0, on_error="skip")
    def p():
        return fn.readers.video(device="gpu", filenames=[clips[1], str(bad)], sequence_length=4)

    pipe = p()
    pipe.build()
    for _ in range(3):
        pipe.run()
    assert any("bad.mp4" in r["source"] for r in pipe.error_report())
