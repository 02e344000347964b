"""GPU ``cast`` and ``_arithmetic`` run once over a ragged batch's flat buffer (issue 16), with the
per-sample results.

On the null device (tests/null_device.py) CuPy's elementwise functions are NumPy's, so the flat
pass's values are real and are compared here with the expression (or cast) evaluated sample by
sample, for ragged batches in one buffer (gaps and unsorted offsets included), per-sample scalars
spread over the samples, and inputs that must keep the per-sample path.
"""

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
import null_device  # noqa: E402

import stoker.types as types  # noqa: E402
from stoker.operators.base import BatchContext  # noqa: E402
from stoker.operators.math import gpu_arithmetic as ga  # noqa: E402
from stoker.operators.math.arithmetic import evaluate  # noqa: E402
from stoker.operators.schema import get_operator  # noqa: E402
from stoker.operators.tensor import gpu_cast  # noqa: E402


def _op(name, **kw):
    cls = get_operator(name)
    static, _ = cls.schema.bind(kw, lambda v: False)
    return cls(static, "gpu")


@pytest.fixture
def cp():
    with null_device.installed() as cupy:
        yield cupy


def _flat(cp, samples, gap=0, order=None, layout="HWC"):
    """A TensorListGPU of ``samples`` in one buffer: ``gap`` unused elements before and between
    them, stored in ``order`` (offsets unsorted when it is not ascending)."""
    from stoker.tensors_gpu import TensorListGPU

    order = list(range(len(samples))) if order is None else order
    dtype = samples[0].dtype
    parts, offsets, pos = [], np.zeros(len(samples), np.int64), 0
    for i in order:
        parts += [np.full(gap, 77, dtype), samples[i].ravel()]
        offsets[i] = pos + gap
        pos += gap + samples[i].size
    buf = cp.asarray(np.concatenate(parts) if parts else np.zeros(0, dtype))
    shapes = np.array([s.shape for s in samples], np.int64).reshape(len(samples), -1)
    return TensorListGPU.from_flat(buf, offsets, shapes, layout)


def _images(rng, n, dtype=np.uint8, empty=False):
    hw = rng.integers(1, 20, (n, 2))
    if empty:
        hw[1] = (0, 5)
    return [rng.integers(0, 255, (int(h), int(w), 3)).astype(dtype) for h, w in hw]


def _samples(out):
    return out.as_cpu().samples()


@pytest.mark.parametrize("layout", ["plain", "gaps", "unsorted"])
def test_cast_of_a_flat_batch_is_one_pass_with_the_per_sample_values(cp, layout):
    rng = np.random.default_rng(1)
    images = [im.astype(np.float32) * 1.7 - 100 for im in _images(rng, 7, empty=True)]
    order = [3, 1, 0, 6, 2, 5, 4] if layout == "unsorted" else None
    x = _flat(cp, images, gap=3 if layout != "plain" else 0, order=order)
    for dtype, name in ((np.uint8, "UINT8"), (np.int16, "INT16"), (np.float16, "FLOAT16")):
        (out,) = _op("cast", dtype=getattr(types, name)).run_gpu(BatchContext(batch_size=7), [x], {})
        assert out.flat_parts() is not None  # one buffer, no per-sample arrays
        for g, im in zip(_samples(out), images):
            np.testing.assert_array_equal(g, np.asarray(gpu_cast.cast_array(cp.asarray(im), dtype)))
            assert g.dtype == dtype and g.shape == im.shape


EXPRS = {
    "fdiv": (dict(expr="fdiv", rhs=255.0), 1),
    "sub": (dict(expr="sub"), 2),
    "mul_int": (dict(expr="mul", rhs=2), 1),
    "sqrt": (dict(expr="sqrt"), 1),
    "clamp": (dict(expr="clamp", lo=10, hi=200), 1),
    "div_ints": (dict(expr="div"), 2),
}


