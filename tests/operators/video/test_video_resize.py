"""readers.video_resize: the frames of readers.video resized by stoker's resize (same plan, same
filters), before the dtype conversion; the other outputs unchanged."""

import numpy as np
import pytest

from stoker import fn, pipeline_def, types


def _pair(reader_kw, resize_kw, batch_size=3):
    @pipeline_def(batch_size=batch_size, num_threads=2, device_id=None, seed=1)
    def p():
        a = fn.readers.video_resize(name="A", **reader_kw, **resize_kw)
        b = fn.readers.video(name="B", **reader_kw)
        a = a if isinstance(a, (list, tuple)) else [a]
        b = b if isinstance(b, (list, tuple)) else [b]
        return (*a, fn.resize(b[0], **resize_kw), *b[1:])

    pipe = p()
    pipe.build()
    return pipe.run()


@pytest.mark.parametrize("resize_kw", [dict(resize_x=32, resize_y=20), dict(resize_shorter=24),
                                       dict(size=[30, 50], interp_type=types.INTERP_CUBIC),
                                       dict(resize_longer=40, antialias=False), dict(resize_x=100, mode="not_larger")])
def test_equals_reader_then_resize(clip_dir, resize_kw):
    outs = _pair(dict(filenames=[clip_dir["h264"], clip_dir["vp9"]], labels=[], sequence_length=4, stride=2,
                      enable_frame_num=True), resize_kw)
    n = len(outs) // 2
    for k in range(3):
        a, b = np.array(outs[0][k]), np.array(outs[n][k])
        assert a.shape == b.shape and a.shape[0] == 4
        np.testing.assert_array_equal(a, b)
        for j in range(1, n):
            np.testing.assert_array_equal(np.array(outs[j][k]), np.array(outs[n + j][k]))
    assert outs[0].layout() == "FHWC"


def test_float_output_is_converted_after_resizing(clip_dir):
    kw = dict(filenames=[clip_dir["h264"]], sequence_length=2)

    @pipeline_def(batch_size=2, num_threads=1, device_id=None)
    def p():
        a = fn.readers.video_resize(**kw, resize_x=16, resize_y=12, dtype=types.FLOAT, normalized=True)
        b = fn.readers.video_resize(**kw, resize_x=16, resize_y=12)
        return a, b

    pipe = p()
    pipe.build()
    a, b = pipe.run()
    np.testing.assert_allclose(np.array(a[0]), np.array(b[0]) / 255, atol=1e-6)


def test_size_given_twice_is_refused(clip_dir):
    @pipeline_def(batch_size=1, num_threads=1, device_id=None)
    def p():
        return fn.readers.video_resize(filenames=[clip_dir["h264"]], sequence_length=2, resize_x=10,
                                       resize_shorter=12)

    with pytest.raises(Exception, match="exactly one way"):
        p().build()


def test_per_sample_sizes_are_refused_with_the_way_round(clip_dir):
    @pipeline_def(batch_size=2, num_threads=1, device_id=None)
    def p():
        size = fn.random.uniform(range=(10.0, 20.0))
        return fn.readers.video_resize(filenames=[clip_dir["h264"]], sequence_length=2, resize_x=size,
                                       resize_y=size)

    pipe = p()
    with pytest.raises(Exception, match="fn.resize"):
        pipe.build()
        pipe.run()
