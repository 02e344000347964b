"""random.beta and random_crop_generator: distributions and properties (the values differ from DALI's,
another generator), determinism, and the output types and layouts DALI gives."""

import math

import numpy as np
import pytest
from oracle import run_graph

from stoker import fn, pipeline_def, types  # noqa: E402
from stoker.errors import StokerError  # noqa: E402


def _run(build, batch_size=1, inputs=None, iters=1, seed=7, num_threads=2):
    @pipeline_def(batch_size=batch_size, num_threads=num_threads, device_id=None, seed=seed)
    def pipe():
        if inputs is None:
            return build()
        return build(fn.external_source(source=lambda: inputs, batch=True))

    p = pipe()
    p.build()
    outs = [p.run() for _ in range(iters)]
    return [[np.array(it[k].at(i)) for it in outs for i in range(len(it[k]))] for k in range(len(outs[0]))]


@pytest.mark.parametrize("a,b", [(2.0, 3.0), (0.5, 0.5), (5.0, 1.0)])
def test_beta_moments(a, b):
    x, = _run(lambda: fn.random.beta(alpha=a, beta=b, shape=[2000]), batch_size=4)
    v = np.concatenate(x).astype(np.float64)
    assert v.dtype == np.float64 and x[0].dtype == np.float32 and x[0].shape == (2000,)
    assert np.all((v >= 0) & (v <= 1))
    mean, var = a / (a + b), a * b / ((a + b) ** 2 * (a + b + 1))
    assert abs(v.mean() - mean) < 4 * math.sqrt(var / v.size)
    assert abs(v.var() - var) < 0.1 * var


def test_beta_per_sample_args_shape_like_dtype_and_determinism():
    shapes = [np.zeros((3, 2)), np.zeros((5, 1)), np.zeros((1, 1))]
    alphas = [np.float32(50.0), np.float32(1.0), np.float32(0.2)]

    def build(x):
        al = fn.external_source(source=lambda: alphas, batch=True)
        return fn.random.beta(x, alpha=al, beta=50.0, dtype=types.FLOAT64), fn.random.beta()

    first = _run(build, 3, shapes, iters=2)
    again = _run(build, 3, shapes, iters=2, num_threads=1)
    for a, b in zip(first, again):
        for u, v in zip(a, b):
            np.testing.assert_array_equal(u, v)
    out, scalars = first
    assert [o.shape for o in out[:3]] == [(3, 2), (5, 1), (1, 1)] and out[0].dtype == np.float64
    assert np.all(np.abs(out[0] - 0.5) < 0.25)  # Beta(50, 50) concentrates at 0.5
    assert scalars[0].shape == () and not np.array_equal(scalars[:3], scalars[3:])  # iterations differ


def test_beta_sample_values_do_not_depend_on_the_other_samples():
    """Each sample draws from its own counter-based stream: changing sample 1's alpha leaves
    samples 0 and 2 as they were (a shared batch stream shifted them)."""
    def build(alphas):
        def f():
            al = fn.external_source(source=lambda: alphas, batch=True)
            return fn.random.beta(alpha=al, beta=2.0, shape=[4])
        return f

    a, = _run(build([np.float32(2.0), np.float32(3.0), np.float32(4.0)]), 3)
    b, = _run(build([np.float32(2.0), np.float32(0.3), np.float32(4.0)]), 3)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[2], b[2])
    assert not np.array_equal(a[1], b[1])


def test_beta_bad_arguments():
    for kw, arg in [(dict(alpha=0.0), "alpha"), (dict(beta=-1.0), "beta"), (dict(dtype=types.INT32), "dtype")]:
        with pytest.raises(StokerError, match=arg):
            _run(lambda kw=kw: fn.random.beta(**kw))


def test_crop_generator_windows_fit_and_follow_the_ranges():
    shapes = [np.array([480, 640, 3], np.int64), np.array([300, 200], np.int64), np.array([1000, 50, 3], np.int64)]
    area, ratio = (0.1, 0.5), (0.5, 2.0)
    anchors, sizes = _run(lambda s: fn.random_crop_generator(s, random_area=area, random_aspect_ratio=ratio),
                          3, shapes, iters=60)
    assert anchors[0].dtype == np.int32 and anchors[0].shape == (2,) and sizes[0].shape == (2,)
    fracs = []
    for i, (a, s) in enumerate(zip(anchors, sizes)):
        h, w = shapes[i % 3][:2]
        assert np.all(a >= 0) and np.all(s >= 1) and a[0] + s[0] <= h and a[1] + s[1] <= w
        if i % 3 != 2:  # the 1000x50 image is too tall: the fallback window
            fracs.append(s[0] * s[1] / (h * w))
            assert ratio[0] - 0.02 <= s[1] / s[0] <= ratio[1] + 0.02
    fracs = np.array(fracs)
    assert fracs.min() >= area[0] - 0.01 and fracs.max() <= area[1] + 0.01
    assert fracs.max() - fracs.min() > 0.25  # spread over the range, not one value
    tall = np.array(sizes[2::3])
    assert np.all(tall[:, 1] == 50)  # full width, the tallest allowed ratio
    assert np.all(tall[:, 0] == 100)


def test_crop_generator_is_the_decoder_sampler():
    # The same sampler, so the same distribution of the area fraction as random_resized_crop.
    from stoker.operators.random.crop_window import sample_crop_window

    rng = np.random.default_rng(0)
    ref = [sample_crop_window(rng, 200, 300) for _ in range(400)]
    ref_frac = np.array([h * w / 60000 for _, _, h, w in ref])
    _, sizes = _run(lambda s: fn.random_crop_generator(s), 8, [np.array([200, 300], np.int64)] * 8, iters=50)
    frac = np.array([s[0] * s[1] / 60000 for s in sizes])
    assert abs(np.median(frac) - np.median(ref_frac)) < 0.08
    assert abs(frac.mean() - ref_frac.mean()) < 0.05


@pytest.mark.oracle
def test_crop_generator_types_like_dali():
    shapes = [np.array([100, 200, 3], np.int64), np.array([50, 60, 1], np.int64)]
    ours = run_graph("stoker", lambda fn, t, s: fn.random_crop_generator(s), shapes)
    theirs = run_graph("dali", lambda fn, t, s: fn.random_crop_generator(s), shapes)
    for (a, la), (b, lb) in zip(ours, theirs):
        assert la == lb and [x.shape for x in a] == [x.shape for x in b] and a[0].dtype == b[0].dtype


def test_crop_generator_bad_arguments():
    s = [np.array([10, 10], np.int64)]
    with pytest.raises(StokerError, match="random_aspect_ratio"):
        _run(lambda x: fn.random_crop_generator(x, random_aspect_ratio=[2.0, 1.0]), 1, s)
    with pytest.raises(StokerError, match="num_attempts"):
        _run(lambda x: fn.random_crop_generator(x, num_attempts=0), 1, s)
    with pytest.raises(StokerError, match="random_crop_generator"):
        _run(lambda x: fn.random_crop_generator(x), 1, [np.array([7], np.int64)])