@pytest.mark.parametrize("layout", ["plain", "gaps", "unsorted"])
@pytest.mark.parametrize("expr", sorted(EXPRS))
def test_arithmetic_of_batches_placed_alike_is_one_pass(cp, expr, layout):
    rng = np.random.default_rng(2)
    kw, arity = EXPRS[expr]
    xs, ys = _images(rng, 6, empty=True), None
    ys = [rng.integers(0, 255, x.shape).astype(np.uint8) for x in xs]
    order = [5, 0, 2, 1, 4, 3] if layout == "unsorted" else None
    gap = 2 if layout != "plain" else 0
    inputs = [_flat(cp, xs, gap, order), _flat(cp, ys, gap, order)][:arity]
    op = _op("_arithmetic", **kw)
    assert ga.flat_plan([x.flat_parts() for x in inputs]) is not None
    (out,) = op.run_gpu(BatchContext(batch_size=6), inputs, {})
    assert out.flat_parts() is not None
    for i, g in enumerate(_samples(out)):
        want = evaluate(op.args, [xs[i], ys[i]][:arity])
        assert g.dtype == want.dtype and g.shape == want.shape
        np.testing.assert_array_equal(g, want)


@pytest.mark.parametrize("scalar_shape", [(), (1,), (1, 1, 1)])
@pytest.mark.parametrize("layout", ["plain", "gaps", "unsorted"])
def test_per_sample_scalars_spread_over_the_samples(cp, layout, scalar_shape):
    """``x * s`` and ``s - x`` with ``s`` one value per sample (a dense (n,) batch, as an uploaded
    random argument is): one pass over the buffer, the per-sample results."""
    from stoker.tensors_gpu import TensorListGPU

    rng = np.random.default_rng(3)
    xs = _images(rng, 8, empty=True)
    x = _flat(cp, xs, 4 if layout != "plain" else 0, [7, 2, 0, 5, 1, 3, 6, 4] if layout == "unsorted" else None)
    values = rng.uniform(0.5, 1.5, (8, *scalar_shape)).astype(np.float32)
    s = TensorListGPU(cp.asarray(values))
    for kw, inputs, pick in ((dict(expr="mul"), [x, s], lambda i: [xs[i], values[i]]),
                             (dict(expr="sub"), [s, x], lambda i: [values[i], xs[i]])):
        op = _op("_arithmetic", **kw)
        assert ga.flat_plan([t.flat_parts() for t in inputs]) is not None
        (out,) = op.run_gpu(BatchContext(batch_size=8), inputs, {})
        assert out.flat_parts() is not None
        for i, g in enumerate(_samples(out)):
            want = evaluate(op.args, pick(i))
            assert g.dtype == want.dtype and g.shape == want.shape
            np.testing.assert_array_equal(g, want)


def test_inputs_that_broadcast_otherwise_keep_the_per_sample_path(cp):
    """A per-channel vector, scalars of more dimensions than the image, batches placed apart."""
    from stoker.tensors_gpu import TensorListGPU

    rng = np.random.default_rng(4)
    xs = _images(rng, 4)
    x = _flat(cp, xs)
    vec = TensorListGPU(cp.asarray(rng.uniform(0, 2, (4, 3)).astype(np.float32)))
    deep = TensorListGPU(cp.asarray(rng.uniform(0, 2, (4, 1, 1, 1, 1)).astype(np.float32)))
    other = _flat(cp, [rng.integers(0, 255, im.shape).astype(np.uint8) for im in xs], gap=1)
    for y in (vec, deep, other):
        assert ga.flat_plan([x.flat_parts(), y.flat_parts()]) is None
        op = _op("_arithmetic", expr="mul")
        (out,) = op.run_gpu(BatchContext(batch_size=4), [x, y], {})
        ys = y.as_cpu().samples()
        for i, g in enumerate(_samples(out)):
            np.testing.assert_array_equal(g, evaluate(op.args, [xs[i], ys[i]]))


