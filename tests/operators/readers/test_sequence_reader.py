"""fn.readers.sequence: windows of frames from folders of images, against DALI's CPU reader
(which windows, their order, shards and padding, color spaces), and bad frames."""

import os

import cv2
import numpy as np
import pytest
from oracle import default_threads, libs

from stoker import fn, pipeline_def, types
from stoker.errors import OperatorError, PipelineBuildError

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")  # (DALI deprecates its reader)


def write_sequences(root, lengths=(("s1", 7), ("s0", 5), ("s2", 2), ("s3", 4)), size=(6, 8)):
    """Folders of PNG frames; pixel (0, 0) holds (sequence, frame, 200) so frames say who they are."""
    rng = np.random.default_rng(3)
    for name, n in lengths:
        os.makedirs(os.path.join(root, name), exist_ok=True)
        for i in range(n):
            img = rng.integers(0, 255, (*size, 3), dtype=np.uint8)
            img[0, 0] = (int(name[1:]), i, 200)
            cv2.imwrite(os.path.join(root, name, f"{i:03d}.png"), img[:, :, ::-1])
    with open(os.path.join(root, "s0", "notes.txt"), "w") as f:  # not a frame
        f.write("x")
    cv2.imwrite(os.path.join(root, "top.png"), np.zeros((6, 8, 3), np.uint8))  # not in a sequence


def run_pipe(lib, batch_size, iterations, **reader_args):
    fn_, pdef, _ = libs(lib)

    @pdef(batch_size=batch_size, num_threads=default_threads(lib), device_id=None)
    def p():
        return fn_.readers.sequence(name="R", **reader_args)

    pipe = p()
    pipe.build()
    out = []
    for _ in range(iterations):
        (o,) = pipe.run()
        assert o.layout() == "FHWC"
        out.append([np.array(o.at(i)) for i in range(len(o))])
    return out, pipe.reader_meta("R")


def assert_same(ours, theirs, tol=0):
    for it, (a, b) in enumerate(zip(ours, theirs)):
        assert len(a) == len(b)
        for k, (x, y) in enumerate(zip(a, b)):
            assert x.dtype == y.dtype == np.uint8 and x.shape == y.shape, (it, k, x.shape, y.shape)
            diff = int(np.abs(x.astype(np.int16) - y).max()) if x.size else 0
            assert diff <= tol, f"iteration {it} sample {k}: differs by {diff}"


@pytest.mark.oracle
@pytest.mark.parametrize("length,step,stride", [(1, 1, 1), (3, 1, 1), (3, 2, 1), (2, 1, 2), (2, 3, 2), (4, 4, 1),
                                                (5, 1, 1)])
def test_windows_match_dali(tmp_path, length, step, stride):
    write_sequences(str(tmp_path))
    args = dict(file_root=str(tmp_path), sequence_length=length, step=step, stride=stride)
    ours, meta = run_pipe("stoker", 3, 6, **args)
    theirs, dmeta = run_pipe("dali", 3, 6, **args)
    assert meta == dmeta
    assert_same(ours, theirs)


@pytest.mark.oracle
@pytest.mark.parametrize("image_type", [types.RGB, types.BGR, types.GRAY])
def test_image_types_match_dali(tmp_path, image_type):
    write_sequences(str(tmp_path))
    args = dict(file_root=str(tmp_path), sequence_length=2, image_type=image_type)
    ours, _ = run_pipe("stoker", 4, 2, **args)
    import nvidia.dali.types as dtypes

    theirs, _ = run_pipe("dali", 4, 2, **dict(args, image_type=dtypes.DALIImageType(int(image_type))))
    # GRAY: stoker's decoders round the RGB-to-gray conversion their own way, DALI's legacy reader
    # path OpenCV's: values may differ by one
    assert_same(ours, theirs, tol=1 if image_type == types.GRAY else 0)


@pytest.mark.oracle
@pytest.mark.parametrize("pad,stick", [(False, False), (True, False), (False, True), (True, True)])
def test_shards_match_dali(tmp_path, pad, stick):
    write_sequences(str(tmp_path))
    for sid in range(3):
        args = dict(file_root=str(tmp_path), sequence_length=2, num_shards=3, shard_id=sid, pad_last_batch=pad,
                    stick_to_shard=stick)
        ours, meta = run_pipe("stoker", 2, 9, **args)
        theirs, dmeta = run_pipe("dali", 2, 9, **args)
        assert meta == dmeta
        assert_same(ours, theirs)


def test_frames_of_a_window_and_its_source(tmp_path):
    write_sequences(str(tmp_path))

    @pipeline_def(batch_size=2, num_threads=1, device_id=None)
    def p():
        return fn.readers.sequence(file_root=str(tmp_path), sequence_length=3, stride=2)

    pipe = p()
    pipe.build()
    (o,) = pipe.run()
    assert [tuple(f[0, 0, :2]) for f in o.at(0)] == [(0, 0), (0, 2), (0, 4)]
    assert o[0].source_info() == "s0/000.png (+2 frames)"


def test_bad_frame_skipped_or_raised_naming_the_frame(tmp_path):
    write_sequences(str(tmp_path), lengths=(("s0", 3), ("s1", 3)))
    with open(os.path.join(tmp_path, "s0", "001.png"), "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n broken")

    def make(on_error):
        @pipeline_def(batch_size=2, num_threads=1, device_id=None, on_error=on_error)
        def p():
            return fn.readers.sequence(file_root=str(tmp_path), sequence_length=2)

        pipe = p()
        pipe.build()
        return pipe

    with pytest.raises(OperatorError, match=r"s0/001\.png"):
        make("raise").run()
    pipe = make("skip")
    (o,) = pipe.run()
    assert [tuple(np.array(o.at(i))[0, 0, 0, :2]) for i in range(len(o))] == [(1, 0), (1, 1)]
    assert {r["source"] for r in pipe.error_report()} == {"s0/000.png (+1 frames)", "s0/001.png (+1 frames)"}


def test_frames_of_different_sizes_name_the_frame(tmp_path):
    write_sequences(str(tmp_path), lengths=(("s0", 2),))
    cv2.imwrite(os.path.join(tmp_path, "s0", "001.png"), np.zeros((3, 3, 3), np.uint8))

    @pipeline_def(batch_size=1, num_threads=1, device_id=None)
    def p():
        return fn.readers.sequence(file_root=str(tmp_path), sequence_length=2)

    pipe = p()
    pipe.build()
    with pytest.raises(OperatorError, match=r"001\.png.*one size"):
        pipe.run()


@pytest.mark.parametrize("kwargs,arg", [(dict(sequence_length=0), "sequence_length"), (dict(sequence_length=2, step=0),
                                        "step"), (dict(sequence_length=9), "sequence_length")])
def test_build_errors(tmp_path, kwargs, arg):
    write_sequences(str(tmp_path))

    @pipeline_def(batch_size=1, num_threads=1, device_id=None)
    def p():
        return fn.readers.sequence(file_root=str(tmp_path), **kwargs)

    with pytest.raises(PipelineBuildError, match=rf"readers\.sequence.*'{arg}'"):
        p().build()
