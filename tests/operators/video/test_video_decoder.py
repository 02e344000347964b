"""decoders.video / experimental.decoders.video on the CPU: against DALI's CPU decoder (VP9, MJPEG:
the codecs it decodes on the CPU; equal frames: the same swscale conversion) and
against PyAV itself for H.264 / MPEG-4 (equal)."""

import warnings

import numpy as np
import pytest
from clips import pyav_frames
from oracle import run_op

from stoker import fn, pipeline_def
from stoker.operators.video.decoder import pad_indices

DALI_TOL = 0  # levels: stoker converts colours with the swscale flags DALI's CPU decoder uses


def _bytes(path):
    return np.fromfile(path, np.uint8)


def stoker_decode(paths, on_error="raise", op="decoders.video", **kw):
    data = [_bytes(p) for p in paths]
    decode = fn.decoders.video if op == "decoders.video" else fn.experimental.decoders.video

    @pipeline_def(batch_size=len(data), num_threads=2, device_id=None, on_error=on_error)
    def p():
        return decode(fn.external_source(source=lambda: data, batch=True), **kw)

    pipe = p()
    pipe.build()
    (out,) = pipe.run()
    return [np.array(out[i]) for i in range(len(out))], out, pipe


def dali_decode(path, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        (out,) = run_op("dali", "decoders.video", [_bytes(path)], layout=None, num_threads=1, device="cpu", **kw)
    return out


SELECTIONS = [
    {},
    dict(start_frame=5, end_frame=12),
    dict(start_frame=3, sequence_length=6, stride=4),
    dict(stride=4),
    dict(sequence_length=3),
    dict(frames=[3, 1, 27, 3, 0]),
    dict(frames=[3, 1, 31, 3], pad_mode="edge"),
    dict(frames=[3, 31]),
    dict(start_frame=20, sequence_length=8, stride=2),
    dict(start_frame=20, sequence_length=8, stride=2, pad_mode="none"),
    dict(start_frame=20, sequence_length=8, stride=2, pad_mode="edge"),
    dict(start_frame=20, sequence_length=8, stride=2, pad_mode="reflect_1001"),
    dict(start_frame=20, sequence_length=8, stride=2, pad_mode="symmetric"),
    dict(start_frame=20, sequence_length=8, stride=2, pad_mode="reflect_101"),
    dict(start_frame=25, sequence_length=40, pad_mode="reflect"),
    dict(start_frame=26, sequence_length=16, pad_mode="reflect_1001"),
    dict(start_frame=20, end_frame=36, stride=3, pad_mode="repeat"),
    dict(start_frame=20, sequence_length=12, fill_value=[9, 8, 7]),
    dict(start_frame=20, sequence_length=12, fill_value=[200]),
]


@pytest.mark.oracle
@pytest.mark.parametrize("codec", ["vp9", "mjpeg"])
@pytest.mark.parametrize("kw", SELECTIONS, ids=[str(k) for k in SELECTIONS])
def test_matches_dali_cpu_decoder(clip_dir, codec, kw):
    (got,), _, _ = stoker_decode([clip_dir[codec]], **kw)
    want = dali_decode(clip_dir[codec], **kw)
    assert got.shape == want.shape and got.dtype == want.dtype == np.uint8
    assert np.abs(got.astype(int) - want).max() <= DALI_TOL


@pytest.mark.parametrize("codec", ["h264", "mpeg4", "vp9", "mjpeg"])
def test_whole_clip_equals_pyav(clip_dir, codec):
    (got,), out, _ = stoker_decode([clip_dir[codec]])
    np.testing.assert_array_equal(got, pyav_frames(clip_dir[codec]))
    assert out.layout() == "FHWC"


@pytest.mark.parametrize("codec", ["h264", "mpeg4"])
@pytest.mark.parametrize("kw", SELECTIONS[1:], ids=[str(k) for k in SELECTIONS[1:]])
def test_selection_equals_pyav_frames(clip_dir, codec, kw):
    """Seeking to key frames gives the frames a full decode gives (H.264 with B-frames, MPEG-4)."""
    ref = pyav_frames(clip_dir[codec])
    (got,), _, _ = stoker_decode([clip_dir[codec]], **kw)
    from stoker.operators.video.decoder import select_frames

    idx = select_frames(len(ref), kw)
    fill = np.broadcast_to(np.asarray(kw.get("fill_value", [0]), np.uint8), (3,))
    want = np.stack([ref[k] if k >= 0 else np.broadcast_to(fill, ref.shape[1:]) for k in idx])
    np.testing.assert_array_equal(got, want)


def test_experimental_alias_and_per_sample_arguments(clip_dir):
    ref = pyav_frames(clip_dir["h264"])
    data = [_bytes(clip_dir["h264"])] * 3
    starts = [np.int32(0), np.int32(7), np.int32(25)]

    @pipeline_def(batch_size=3, num_threads=2, device_id=None)
    def p():
        enc = fn.external_source(source=lambda: data, batch=True)
        start = fn.external_source(source=lambda: starts, batch=True)
        return fn.experimental.decoders.video(enc, start_frame=start, sequence_length=4, pad_mode="edge")

    pipe = p()
    pipe.build()
    (out,) = pipe.run()
    for k, s in enumerate([0, 7, 25]):
        np.testing.assert_array_equal(np.array(out[k]), ref[np.minimum(np.arange(s, s + 4), 29)])


def test_pad_indices_reflect_long_runs():
    n = 4
    assert pad_indices(np.arange(12), n, "reflect_101").tolist() == [0, 1, 2, 3, 2, 1, 0, 1, 2, 3, 2, 1]
    assert pad_indices(np.arange(12), n, "reflect_1001").tolist() == [0, 1, 2, 3, 3, 2, 1, 0, 0, 1, 2, 3]
    assert pad_indices(np.arange(6), n, "edge").tolist() == [0, 1, 2, 3, 3, 3]
    assert pad_indices(np.arange(6), n, "constant").tolist() == [0, 1, 2, 3, -1, -1]


@pytest.mark.parametrize("bad", ["truncated", "garbage"])
def test_bad_clip_is_a_sample_error(clip_dir, bad):
    paths = [clip_dir["h264"], clip_dir[bad]]
    with pytest.raises(Exception, match="cannot read video"):
        stoker_decode(paths)
    got, _, pipe = stoker_decode(paths, on_error="skip")
    report = pipe.error_report()
    assert len(report) == 1 and "cannot read video" in report[0]["reason"]


def test_argument_errors(clip_dir):
    with pytest.raises(Exception, match="frames"):
        stoker_decode([clip_dir["h264"]], frames=[1, 2], start_frame=1)
    with pytest.raises(Exception, match="end_frame"):
        stoker_decode([clip_dir["h264"]], end_frame=3, sequence_length=2)
    with pytest.raises(Exception, match="pad_mode"):
        stoker_decode([clip_dir["h264"]], pad_mode="wrap")
    with pytest.raises(Exception, match="pad_mode"):
        stoker_decode([clip_dir["h264"]], frames=[40], pad_mode="none")