def test_overlapping_samples_keep_the_per_sample_path_for_spread_scalars(cp):
    from stoker.tensors_gpu import TensorListGPU

    buf = cp.asarray(np.arange(20, dtype=np.float32))
    x = TensorListGPU.from_flat(buf, np.array([0, 5]), np.array([[10], [10]]))  # elements 5..9 shared
    s = TensorListGPU(cp.asarray(np.array([2.0, 3.0], np.float32)))
    parts = [x.flat_parts(), s.flat_parts()]
    assert ga.flat_plan(parts) is not None
    assert ga._sample_of_element(cp, parts[0][1], np.array([10, 10]), 0, 15) is None
    (out,) = _op("_arithmetic", expr="mul").run_gpu(BatchContext(batch_size=2), [x, s], {})
    got = _samples(out)
    np.testing.assert_array_equal(got[0], np.arange(10) * 2.0)
    np.testing.assert_array_equal(got[1], np.arange(5, 15) * 3.0)


def test_all_empty_samples(cp):
    from stoker.tensors_gpu import TensorListGPU

    x = _flat(cp, [np.zeros((0, 3, 3), np.uint8), np.zeros((2, 0, 3), np.uint8)])
    s = TensorListGPU(cp.asarray(np.array([2.0, 3.0], np.float32)))
    (out,) = _op("_arithmetic", expr="mul").run_gpu(BatchContext(batch_size=2), [x, s], {})
    assert out.shape() == [(0, 3, 3), (2, 0, 3)] and out.element_dtype() == np.float32


@pytest.mark.parametrize("pattern", ["dense", "branch", "branch_unsorted"])
def test_spread_scalars_over_equal_samples_on_a_grid_take_rows(cp, monkeypatch, pattern):
    """Samples of one size at multiples of that size (a dense batch, or the samples a branch of a
    per-sample if keeps of one, with other samples' rows between them): each per-sample value
    spreads as a column over rows, with no per-element sample index (no searchsorted)."""
    from stoker.tensors_gpu import TensorListGPU

    rng = np.random.default_rng(5)
    whole = rng.integers(0, 255, (9, 4, 5, 3)).astype(np.uint8)
    buf = cp.asarray(whole.ravel())
    keep = {"dense": [0, 1, 2, 3, 4, 5, 6, 7, 8], "branch": [1, 2, 5, 8], "branch_unsorted": [8, 2, 5, 1]}[pattern]
    size = whole[0].size
    x = TensorListGPU.from_flat(buf, np.array(keep, np.int64) * size, np.array([whole[0].shape] * len(keep)), "HWC")
    values = rng.uniform(0.5, 1.5, len(keep)).astype(np.float32)
    s = TensorListGPU(cp.asarray(values))
    monkeypatch.setattr(ga, "_sample_of_element", lambda *a: pytest.fail("per-element sample index built"))
    for kw, inputs, pick in ((dict(expr="mul"), [x, s], lambda i: [whole[keep[i]], values[i]]),
                             (dict(expr="sub"), [s, x], lambda i: [values[i], whole[keep[i]]])):
        op = _op("_arithmetic", **kw)
        (out,) = op.run_gpu(BatchContext(batch_size=len(keep)), inputs, {})
        for i, g in enumerate(_samples(out)):
            want = evaluate(op.args, pick(i))
            assert g.dtype == want.dtype and g.shape == want.shape
            np.testing.assert_array_equal(g, want)


def test_rows_of_samples_refuses_what_is_not_a_grid():
    sizes = np.array([6, 6, 6])
    assert ga._rows_of_samples(np.array([0, 6, 18]), sizes, 0, 24)[1].tolist() == [0, 1, 1, 2]
    assert ga._rows_of_samples(np.array([0, 7, 18]), sizes, 0, 24) is None  # off the grid
    assert ga._rows_of_samples(np.array([0, 6, 12]), np.array([6, 5, 6]), 0, 18) is None  # sizes differ
    assert ga._rows_of_samples(np.array([0, 0, 12]), sizes, 0, 18) is None  # two samples in one place
