"""fn.experimental.inputs.video: fed videos streamed as batches of sequences, against PyAV's frames
(exact: the CPU path decodes with PyAV) and DALI's CPU operator (VP9: the codec both decode on the
CPU; DALI's RGB conversion differs by up to 2 levels)."""

import warnings

import numpy as np
import pytest
from clips import H264, pyav_frames, write_clip
from oracle import pipeline, run_pipeline

from stoker import fn, pipeline_def
from stoker.errors import ArgumentError, OperatorError, StokerError

DALI_TOL = 2  # levels, as in test_video_decoder.py


def _bytes(path):
    return np.fromfile(path, np.uint8)


def build(batch_size=3, on_error="raise", prefetch_queue_depth=2, **kw):
    kw.setdefault("sequence_length", 4)

    @pipeline_def(batch_size=batch_size, num_threads=2, device_id=None, on_error=on_error,
                  prefetch_queue_depth=prefetch_queue_depth)
    def p():
        return fn.experimental.inputs.video(name="v", **kw)

    pipe = p()
    pipe.build()
    return pipe


def drain(pipe, batches):
    """``batches`` iterations: a list per iteration of (FHWC array, source)."""
    out = []
    for _ in range(batches):
        (o,) = pipe.run()
        assert o.layout() == "FHWC"
        out.append([(np.array(o[i]), o.source_info()[i]) for i in range(len(o))])
    return out


def expected(frames, length, batch_size, pad):
    """The batches of sequences DALI's rule gives for one video's ``frames``."""
    seqs = []
    for first in range(0, len(frames), length):
        s = frames[first:first + length]
        if pad and len(s) < length:
            s = np.concatenate([s, np.zeros((length - len(s), *s.shape[1:]), np.uint8)])
        seqs.append(s)
    return [seqs[k:k + batch_size] for k in range(0, len(seqs), batch_size)]


@pytest.fixture(scope="module")
def videos(tmp_path_factory):
    root = tmp_path_factory.mktemp("inputs_video")
    return {"long": write_clip(root / "long.mp4", H264, n=23, gop=6),
            "short": write_clip(root / "short.mp4", H264, n=7, h=32, w=40),
            "vp9": write_clip(root / "vp9.webm", "libvpx-vp9", n=23),
            "vp9b": write_clip(root / "vp9b.webm", "libvpx-vp9", n=7)}


@pytest.mark.parametrize("policy", ["partial", "pad"])
@pytest.mark.parametrize("length,batch_size", [(4, 3), (5, 2), (23, 1), (30, 2), (1, 8)])
def test_sequences_are_pyav_frames_in_order(videos, policy, length, batch_size):
    frames = pyav_frames(videos["long"])
    want = expected(frames, length, batch_size, policy == "pad")
    pipe = build(batch_size, sequence_length=length, last_sequence_policy=policy)
    pipe.feed_input("v", [_bytes(videos["long"])])
    got = drain(pipe, len(want))
    assert [len(b) for b in got] == [len(b) for b in want]
    for gb, wb in zip(got, want):
        for (g, _), w in zip(gb, wb):
            assert g.dtype == np.uint8 and g.shape == w.shape
            np.testing.assert_array_equal(g, w)
    assert got[0][0][1] == f"fed video 0, frames 0..{min(length, 23) - 1}"
    with pytest.raises(OperatorError, match="no video left to stream"):
        pipe.run()


def test_several_videos_queue_and_never_share_a_batch(videos):
    a, b = pyav_frames(videos["long"]), pyav_frames(videos["short"])
    pipe = build(3, sequence_length=4)
    # one feed holding two videos, then another feed: all three are streamed in order
    pipe.feed_input("v", [_bytes(videos["long"]), _bytes(videos["short"])])
    pipe.feed_input("v", [videos_bytes := _bytes(videos["long"])])
    want = expected(a, 4, 3, False) + expected(b, 4, 3, False) + expected(a, 4, 3, False)
    got = drain(pipe, len(want))
    assert [len(x) for x in got] == [3, 3, 2, 3, 3]
    for gb, wb in zip(got, want):
        for (g, _), w in zip(gb, wb):
            np.testing.assert_array_equal(g, w)
    assert [s for _, s in got[2]] == ["fed video 1, frames 0..3", "fed video 1, frames 4..6"]
    assert got[3][0][1].startswith("fed video 2,")
    del videos_bytes


