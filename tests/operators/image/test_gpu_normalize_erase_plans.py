"""normalize's and erase's whole-batch GPU plans (issue 16) give exactly the per-sample rules' tables.

normalize plans its reduced axes and given statistics with ``batch_params`` and its kernel rows
with ``kernel_rows`` a dimension at a time; erase plans its boxes with ``Erase.boxes_batch`` and
its tables with ``erase_tables_batch``. Each keeps its per-sample rule (``Normalize._params``,
``Erase.boxes`` + ``erase_tables``), which also finds and names a sample whose arguments are
refused. Here both are compared to the bit over random shapes and per-sample arguments, and the
tables the GPU functions upload are checked on the null device (tests/null_device.py).
"""

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
import null_device  # noqa: E402

import stoker.types as types  # noqa: E402
from stoker.errors import OperatorError  # noqa: E402
from stoker.operators.base import BatchContext  # noqa: E402
from stoker.operators.image import gpu_erase as ge  # noqa: E402
from stoker.operators.image import gpu_normalize as gn  # noqa: E402
from stoker.operators.schema import get_operator  # noqa: E402

F32 = np.float32


def _op(name, **kw):
    cls = get_operator(name)
    static, _ = cls.schema.bind(kw, lambda v: False)
    return cls(static, "gpu")


def _batch(images, layout="HWC", dense=False):
    """A TensorListGPU of ``images`` on the null device and its batch context."""
    return null_device.device_batch(images, layout, dense)


@pytest.fixture
def tables(monkeypatch):
    """The host tables normalize and erase upload, in order (the null device runs no kernel)."""
    got = []

    def record(table, batch):
        got.append(np.array(table))
        return table

    with null_device.installed():
        for mod in (gn, ge):
            for name, stand_in in (("upload_table", record),
                                   ("upload_tables", lambda batch, *ts: [record(t, batch) for t in ts])):
                if hasattr(mod, name):
                    monkeypatch.setattr(mod, name, stand_in)
        yield got


# --- normalize --------------------------------------------------------------------------------

def _keep(shape, axes):
    return tuple(1 if d in axes else int(e) for d, e in enumerate(shape))


def _kernel_rows_per_sample(shapes, axes):
    """normalize's kernel rows as the code before issue 16 built them, sample by sample."""
    rows = np.zeros((len(shapes), gn._ROW), np.int64)
    red = set(axes)
    for i, shape in enumerate(shapes):
        keep = _keep(shape, red)
        strides = np.ones(len(keep), np.int64)
        for d in range(len(keep) - 2, -1, -1):
            strides[d] = strides[d + 1] * keep[d + 1]
        dims = []
        for d, ext in enumerate(shape):
            if ext == 1:
                continue
            reduced = d in red
            stride = 0 if reduced else int(strides[d])
            if dims and dims[-1][2] == reduced:
                dims[-1][0] *= int(ext)
                dims[-1][1] = stride
            else:
                dims.append([int(ext), stride, reduced])
        if len(dims) > gn._MAXD:
            return None
        rows[i, 2] = int(np.prod(shape, dtype=np.int64))
        rows[i, 5] = len(dims)
        for k, (ext, stride, _) in enumerate(dims):
            rows[i, 6 + k] = ext
            rows[i, 6 + gn._MAXD + k] = stride
    return rows


def _given_tables_per_sample(op, params, keeps):
    """The given mean and factor tables as the code before issue 16 built them."""
    mean = factor = None
    if params[0][1] is not None:
        mean = np.concatenate([np.broadcast_to(p[1], k).ravel() for p, k in zip(params, keeps)])
    if params[0][2] is not None:
        with np.errstate(divide="ignore"):
            factor = np.concatenate([np.broadcast_to(op.args["scale"] / np.asarray(op._given_std(p[2]), np.float64),
                                                     k).ravel() for p, k in zip(params, keeps)])
    return mean, factor


