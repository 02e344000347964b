"""readers.video on the CPU: against DALI's CPU video reader (fn.experimental.readers.video: VP9,
MJPEG; frames equal, frame numbers and timestamps equal), its output list against DALI's
readers.video, and every argument against frames PyAV decodes directly."""

import warnings

import numpy as np
import pytest
from clips import pyav_frames, pyav_pts_seconds
from oracle import libs, pipeline, run_pipeline

from stoker import fn, pipeline_def, types

DALI_TOL = 0  # the same swscale conversion as DALI's CPU reader


def run(batch_size=4, iterations=3, on_error="raise", num_threads=2, **kw):
    """Per iteration, the outputs as lists of NumPy arrays, and the sources; plus the pipeline."""
    @pipeline_def(batch_size=batch_size, num_threads=num_threads, device_id=None, seed=3, on_error=on_error)
    def p():
        out = fn.readers.video(name="R", **kw)
        return tuple(out) if isinstance(out, (list, tuple)) else out

    pipe = p()
    pipe.build()
    batches = []
    for _ in range(iterations):
        outs = pipe.run()
        batches.append(([[np.array(o[i]) for i in range(len(o))] for o in outs],
                        [outs[0][i].source_info() for i in range(len(outs[0]))], [o.layout() for o in outs]))
    return batches, pipe


@pytest.mark.oracle
@pytest.mark.parametrize("codec", ["vp9", "mjpeg"])
@pytest.mark.parametrize("length,stride,step", [(4, 2, 5), (3, 1, -1), (5, 3, 2)])
def test_matches_dali_cpu_reader(clip_dir, codec, length, stride, step):
    files = [clip_dir[codec], clip_dir[codec]]
    kw = dict(filenames=files, labels=[4, 7], sequence_length=length, stride=stride, step=step,
              enable_frame_num=True, enable_timestamps=True)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dp = pipeline("dali", lambda f, t: f.experimental.readers.video(device="cpu", **kw), 3, num_threads=1)
        want = run_pipeline(dp, 4)
    got, _ = run(batch_size=3, iterations=4, **kw)
    for (g, _, _), w in zip(got, want):
        for k in range(3):
            assert g[0][k].shape == w[0][k].shape
            assert np.abs(g[0][k].astype(int) - w[0][k]).max() <= DALI_TOL
            for j in (1, 2):
                np.testing.assert_array_equal(g[j][k], w[j][k].astype(g[j][k].dtype))
            np.testing.assert_allclose(g[3][k], w[3][k], atol=1e-6)


@pytest.mark.oracle
@pytest.mark.parametrize("kw", [
    dict(filenames=["a.mp4"]), dict(filenames=["a.mp4"], labels=[]), dict(filenames=["a.mp4"], enable_frame_num=True),
    dict(filenames=["a.mp4"], labels=[1], enable_frame_num=True, enable_timestamps=True),
    dict(filenames=["a.mp4"], enable_timestamps=True),
    dict(filenames=["a.mp4"], labels=[1], enable_frame_num="sequence"),
    dict(file_root="R"), dict(file_root="R", enable_frame_num=True, enable_timestamps=True), dict(file_list="L"),
    dict(file_list="L", enable_frame_num=True, enable_timestamps=True)])
def test_output_count_as_dali(kw):
    from stoker.operators.readers.video import video_outputs

    dali_fn, _, _ = libs("dali")

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = dali_fn.readers.video(device="gpu", sequence_length=3, **kw)  # (graph only: no GPU needed)
    assert len(video_outputs(kw)) == (len(out) if isinstance(out, (list, tuple)) else 1)


def _frames_of(source: str, refs: dict, path_of: dict) -> tuple:
    name, _, rest = source.partition(" (frame ")
    return refs[path_of.get(name, name)], int(rest.rstrip(")"))