def test_run_by_name_and_refeeding_after_the_end(videos):
    # prefetch_queue_depth=1: no iteration is scheduled ahead of the one run (with 2, the pipeline
    # schedules the next iteration at each run, and it finds no video unless one was fed already)
    pipe = build(8, prefetch_queue_depth=1, sequence_length=4)
    (o,) = pipe.run(v=[_bytes(videos["short"])])
    assert [np.array(x).shape[0] for x in o] == [4, 3]
    with pytest.raises(OperatorError, match="no video left"):
        pipe.run()
    (o,) = pipe.run(v=[_bytes(videos["short"])])  # fed again, the pipeline goes on
    np.testing.assert_array_equal(np.array(o[1]), pyav_frames(videos["short"])[4:])


def test_feeding_ahead_with_prefetch(videos):
    short = pyav_frames(videos["short"])
    pipe = build(8, prefetch_queue_depth=3, sequence_length=4)
    for _ in range(3):
        pipe.feed_input("v", [_bytes(videos["short"])])
    for _ in range(3):
        (o,) = pipe.run()
        np.testing.assert_array_equal(np.array(o[1]), short[4:])


def test_fed_buffer_is_copied_unless_no_copy(videos):
    data = _bytes(videos["short"])
    pipe = build(2, sequence_length=4)
    pipe.feed_input("v", [data])
    data[:] = 0  # the operator holds its own copy
    (o,) = pipe.run()
    np.testing.assert_array_equal(np.array(o[0]), pyav_frames(videos["short"])[:4])


def test_feed_accepts_bytes_and_refuses_other_data(videos):
    pipe = build(2, sequence_length=4)
    pipe.feed_input("v", [open(videos["short"], "rb").read()])
    (o,) = pipe.run()
    assert len(o) == 2
    with pytest.raises(TypeError, match=r"experimental.inputs.video 'v': sample 0: .*uint8 1-D"):
        pipe.feed_input("v", [np.zeros((4, 4), np.float32)])
    with pytest.raises(ValueError, match="no video"):
        pipe.feed_input("v", [])


@pytest.mark.parametrize("bad", ["garbage", "empty"])
def test_corrupt_buffer_raises_naming_the_video(videos, bad):
    data = np.frombuffer(b"not a video at all " * 50, np.uint8) if bad == "garbage" else np.zeros(0, np.uint8)
    pipe = build(3, sequence_length=4)
    pipe.feed_input("v", [_bytes(videos["short"]), data])
    (o,) = pipe.run()
    assert len(o) == 2
    with pytest.raises(OperatorError, match="fed video 1") as e:
        pipe.run()
    assert str(e.value).startswith("[v] cannot read video 'fed video 1'")


def test_corrupt_buffer_is_skipped(videos):
    garbage = np.frombuffer(b"not a video at all " * 50, np.uint8)
    pipe = build(3, on_error="skip", sequence_length=4)
    pipe.feed_input("v", [garbage, _bytes(videos["short"]), garbage])
    (o,) = pipe.run()  # the bad video is reported and the next one streamed in the same iteration
    np.testing.assert_array_equal(np.array(o[1]), pyav_frames(videos["short"])[4:])
    (o,) = pipe.run()  # only a bad video left: an empty batch, reported
    assert len(o) == 0
    report = pipe.error_report()
    assert [r["source"] for r in report] == ["fed video 0", "fed video 2"]
    assert all(r["action"] == "skipped" for r in report)


def test_decoding_error_in_mid_video_drops_the_rest_of_it(videos, monkeypatch):
    from stoker.operators.video import pyav

    read = pyav.FrameStream.read

    def failing(self, start, stop):  # the long video's second sequence does not decode
        if start == 4 and self.info.frames == 23:
            raise OSError(f"cannot read video {self.where}: frame 5 could not be decoded")
        return read(self, start, stop)

    monkeypatch.setattr(pyav.FrameStream, "read", failing)
    long, short = pyav_frames(videos["long"]), pyav_frames(videos["short"])
    pipe = build(3, on_error="skip", sequence_length=4)
    pipe.feed_input("v", [_bytes(videos["long"]), _bytes(videos["short"])])
    (o,) = pipe.run()
    assert len(o) == 1  # sequence 0 came out; 1 failed and 2 (same video) was dropped with it
    np.testing.assert_array_equal(np.array(o[0]), long[:4])
    (o,) = pipe.run()  # the rest of the long video is dropped: the short one follows
    np.testing.assert_array_equal(np.array(o[1]), short[4:])
    assert [r["source"] for r in pipe.error_report()] == ["fed video 0, frames 4..7", "fed video 0, frames 8..11"]

    pipe = build(3, sequence_length=4)
    pipe.feed_input("v", [_bytes(videos["long"])])
    with pytest.raises(OperatorError, match=r"frame 5 could not be decoded \(sample: fed video 0, frames 4..7\)"):
        pipe.run()