@pytest.mark.parametrize("ndim", [1, 2, 3, 4, 9])
def test_kernel_rows_match_per_sample_rule(ndim):
    rng = np.random.default_rng(ndim)
    for _ in range(40):
        shapes = rng.integers(0, 5, (30, ndim))
        shapes[rng.random(shapes.shape) < 0.3] = 1  # extents of 1 are dropped, their neighbours merge
        axes = [d for d in range(ndim) if rng.random() < 0.5] or [0]
        got, want = gn.kernel_rows(shapes, axes), _kernel_rows_per_sample(shapes.tolist(), axes)
        if want is None:
            assert got is None
        else:
            np.testing.assert_array_equal(got, want)


def _normalize_cases(rng, n, hw):
    """(static arguments, argument inputs) of normalize, given statistics in every form."""
    c = 3
    scalars = [F32(v) for v in rng.uniform(50, 150, n)]
    stds = [F32(v) for v in rng.uniform(0, 60, n)]
    stds[1] = F32(0.0)  # a given 0 divides as on the CPU
    chan = [rng.uniform(50, 150, (1, 1, c)).astype(F32) for _ in range(n)]
    chan_std = [rng.uniform(1, 60, (1, 1, c)).astype(F32) for _ in range(n)]
    pixel = [rng.uniform(50, 150, (*hw, 1)) for _ in range(n)]  # float64 values
    return [
        (dict(mean=128.0, stddev=50.0), {}),
        (dict(mean=128.0, stddev=50.0, epsilon=3.0, scale=2.0), {}),
        (dict(mean=[5.0], stddev=4.0, axis_names="HW"), {}),
        (dict(axis_names="HW"), {"mean": scalars, "stddev": stds}),
        (dict(scale=3.0, epsilon=0.5), {"mean": chan, "stddev": chan_std}),  # axes from the tensors' shape
        (dict(stddev=20.0), {"mean": chan}),
        (dict(axis_names="C"), {"mean": pixel, "stddev": [np.float64(2.5)] * n}),
        (dict(mean=10.0, stddev=2.0, axes=[0, 1, 2]), {}),
        (dict(mean=10.0, stddev=2.0, batch=True), {}),
    ]


@pytest.mark.parametrize("dense", [False, True], ids=["ragged", "dense"])
def test_normalize_batch_params_and_given_tables_match_per_sample_rule(dense):
    rng = np.random.default_rng(21)
    n, hw = 40, (6, 7)
    shapes = np.array([(*hw, 3)] * n) if dense else np.column_stack([rng.integers(1, 30, (n, 2)), np.full(n, 3)])
    for kw, arg_inputs in _normalize_cases(rng, n, hw):
        if not dense and ("axis_names" in kw and kw["axis_names"] == "C" or kw.get("batch")):
            continue  # per-pixel tensors need one size; batch statistics need equal kept extents
        op = _op("normalize", **kw)
        planned = gn.batch_params(op, shapes, "HWC", arg_inputs)
        params = gn.sample_params(op, BatchContext(batch_size=n), shapes, "HWC", arg_inputs)
        axes, mean, std = planned
        for i, (ax, m, s) in enumerate(params):
            assert ax == axes
            for got, want in ((mean, m), (std, s)):
                assert (got is None) == (want is None)
                if got is not None:
                    np.testing.assert_array_equal(got[i], want)
        keeps = [_keep(s, axes) for s in shapes.tolist()]
        (m_tab, m_shared), (f_tab, f_shared) = gn.build_tables(np, lambda h: h, op, (mean, std), np.array(keeps),
                                                               None, tuple(axes), None, None)
        want_m, want_f = _given_tables_per_sample(op, params, keeps)
        np.testing.assert_array_equal(m_tab, want_m)
        np.testing.assert_array_equal(f_tab, want_f)
        assert not m_shared and not f_shared