@pytest.mark.parametrize("codec", ["h264", "mpeg4"])
def test_windows_and_extras_equal_pyav(clip_dir, codec):
    path = clip_dir[codec]
    ref, secs = pyav_frames(path), pyav_pts_seconds(path)
    got, pipe = run(batch_size=4, iterations=3, filenames=[path], sequence_length=4, stride=3, step=2,
                    enable_frame_num="sequence", enable_timestamps=True)
    assert pipe.reader_meta("R")["epoch_size"] == len(range(0, 30 - 12 + 1, 2))  # first + 4 * 3 <= 30
    firsts = []
    for outs, sources, layouts in got:
        assert layouts == ["FHWC", "", ""]
        for k, src in enumerate(sources):
            first = int(src.rpartition("(frame ")[2].rstrip(")"))
            firsts.append(first)
            idx = first + 3 * np.arange(4)
            np.testing.assert_array_equal(outs[0][k], ref[idx])
            np.testing.assert_array_equal(outs[1][k], idx.astype(np.int32))
            np.testing.assert_allclose(outs[2][k], secs[idx], atol=1e-6)
            assert outs[0][k].dtype == np.uint8 and outs[1][k].dtype == np.int32 and outs[2][k].dtype == np.float32
    assert firsts == [0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 0, 2]


def test_pad_sequences_zero_frames_and_minus_one(clip_dir):
    path = clip_dir["short"]  # 17 frames
    ref = pyav_frames(path)
    got, pipe = run(batch_size=5, iterations=1, filenames=[path], labels=[], sequence_length=4, stride=2, step=4,
                    pad_sequences=True, enable_frame_num=True, enable_timestamps=True)
    (outs, sources, _), = got
    assert pipe.reader_meta("R")["epoch_size"] == 5  # windows from 0, 4, 8, 12, 16
    video, label, fnum, ts = outs
    last = video[4]  # frames 16 then 18, 20, 22: past the end
    np.testing.assert_array_equal(last[0], ref[16])
    assert not last[1:].any()
    assert fnum[4].tolist() == [16] and ts[4][1:].tolist() == [-1, -1, -1] and label[4].tolist() == [0]
    np.testing.assert_array_equal(video[3][:3], ref[[12, 14, 16]])


def test_dtype_normalized_image_type(clip_dir):
    path = clip_dir["h264"]
    ref = pyav_frames(path)
    (outs, _, _), = run(batch_size=2, iterations=1, filenames=[path], sequence_length=2,
                        dtype=types.FLOAT, normalized=True)[0]
    assert outs[0][0].dtype == np.float32
    np.testing.assert_allclose(outs[0][0], ref[:2] / 255, atol=1e-6)
    (outs, _, _), = run(batch_size=1, iterations=1, filenames=[path], sequence_length=2, dtype=types.FLOAT)[0]
    np.testing.assert_array_equal(outs[0][0], ref[:2].astype(np.float32))
    (outs, _, _), = run(batch_size=1, iterations=1, filenames=[path], sequence_length=2, image_type=types.YCbCr)[0]
    import av

    with av.open(path) as c:
        f0 = next(c.decode(video=0)).to_ndarray(format="yuv444p").transpose(1, 2, 0)
    np.testing.assert_array_equal(outs[0][0][0], f0)


def test_file_root_labels(class_root):
    got, pipe = run(batch_size=6, iterations=1, file_root=class_root, sequence_length=4, enable_frame_num=True)
    (outs, sources, layouts), = got
    assert len(outs) == 2 and layouts == ["FHWC", ""]  # no frame_num with file_root, as DALI
    # cats/a: 20 frames -> 5 windows, cats/b: 12 -> 3, dogs/c: 16 -> 4
    assert pipe.reader_meta("R")["epoch_size"] == 12
    assert [s.split(" ")[0] for s in sources] == ["cats/a.mp4"] * 5 + ["cats/b.avi"]
    assert [int(x[0]) for x in outs[1]] == [0] * 6


def test_file_list_ranges(tmp_path, clip_dir):
    h264 = clip_dir["h264"]
    lst = tmp_path / "list.txt"
    # seconds at 25 fps: 0.4 s = frame 10 up to 0.8 s = frame 20; frame numbers with negative end
    lst.write_text(f"{h264} 3 0.4 0.8\n{h264} 5\n")
    got, pipe = run(batch_size=4, iterations=1, file_list=str(lst), sequence_length=5, enable_frame_num=True)
    (outs, sources, _), = got
    assert [int(x[0]) for x in outs[2]] == [10, 15, 0, 5]
    assert [int(x[0]) for x in outs[1]] == [3, 3, 5, 5]
    assert pipe.reader_meta("R")["epoch_size"] == 2 + 6
    lst.write_text(f"{h264} 1 2 -10\n")
    got, pipe = run(batch_size=3, iterations=1, file_list=str(lst), sequence_length=5, file_list_frame_num=True,
                    enable_frame_num=True)
    assert [int(x[0]) for x in got[0][0][2]] == [2, 7, 12]
    assert pipe.reader_meta("R")["epoch_size"] == 3  # frames [2, 20)