def test_argument_errors():
    with pytest.raises(ArgumentError, match=r"experimental.inputs.video: argument 'sequence_length': .*at least 1"):
        build(sequence_length=0)
    with pytest.raises(ArgumentError, match=r"argument 'last_sequence_policy': must be 'partial' or 'pad'"):
        build(last_sequence_policy="drop")
    with pytest.raises(StokerError, match="sequence_length"):

        @pipeline_def(batch_size=1, num_threads=1, device_id=None)
        def p():
            return fn.experimental.inputs.video(name="v")

        p().build()
    with pytest.raises(StokerError, match="input"):

        @pipeline_def(batch_size=1, num_threads=1, device_id=None)
        def q():
            return fn.experimental.inputs.video(fn.external_source(source=lambda: [np.zeros(3, np.uint8)]),
                                                sequence_length=2)

        q().build()


def test_no_feed_is_an_error():
    pipe = build(2, sequence_length=4)
    with pytest.raises(OperatorError, match=r"no video left to stream: feed one with pipe.feed_input\('v'"):
        pipe.run()


def test_eager_mode_points_to_pipelines():
    from stoker import dynamic

    with pytest.raises(TypeError, match="source operators keep state"):
        dynamic.experimental.inputs.video(sequence_length=4)


def dali_stream(paths, batch_size, **kw):
    out = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pipe = pipeline("dali", lambda f, t: f.experimental.inputs.video(name="v", device="cpu", **kw), batch_size,
                        num_threads=1, prefetch_queue_depth=1)
        for path in paths:
            pipe.feed_input("v", [_bytes(path)])
        try:
            while True:
                (o,) = run_pipeline(pipe)[0]
                out.append(o)
        except RuntimeError:
            pass  # no data left (DALI then refuses to run again)
    return out


@pytest.mark.oracle
@pytest.mark.parametrize("policy", ["partial", "pad"])
@pytest.mark.parametrize("length,batch_size", [(4, 3), (5, 2)])
def test_matches_dali_cpu(videos, policy, length, batch_size):
    paths = [videos["vp9"], videos["vp9b"]]
    want = dali_stream(paths, batch_size, sequence_length=length, last_sequence_policy=policy)
    pipe = build(batch_size, sequence_length=length, last_sequence_policy=policy)
    for path in paths:
        pipe.feed_input("v", [_bytes(path)])
    got = drain(pipe, len(want))
    assert [len(b) for b in got] == [len(b) for b in want]
    for gb, wb in zip(got, want):
        for (g, _), w in zip(gb, wb):
            assert g.shape == w.shape and g.dtype == w.dtype
            assert np.abs(g.astype(int) - w.astype(int)).max() <= DALI_TOL


def test_mixed_copies_the_cpu_frames_to_the_device(videos):
    """device="mixed" on the null device (tests/null_device.py, NumPy standing in for CuPy: uploads
    are real copies): decoded on the host, the same sequences as on the CPU."""
    import os
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
    import null_device

    long = pyav_frames(videos["long"])
    with null_device.installed():

        @pipeline_def(batch_size=4, num_threads=1, device_id=0, prefetch_queue_depth=1)
        def p():
            return fn.experimental.inputs.video(name="v", sequence_length=5, device="mixed",
                                                last_sequence_policy="pad")

        pipe = p()
        pipe.feed_input("v", [_bytes(videos["long"])])
        for first in (0, 20):
            (o,) = pipe.run()
            got = [np.asarray(s) for s in o.as_cpu().samples()]
            want = expected(long, 5, 4, True)[first // 20]
            assert len(got) == len(want)
            for g, w in zip(got, want):
                np.testing.assert_array_equal(g, w)
        pipe.close()