def test_gpu_normalize_uploads_the_per_sample_tables(tables):
    rng = np.random.default_rng(22)
    n = 9
    images = [rng.integers(0, 255, (int(h), int(w), 3), dtype=np.uint8) for h, w in rng.integers(1, 30, (n, 2))]
    x, batch = _batch(images)
    for kw, arg_inputs in _normalize_cases(rng, n, (6, 7))[:6]:
        tables.clear()
        op = _op("normalize", **kw)
        (out,) = op.run_gpu(batch, [x], arg_inputs)
        mean, factor, rows = tables
        params = gn.sample_params(op, batch, [im.shape for im in images], "HWC", arg_inputs)
        keeps = [_keep(im.shape, params[0][0]) for im in images]
        want_m, want_f = _given_tables_per_sample(op, params, keeps)
        np.testing.assert_array_equal(mean, want_m)
        np.testing.assert_array_equal(factor, want_f)
        want_rows = _kernel_rows_per_sample([im.shape for im in images], params[0][0])
        offs = np.concatenate([[0], np.cumsum([int(np.prod(k)) for k in keeps])[:-1]])
        want_rows[:, 3] = want_rows[:, 4] = offs
        np.testing.assert_array_equal(rows[:, 2:], want_rows[:, 2:])
        np.testing.assert_array_equal(rows[:, 0], x.geometry()[0])
        assert out.shape() == [im.shape for im in images]


def test_normalize_given_tensors_of_differing_shapes_take_the_per_sample_rule(tables):
    """Per-pixel means of ragged samples (each its own kept extents): planned sample by sample."""
    rng = np.random.default_rng(23)
    images = [rng.integers(0, 255, (int(h), int(w), 3), dtype=np.uint8) for h, w in rng.integers(2, 20, (5, 2))]
    x, batch = _batch(images)
    means = [rng.uniform(0, 255, (*im.shape[:2], 1)) for im in images]
    op = _op("normalize", axis_names="C", stddev=3.0)
    assert gn.batch_params(op, np.array([im.shape for im in images]), "HWC", {"mean": means}) is None
    op.run_gpu(batch, [x], {"mean": means})
    mean, factor, rows = tables
    np.testing.assert_array_equal(mean, np.concatenate([m.ravel() for m in means]))


def test_normalize_bad_per_sample_mean_names_the_operator_and_the_sample(tables):
    rng = np.random.default_rng(24)
    images = [rng.integers(0, 255, (10, 12, 3), dtype=np.uint8) for _ in range(4)]
    x, batch = _batch(images)
    means = [np.full((1, 1, 3), 5.0, F32)] * 4
    means[2] = np.full((1, 1, 4), 5.0, F32)  # samples differ in shape: the per-sample rule plans
    with pytest.raises(OperatorError, match="normalize: argument 'mean'") as e:
        _op("normalize", axis_names="HW").run_gpu(batch, [x], {"mean": means})
    assert e.value.operator == "normalize" and e.value.sample_index == 2 and e.value.source == "img2.jpg"
    bad = [np.full((1, 1, 4), 5.0, F32)] * 4  # one shape, refused for every sample: sample 0 named
    with pytest.raises(OperatorError, match="normalize: argument 'mean'") as e:
        _op("normalize", axis_names="HW").run_gpu(batch, [x], {"mean": bad})
    assert e.value.sample_index == 0
    strings = [np.array("a")] * 4
    with pytest.raises(OperatorError, match="mean") as e:
        _op("normalize").run_gpu(batch, [x], {"mean": strings})
    assert e.value.sample_index == 0


def test_normalize_batch_extents_error_names_no_sample(tables):
    rng = np.random.default_rng(25)
    images = [rng.integers(0, 255, (10, int(w), 3), dtype=np.uint8) for w in (5, 5, 6)]
    x, batch = _batch(images)
    with pytest.raises(OperatorError, match=r"batch=True.*\(10, 5, 3\) and \(10, 6, 3\)") as e:
        _op("normalize", batch=True, axis_names="H").run_gpu(batch, [x], {})
    assert e.value.sample_index is None