def test_shuffle_and_shards_cover_the_set(clip_dir):
    files = [clip_dir["h264"], clip_dir["mpeg4"], clip_dir["short"]]
    kw = dict(filenames=files, sequence_length=4, step=3)

    def sources(**extra):
        _, pipe = run(batch_size=1, iterations=0, **kw, **extra)
        n, shards, k = pipe.reader_meta("R")["epoch_size"], extra.get("num_shards", 1), extra.get("shard_id", 0)
        got, _ = run(batch_size=1, iterations=n * (k + 1) // shards - n * k // shards, num_threads=1, **kw, **extra)
        return [s for _, srcs, _ in got for s in srcs]

    plain = sources()
    shuffled = sources(random_shuffle=True, initial_fill=16)
    assert sorted(plain) == sorted(shuffled) and plain != shuffled
    shards = [sources(num_shards=3, shard_id=k) for k in range(3)]
    flat = [s for sh in shards for s in sh]
    assert len(set(flat)) == len(flat) and sorted(flat) == sorted(plain)


def test_vfr_refused_unless_skipped(clip_dir):
    with pytest.raises(Exception, match="variable frame rate.*skip_vfr_check"):
        run(filenames=[clip_dir["vfr"]], sequence_length=3, iterations=1)
    ref, secs = pyav_frames(clip_dir["vfr"]), pyav_pts_seconds(clip_dir["vfr"])
    got, _ = run(batch_size=2, iterations=1, filenames=[clip_dir["vfr"]], sequence_length=3, skip_vfr_check=True,
                 enable_timestamps=True)
    (outs, _, _), = got
    np.testing.assert_array_equal(outs[0][1], ref[3:6])
    np.testing.assert_allclose(outs[1][1], secs[3:6], atol=1e-6)


@pytest.mark.parametrize("bad", ["truncated", "garbage"])
def test_bad_file_is_a_sample_error(clip_dir, bad):
    files = [clip_dir["short"], clip_dir[bad]]
    with pytest.raises(Exception, match=bad):
        run(batch_size=4, iterations=2, filenames=files, sequence_length=4)
    got, pipe = run(batch_size=4, iterations=2, on_error="skip", filenames=files, sequence_length=4)
    report = pipe.error_report()
    assert report and all(bad in r["source"] for r in report)
    assert all(bad not in s for _, srcs, _ in got for s in srcs)


def test_checkpoint_resume(clip_dir):
    kw = dict(filenames=[clip_dir["h264"], clip_dir["short"]], sequence_length=3, random_shuffle=True)

    @pipeline_def(batch_size=2, num_threads=2, device_id=None, seed=9, enable_checkpointing=True)
    def p():
        return fn.readers.video(name="R", **kw)

    a = p()
    a.build()
    a.run()
    ckpt = a.checkpoint()
    want = [[o.source_info() for o in a.run()[0]] for _ in range(3)]
    b = p(checkpoint=ckpt)
    b.build()
    assert [[o.source_info() for o in b.run()[0]] for _ in range(3)] == want


def test_argument_errors(clip_dir):
    with pytest.raises(Exception, match="exactly one of"):
        run(filenames=[clip_dir["h264"]], file_root="/x", sequence_length=2)
    with pytest.raises(Exception, match="dtype"):
        run(filenames=[clip_dir["h264"]], sequence_length=2, dtype=types.INT16)
    with pytest.raises(Exception, match="enable_frame_num"):
        run(filenames=[clip_dir["h264"]], sequence_length=2, enable_frame_num="first")
    with pytest.raises(Exception, match="no clip holds"):
        run(filenames=[clip_dir["short"]], sequence_length=40)