# --- erase ---------------------------------------------------------------------------------------

ERASE_CASES = {
    "one box": dict(anchor=[3, 4], shape=[10, 12], fill_value=[200]),
    "three boxes, per-channel fill": dict(anchor=[0, 0, 5, 7, 12, 3], shape=[4, 6, 9, 2.5, 30, 30],
                                          fill_value=[7, 8, 9]),
    "normalized": dict(anchor=[0.25, 0.3, 0.6, 0.05], shape=[0.5, 0.5, 0.3, 0.2], normalized=True),
    "normalized anchor": dict(anchor=[0.5, 0.5], shape=[3, 4], normalized_anchor=True),
    "normalized shape": dict(anchor=[2, 3], shape=[0.4, 0.7], normalized_shape=True, fill_value=[66]),
    "centered": dict(anchor=[5.5, 5.2, 15, 20], shape=[3, 3, 8, 6], centered_anchor=True, fill_value=[1, 2, 3]),
    "axis names WH": dict(anchor=[1, 0], shape=[5, 8], axis_names="WH", fill_value=[3]),
    "channel axis": dict(anchor=[1], shape=[1], axes=[2], fill_value=[250]),
    "repeated axis": dict(anchor=[1, 4], shape=[3, 2], axes=[0, 0]),
    "outside, wrapped fill": dict(anchor=[-1.5, 3, 200, 200], shape=[3, 400, 5, 5], fill_value=[300.7]),
    "no boxes": dict(fill_value=[1, 2]),
}


def _erase_per_sample(op, shapes, dtype, layout, arg_inputs):
    plans = [op.boxes(tuple(s), dtype, {**op.sample_args(arg_inputs, i), "__layout": layout})
             for i, s in enumerate(shapes.tolist())]
    return ge.erase_tables(shapes.tolist(), dtype, plans)


def _erase_batch(op, shapes, dtype, layout, arg_inputs):
    planned = ge._batch_plan(op, shapes, dtype, layout, arg_inputs)
    assert planned is not None
    return ge.erase_tables_batch(shapes, dtype, *planned)


def _assert_tables_equal(got, want):
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("dtype", [np.uint8, np.int16, np.float32], ids=["u8", "i16", "f32"])
@pytest.mark.parametrize("case", sorted(ERASE_CASES))
def test_erase_tables_match_per_sample_rule(case, dtype):
    rng = np.random.default_rng(len(case))
    shapes = np.column_stack([rng.integers(0, 80, (60, 2)), np.full(60, 3)])
    op = _op("erase", **ERASE_CASES[case])
    dtype = np.dtype(dtype)
    _assert_tables_equal(_erase_batch(op, shapes, dtype, "HWC", {}), _erase_per_sample(op, shapes, dtype, "HWC", {}))


@pytest.mark.parametrize("kw", [{}, dict(normalized=True), dict(centered_anchor=True, normalized_shape=True)],
                         ids=["plain", "normalized", "centered"])
def test_erase_per_sample_arguments_match_per_sample_rule(kw):
    rng = np.random.default_rng(31)
    n = 80
    shapes = np.column_stack([rng.integers(1, 60, (n, 2)), np.full(n, 3)])
    scale = 1.0 if kw.get("normalized") else 60.0
    arg_inputs = {"anchor": [rng.uniform(-0.2, 1.1, 4).astype(F32) * F32(scale) for _ in range(n)],
                  "shape": [rng.uniform(0, 0.6, 4).astype(F32) * F32(scale) for _ in range(n)],
                  "fill_value": [rng.uniform(-10, 300, 3) for _ in range(n)]}
    op = _op("erase", **kw)
    for dtype in (np.dtype(np.uint8), np.dtype(np.float32)):
        _assert_tables_equal(_erase_batch(op, shapes, dtype, "HWC", arg_inputs),
                             _erase_per_sample(op, shapes, dtype, "HWC", arg_inputs))
    chw = shapes[:, [2, 0, 1]]  # CHW: the fill runs along axis 0
    _assert_tables_equal(_erase_batch(op, chw, np.dtype(np.uint8), "CHW", arg_inputs),
                         _erase_per_sample(op, chw, np.dtype(np.uint8), "CHW", arg_inputs))


@pytest.mark.parametrize("dense", [False, True], ids=["ragged", "dense"])
def test_gpu_erase_uploads_the_per_sample_tables(tables, dense):
    rng = np.random.default_rng(32)
    hw = np.full((7, 2), 20) if dense else rng.integers(5, 40, (7, 2))
    images = [rng.integers(0, 255, (int(h), int(w), 3), dtype=np.uint8) for h, w in hw]
    x, batch = _batch(images, dense=dense)
    op = _op("erase", **ERASE_CASES["three boxes, per-channel fill"])
    (out,) = op.run_gpu(batch, [x], {})
    itab, btab, fill = tables
    want = _erase_per_sample(op, x.geometry()[2], np.dtype(np.uint8), "HWC", {})
    np.testing.assert_array_equal(itab[:, 2:], want[0][:, 2:])
    np.testing.assert_array_equal(itab[:, 0], x.geometry()[0])
    np.testing.assert_array_equal(btab, want[1])
    np.testing.assert_array_equal(fill, want[2])
    assert out.shape() == [im.shape for im in images]


def test_erase_ragged_box_counts_take_the_per_sample_rule(tables):
    rng = np.random.default_rng(33)
    images = [rng.integers(0, 255, (20, 30, 3), dtype=np.uint8) for _ in range(4)]
    x, batch = _batch(images)
    arg_inputs = {"anchor": [np.asarray(a, F32) for a in ([1, 1], [2, 3, 10, 10], [0, 0, 5, 5, 12, 1], [])],
                  "shape": [np.asarray(a, F32) for a in ([5, 9], [4, 4, 3.5, 8], [2, 2, 6, 6, 4, 40], [])],
                  "fill_value": [np.asarray(a, F32) for a in ([9, 8, 7], [5], [1, 2, 3], [4])]}
    op = _op("erase")
    assert ge._batch_plan(op, x.geometry()[2], np.dtype(np.uint8), "HWC", arg_inputs) is None
    op.run_gpu(batch, [x], arg_inputs)
    want = _erase_per_sample(op, x.geometry()[2], np.dtype(np.uint8), "HWC", arg_inputs)
    np.testing.assert_array_equal(tables[0][:, 2:], want[0][:, 2:])
    np.testing.assert_array_equal(tables[1], want[1])
    np.testing.assert_array_equal(tables[2], want[2])


ERASE_BAD = {
    "negative shape": (dict(anchor=[1, 1]), {"shape": [[2, 2], [2, 2], [2, -1], [2, 2]]}, "non-negative"),
    "not finite": (dict(shape=[2, 2]), {"anchor": [[1, 1], [1, 1], [np.nan, 1], [1, 1]]}, "NaN|nan"),
    "fill per channel": (dict(anchor=[1, 1], shape=[2, 2]), {"fill_value": [[1], [2], [1, 2], [3]]}, "fill_values"),
    "box count": (dict(shape=[2, 2]), {"anchor": [[1, 1], [1, 1], [1, 1, 1], [1, 1]]}, "same number of boxes"),
}


@pytest.mark.parametrize("case", sorted(ERASE_BAD))
def test_erase_bad_per_sample_argument_names_the_operator_and_the_sample(tables, case):
    kw, bad, words = ERASE_BAD[case]
    rng = np.random.default_rng(34)
    x, batch = _batch([rng.integers(0, 255, (10, 12, 3), dtype=np.uint8) for _ in range(4)])
    arg_inputs = {k: [np.asarray(v, F32) for v in vals] for k, vals in bad.items()}
    with pytest.raises(OperatorError, match=words) as e:
        _op("erase", **kw).run_gpu(batch, [x], arg_inputs)
    assert e.value.operator == "erase" and e.value.sample_index == 2 and e.value.source == "img2.jpg"


def test_erase_and_normalize_take_float_and_int_argument_types(tables):
    """Argument samples in float64 / int32 read as the per-sample rule reads them."""
    rng = np.random.default_rng(35)
    shapes = np.column_stack([rng.integers(1, 60, (30, 2)), np.full(30, 3)])
    arg_inputs = {"anchor": [rng.integers(-5, 50, 2).astype(np.int32) for _ in range(30)],
                  "shape": [rng.uniform(0, 30, 2) for _ in range(30)],
                  "fill_value": [rng.integers(0, 400, 1).astype(np.int64) for _ in range(30)]}
    op = _op("erase")
    _assert_tables_equal(_erase_batch(op, shapes, np.dtype(np.uint8), "HWC", arg_inputs),
                         _erase_per_sample(op, shapes, np.dtype(np.uint8), "HWC", arg_inputs))
    nop = _op("normalize", axis_names="HW", dtype=types.UINT8)
    means = {"mean": [np.int32(v) for v in rng.integers(0, 255, 30)]}
    axes, mean, _ = gn.batch_params(nop, shapes, "HWC", means)
    np.testing.assert_array_equal(mean, [float(v) for v in means["mean"]])


COMPUTED = [dict(), dict(axis_names="HW", ddof=1, epsilon=2.0), dict(mean=100.0, axes=[0, 1], ddof=1),
            dict(stddev=30.0, axis_names="W"), dict(batch=True, axis_names="HW"), dict(batch=True, scale=3.0),
            dict(batch=True, mean=128.0, axis_names="HW"), dict(axis_names="C", dtype=types.UINT8, shift=128.0)]


@pytest.mark.parametrize("kw", COMPUTED, ids=str)
def test_normalize_with_computed_statistics_runs_on_both_paths(tables, kw, monkeypatch):
    """Statistics computed on the device: the dense path (CuPy over the (N, ...) array, NumPy on
    the null device) gives the CPU operator's values; the ragged path plans its kernel rows. (A
    dense batch maps by the kernel too, which the null device does not run: here it maps by CuPy's
    steps, dense_map, so that the statistics' values are checked; tests/operators/image/
    test_normalize_gpu.py checks the kernel's map on a GPU.)"""
    from stoker.tensors import TensorListCPU

    rng = np.random.default_rng(36)
    dense_images = [rng.integers(0, 255, (8, 9, 3), dtype=np.uint8) for _ in range(5)]
    x, batch = _batch(dense_images, dense=True)
    op = _op("normalize", **kw)
    with monkeypatch.context() as m:
        m.setattr(gn, "kernel_rows", lambda *a: None)
        (out,) = op.run_gpu(batch, [x], {})
    (want,) = op.run_cpu(batch, [TensorListCPU(dense_images, "HWC")], {})
    for g, w in zip(out.as_cpu().samples(), want.samples()):
        assert g.dtype == w.dtype
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=1e-4, atol=1.0)
    ragged = [rng.integers(0, 255, (int(h), int(w), 3), dtype=np.uint8) for h, w in rng.integers(1, 20, (5, 2))]
    x, batch = _batch(ragged)
    tables.clear()
    (out,) = op.run_gpu(batch, [x], {})
    assert out.shape() == [im.shape for im in ragged]
    axes = gn.batch_params(op, x.geometry()[2], "HWC", {})[0]
    want_rows = _kernel_rows_per_sample([im.shape for im in ragged], axes)
    np.testing.assert_array_equal(tables[-1][:, 5:], want_rows[:, 5:])
