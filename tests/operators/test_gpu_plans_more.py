"""Whole-batch host plans of noise.gaussian, noise.salt_and_pepper, laplacian, slice, pad,
warp_perspective and color_space_conversion (issue 16) give exactly the per-sample rules' numbers.

Each GPU operator plans its kernel tables for the whole batch with NumPy and keeps its per-sample
rule (the CPU operator's own code, sample by sample), which also finds and names a sample whose
arguments are refused. Here both are compared exactly over random shapes and per-sample
arguments, the tables the GPU functions upload are checked on the null device
(tests/null_device.py: no GPU needed), and a bad per-sample argument is seen to fail naming the
operator and the sample.
"""

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import null_device  # noqa: E402

from stoker import types  # noqa: E402
from stoker.errors import OperatorError  # noqa: E402
from stoker.operators.base import BatchContext  # noqa: E402
from stoker.operators.filters import gpu_laplacian as glap  # noqa: E402
from stoker.operators.filters import gpu_noise as gn  # noqa: E402
from stoker.operators.image import gpu_slice as gs  # noqa: E402
from stoker.operators.image import gpu_warp_perspective as gwp  # noqa: E402
from stoker.operators.image.geometry_batch import PerSample, plan_rows  # noqa: E402
from stoker.operators.per_frame import FrameArray  # noqa: E402
from stoker.operators.schema import get_operator  # noqa: E402

N = 120


def _op(name, device="gpu", **kw):
    cls = get_operator(name)
    static, _ = cls.schema.bind(kw, lambda v: False)
    return cls(static, device)


def _per_sample(values, dtype=np.float32, shape=()):
    """An argument input as random generators give it: one array per sample."""
    return [np.asarray(v, dtype).reshape(shape) for v in values]


def _stack(rows):
    return tuple(np.asarray(col) for col in zip(*rows))


def _equal(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape, (g.shape, w.shape)
        assert g.dtype == w.dtype or g.dtype.kind == w.dtype.kind, (g.dtype, w.dtype)
        np.testing.assert_array_equal(g, w)


def _plan(op, n, whole, one):
    """The plan as the GPU function takes it: NumPy, or the per-sample rule where NumPy cannot."""
    return plan_rows(op, BatchContext(batch_size=n), n, whole, one)


# --- noise ------------------------------------------------------------------------------------

GAUSSIAN = {
    "static": (dict(mean=1.5, stddev=3.25), {}),
    "per_sample": (dict(), {"stddev": "u", "mean": "n"}),
    "ints": (dict(mean=2), {"stddev": "i"}),
}


@pytest.mark.parametrize("case", sorted(GAUSSIAN))
def test_gaussian_rows_match_params(case):
    rng = np.random.default_rng(1)
    kw, per = GAUSSIAN[case]
    args = {k: _per_sample(rng.uniform(0, 20, N) if v == "u" else rng.normal(0, 1e3, N) if v == "n" else
                           rng.integers(0, 9, N), np.int32 if v == "i" else np.float64) for k, v in per.items()}
    op = _op("noise.gaussian", **kw)
    got = gn.gaussian_rows(op, args, N)
    _equal(got, _stack([gn.gaussian_row_one(op, args, i) for i in range(N)]))


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.uint16, np.int16, np.float32, np.float64])
@pytest.mark.parametrize("per", [False, True])
def test_salt_and_pepper_rows_match_params(dtype, per):
    rng = np.random.default_rng(2)
    dtype = np.dtype(dtype)
    kw, args = dict(prob=0.3, salt_vs_pepper=0.25), {}
    if per:
        prob = rng.random(N)
        prob[:4] = [0.0, 1.0, 0.5, 1e-9]
        args = {"prob": _per_sample(prob), "salt_vs_pepper": _per_sample(rng.random(N), np.float64),
                "salt_val": _per_sample(rng.uniform(-1e5, 1e5, N)), "pepper_val": _per_sample(rng.normal(0, 300, N))}
    op = _op("noise.salt_and_pepper", **kw)
    got = gn.salt_and_pepper_rows(op, args, N, dtype)
    _equal(got, _stack([gn.salt_and_pepper_row_one(op, args, i, dtype) for i in range(N)]))


@pytest.mark.parametrize("layout,ndim", [("HWC", 3), ("CHW", 3), ("HW", 2), ("", 3), ("", 2), ("FHWC", 4)])
@pytest.mark.parametrize("per_channel", [False, True])
def test_noise_tables_batch_matches_noise_tables(layout, ndim, per_channel):
    rng = np.random.default_rng(3)
    shapes = rng.integers(0, 9, (N, ndim))
    rows = rng.normal(size=(N, 4))
    groups = gn.salt_and_pepper_groups(layout, shapes, per_channel)
    want_groups = [gn.salt_and_pepper_group(layout, tuple(s), per_channel) for s in shapes.tolist()]
    np.testing.assert_array_equal(groups, want_groups)
    idx = rng.integers(0, 1000, N)
    got = gn.noise_tables_batch(7, 3, idx, shapes, rows, groups)
    want = gn.noise_tables(7, 3, idx.tolist(), [tuple(s) for s in shapes.tolist()], list(rows), want_groups)
    _equal(got, want)


# --- laplacian --------------------------------------------------------------------------------

LAPLACIAN = {
    "default": (dict(), {}),
    "static": (dict(window_size=[5, 3], smoothing_size=[1, 7], scale=[2.5, -0.75]), {}),
    "normalized": (dict(window_size=7, normalized_kernel=True), {}),
    "normalized_smooth": (dict(smoothing_size=[3, 9], normalized_kernel=True), {"window_size": "win"}),
    "per_sample": (dict(), {"window_size": "win", "smoothing_size": "smooth", "scale": "scale"}),
    "per_sample_one_value": (dict(scale=[3.0]), {"window_size": "win1", "smoothing_size": "smooth1"}),
}


def _laplacian_args(rng, per, n, axes):
    out = {}
    for k, kind in per.items():
        if kind in ("win", "win1"):
            sizes = rng.choice(np.arange(3, 24, 2), (n, axes if kind == "win" else 1))
            out[k] = [np.asarray(v, np.int32) for v in sizes]
        elif kind in ("smooth", "smooth1"):
            out[k] = [np.asarray(v, np.float32) for v in
                      rng.choice(np.arange(1, 24, 2), (n, axes if kind == "smooth" else 1))]
        else:
            v = rng.normal(0, 3, (n, axes)).astype(np.float32)
            v[:3] = 1.0  # a scale of one leaves the window as it is
            out[k] = list(v)
    return out


@pytest.mark.parametrize("layout,shape", [("HWC", (0, 0, 3)), ("HWC", (0, 0, 200)), ("HW", (0, 0)),
                                          ("CHW", (3, 0, 0)), ("FHWC", (2, 0, 0, 3)), ("DHWC", (0, 0, 0, 1)),
                                          ("", (0, 0, 3))])
@pytest.mark.parametrize("case", sorted(LAPLACIAN))
def test_laplacian_plans_match_windows(case, layout, shape):
    from stoker.operators.color._common import spatial_layout

    rng = np.random.default_rng(4)
    kw, per = LAPLACIAN[case]
    axes = len(spatial_layout(layout, len(shape))[0])
    if axes != 2 and "static" in case or axes != 2 and case == "normalized_smooth":
        kw = {k: (v[:1] if isinstance(v, list) else v) for k, v in kw.items()}
    shapes = np.tile(shape, (N, 1))
    zero = np.asarray(shape) == 0
    shapes[:, zero] = rng.integers(1, 40, (N, int(zero.sum())))
    if layout == "HWC":  # channel counts on both sides of the image path's limit (128)
        shapes[:, 2] = rng.choice([1, 3, 128, 129, 200], N)
    op = _op("laplacian", **kw)
    args = _laplacian_args(rng, per, N, axes)
    got = glap.laplacian_plans(op, args, shapes, layout)
    want = _stack([glap.laplacian_plan_one(op, args, i, shapes[i], layout) for i in range(N)])
    _equal(got, want)
    # and the tables before issue 16: laplacian_tables of Laplacian.windows, trimmed to kmax
    plans = [op.windows(op.sample_args(args, i), layout, tuple(shapes[i])) for i in range(N)]
    kmax = max(len(k) for _, _, windows in plans for kernels in windows for k in kernels)
    itab, taps = glap.laplacian_tables([tuple(s) for s in shapes.tolist()], plans, kmax)
    np.testing.assert_array_equal(got[0], itab)
    np.testing.assert_array_equal(got[1][:, :, :kmax], taps)
    assert not got[1][:, :, kmax:].any()


def test_laplacian_uploads_the_old_tables(tables):
    rng = np.random.default_rng(5)
    images = [rng.integers(0, 255, (int(h), int(w), 3), np.uint8) for h, w in rng.integers(3, 40, (9, 2))]
    x, batch = _batch(images)
    op = _op("laplacian")
    args = _laplacian_args(rng, {"window_size": "win", "scale": "scale"}, 9, 2)
    op.run_gpu(batch, [x], args)
    itab, taps = tables
    plans = [op.windows(op.sample_args(args, i), "HWC", im.shape) for i, im in enumerate(images)]
    kmax = max(len(k) for _, _, windows in plans for kernels in windows for k in kernels)
    want_itab, want_taps = glap.laplacian_tables([im.shape for im in images], plans, kmax)
    np.testing.assert_array_equal(itab[:, 8:], want_itab[:, 8:])
    np.testing.assert_array_equal(itab[:, glap.INPUT], x.geometry()[0])
    np.testing.assert_array_equal(taps, want_taps.reshape(9, -1))


# --- slice ------------------------------------------------------------------------------------

SLICE = {
    "rel": (dict(rel_start=(0.1, 0.3), rel_end=(0.8, 0.95)), {}),
    "per_sample_rel": (dict(out_of_bounds_policy="pad"), {"rel_start": (2,), "rel_shape": (2,)}),
    "per_sample_abs": (dict(out_of_bounds_policy="trim_to_shape"), {"start": (2,), "end": (2,)}),
    "per_sample_shape": (dict(out_of_bounds_policy="pad", fill_values=(1, 2, 3)), {"start": (2,), "shape": (2,)}),
    "per_sample_rel_end": (dict(axis_names="HW", out_of_bounds_policy="pad"), {"rel_end": (2,)}),
    "channel_axis": (dict(axis_names="C", out_of_bounds_policy="pad"), {"start": (1,), "end": (1,)}),
}


def _slice_args(rng, per, n):
    out = {}
    for k, shape in per.items():
        if k.startswith("rel"):
            v = rng.uniform(-0.3, 1.3, (n, *shape))
        else:
            v = rng.uniform(-10, 50, (n, *shape))
            v[:4] = np.round(v[:4]) + 0.5  # halves: rounded away from zero
        if k in ("rel_shape", "shape", "rel_end"):
            v = np.abs(v)
        if k == "end" and "start" in out:
            v = np.stack(out["start"]) + np.abs(v)
        out[k] = list(v.astype(np.float32))
    return out


@pytest.mark.parametrize("case", sorted(SLICE))
def test_slice_windows_match_per_sample_rule(case):
    rng = np.random.default_rng(6)
    kw, per = SLICE[case]
    op = _op("slice", **kw)
    shapes = np.column_stack([rng.integers(1, 60, (N, 2)), np.full(N, 3)])
    args = _slice_args(rng, per, N)
    got = gs.slice_windows(op, shapes, [], args, "HWC", np.dtype(np.uint8))
    want = _stack([gs.slice_window_one(op, shapes[i], [], args, i, "HWC", np.dtype(np.uint8)) for i in range(N)])
    _equal(got, want)


@pytest.mark.parametrize("normalized", [True, False])
def test_slice_windows_from_inputs_match_per_sample_rule(normalized):
    rng = np.random.default_rng(7)
    op = _op("slice", normalized_anchor=normalized, normalized_shape=not normalized, out_of_bounds_policy="pad")
    shapes = np.column_stack([rng.integers(1, 60, (N, 2)), np.full(N, 3)])
    anchor = list(rng.uniform(-0.2, 1.0, (N, 2)).astype(np.float32) * (1 if normalized else 50))
    extent = list(rng.uniform(0, 1.2, (N, 2)).astype(np.float32) * (50 if normalized else 1))
    box = [anchor, extent]
    got = gs.slice_windows(op, shapes, box, {}, "HWC", np.dtype(np.uint8))
    want = _stack([gs.slice_window_one(op, shapes[i], box, {}, i, "HWC", np.dtype(np.uint8)) for i in range(N)])
    _equal(got, want)


def test_slice_takes_the_per_sample_rule_for_per_sample_axes_and_ragged_values():
    rng = np.random.default_rng(8)
    shapes = np.column_stack([rng.integers(5, 60, (6, 2)), np.full(6, 3)])
    op = _op("slice", out_of_bounds_policy="pad")
    u8 = np.dtype(np.uint8)
    cases = [{"axes": [np.asarray([0]), np.asarray([1])] * 3, "start": _per_sample(rng.uniform(0, 4, 6), shape=(1,))},
             {"start": [np.asarray([1.0, 2.0]), np.asarray([[1.0, 2.0]])] * 3}]
    for args in cases:
        with pytest.raises(PerSample):
            gs.slice_windows(op, shapes, [], args, "HWC", u8)
        got = _plan(op, 6, lambda a=args: gs.slice_windows(op, shapes, [], a, "HWC", u8),
                    lambda i, a=args: gs.slice_window_one(op, shapes[i], [], a, i, "HWC", u8))
        _equal(got, _stack([gs.slice_window_one(op, shapes[i], [], args, i, "HWC", u8) for i in range(6)]))


# --- pad --------------------------------------------------------------------------------------

PAD = {
    "batch_max": (dict(), {}),
    "shape": (dict(shape=(50, -1), axis_names="HW"), {}),
    "align": (dict(align=(4,), axes=(1, 0)), {}),
    "per_sample_shape": (dict(axis_names="WH"), {"shape": (2,)}),
    "per_sample_align": (dict(axis_names="HW", shape=(-1, 40)), {"align": (2,)}),
    "per_sample_align_one": (dict(axes=(0, 1, 2)), {"align": (1,)}),
    "repeated_axis": (dict(axes=(0, 0), shape=(30, 50)), {}),
}


@pytest.mark.parametrize("case", sorted(PAD))
def test_pad_shapes_and_fills_match_per_sample_rule(case):
    rng = np.random.default_rng(9)
    kw, per = PAD[case]
    op = _op("pad", **kw)
    shapes = np.column_stack([rng.integers(0, 60, (N, 2)), np.full(N, 3)])
    args = {k: _per_sample(rng.integers(-1 if k == "shape" else 1, 70 if k == "shape" else 9, (N, *shape)),
                           np.int32, shape) for k, shape in per.items()}
    got = op._targets_batch(shapes, "HWC", args)
    want = op.output_shapes([tuple(s) for s in shapes.tolist()], "HWC", args)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(op.output_shapes_batch(shapes, "HWC", args), want)
    args["fill_value"] = _per_sample(rng.uniform(-400, 400, N))
    for dtype in (np.uint8, np.int16, np.float32):
        fills = op.fill_values(args, N, dtype)
        want = [op.fill(op.sample_args(args, i), dtype) for i in range(N)]
        np.testing.assert_array_equal(fills, np.asarray(want))
        assert fills.dtype == np.dtype(dtype)


def test_pad_with_a_bad_shape_fails_the_batch_as_the_cpu():
    op = _op("pad", axis_names="HW")
    args = {"shape": [np.asarray(v, np.int32) for v in ([3, 4], [5, 6], [7, 8, 9])]}
    shapes = np.array([[4, 4, 3]] * 3)
    with pytest.raises(OperatorError, match="'shape' has 3 values") as e:
        op.output_shapes_batch(shapes, "HWC", args)
    assert e.value.operator == "pad"


# --- warp_perspective -------------------------------------------------------------------------

WARP = {
    "static": (dict(matrix=[1.0, 0.1, 3.0, -0.2, 0.9, 1.0, 1e-4, 2e-4, 1.0]), {}),
    "per_sample": (dict(), {"matrix": (3, 3)}),
    "forward": (dict(inverse_map=False), {"matrix": (9,)}),
    "center": (dict(pixel_origin="center", size=[30.0, 17.9]), {"matrix": (9,)}),
    "per_sample_size": (dict(inverse_map=False, pixel_origin="center"), {"matrix": (9,), "size": (2,)}),
    "size_three_values": (dict(matrix=list(np.eye(3).ravel())), {"size": (3,)}),
}


@pytest.mark.parametrize("case", sorted(WARP))
def test_warp_perspective_plans_match_geometry(case):
    rng = np.random.default_rng(10)
    kw, per = WARP[case]
    op = _op("warp_perspective", **kw)
    in_hw = rng.integers(1, 300, (N, 2))
    args = {}
    for k, shape in per.items():
        if k == "matrix":
            m = np.eye(3) + rng.normal(0, 0.2, (N, 3, 3))
            m[:, 2, :2] *= 1e-3
            args[k] = [v.reshape(shape).astype(np.float32 if i % 2 else np.float64) for i, v in enumerate(m)]
        else:
            args[k] = _per_sample(rng.uniform(0, 400, (N, *shape)), np.float32, shape)
    got = gwp.perspective_plans(op, args, in_hw)
    want = _stack([gwp.perspective_plan_one(op, args, i, in_hw[i]) for i in range(N)])
    _equal(got, want)


def test_warp_perspective_uploads_the_per_sample_matrices(tables):
    rng = np.random.default_rng(11)
    images = [rng.integers(0, 255, (int(h), int(w), 3), np.uint8) for h, w in rng.integers(3, 40, (8, 2))]
    x, batch = _batch(images)
    op = _op("experimental.warp_perspective", fill_value=[0])
    m = [(np.eye(3) + rng.normal(0, 0.1, (3, 3))).astype(np.float32) for _ in range(8)]
    (out,) = op.run_gpu(batch, [x], {"matrix": m})
    itab, ftab = tables
    want = [op.geometry(op.sample_args({"matrix": m}, i), None, im.shape[:2]) for i, im in enumerate(images)]
    np.testing.assert_array_equal(ftab[:, :9], np.array([w[0] for w in want]).reshape(8, 9).astype(np.float32))
    np.testing.assert_array_equal(itab[:, 10:12], [(w[1], w[2]) for w in want])
    assert out.shape() == [(w[1], w[2], 3) for w in want]


# --- color_space_conversion -------------------------------------------------------------------

@pytest.mark.parametrize("src,dst", [(types.RGB, types.BGR), (types.RGB, types.GRAY), (types.GRAY, types.RGB),
                                     (types.YCbCr, types.GRAY)])
def test_color_space_conversion_uploads_the_old_tables(tables, src, dst):
    rng = np.random.default_rng(12)
    cin = 1 if src == types.GRAY else 3
    images = [rng.integers(0, 255, (int(h), int(w), cin), np.uint8) for h, w in rng.integers(1, 30, (7, 2))]
    x, batch = _batch(images)
    op = _op("color_space_conversion", image_type=src, output_type=dst)
    (out,) = op.run_gpu(batch, [x], {})
    cout = 1 if dst == types.GRAY else 3
    assert out.shape() == [(*im.shape[:2], cout) for im in images]
    ptrs = [s.data.ptr for s in x.samples()]  # the table before issue 16, from per-sample views
    np.testing.assert_array_equal(tables[0][:, 0], ptrs)
    np.testing.assert_array_equal(tables[0][:, 2], [im.size // cin for im in images])
    offsets = np.concatenate([[0], np.cumsum([im.shape[0] * im.shape[1] * cout for im in images])[:-1]])
    np.testing.assert_array_equal(tables[0][:, 1] - tables[0][0, 1], offsets)


# --- the GPU functions on the null device -------------------------------------------------------

@pytest.fixture
def tables(monkeypatch):
    """The host tables the GPU functions upload, in order (the null device runs no kernel)."""
    from stoker.operators.color import gpu_color_space_conversion as gcsc

    with null_device.recording_uploads(monkeypatch, (gn, glap, gs, gwp, gcsc)) as got:
        yield got


def _batch(images, layout="HWC"):
    """A TensorListGPU of ``images`` on the null device and its batch context."""
    return null_device.device_batch(images, layout)


def test_noise_uploads_the_old_tables(tables):
    rng = np.random.default_rng(13)
    images = [rng.integers(0, 255, (int(h), int(w), 3), np.uint8) for h, w in rng.integers(1, 30, (6, 2))]
    x, batch = _batch(images)
    batch.iteration, batch.index_offset = 5, 100
    std = _per_sample(rng.uniform(0, 9, 6))
    op = _op("noise.gaussian", seed=17)
    op.run_gpu(batch, [x], {"stddev": std})
    itab, ftab = tables
    rows = [(float(s), float(m)) for m, s in (op.params(op.sample_args({"stddev": std}, i)) for i in range(6))]
    want = gn.noise_tables(op.op_seed, 5, [batch.sample_index(i) for i in range(6)], [im.shape for im in images],
                           rows, [(1, 1)] * 6)
    np.testing.assert_array_equal(itab[:, 2:], want[0][:, 2:])
    np.testing.assert_array_equal(ftab, want[1])
    np.testing.assert_array_equal(itab[:, 0], x.geometry()[0])

    tables.clear()
    sp = _op("noise.salt_and_pepper", seed=3)
    prob = {"prob": _per_sample(rng.random(6))}
    sp.run_gpu(batch, [x], prob)
    itab, ftab = tables
    rows = [sp.params(np.dtype(np.uint8), sp.sample_args(prob, i)) for i in range(6)]
    want = gn.noise_tables(sp.op_seed, 5, [batch.sample_index(i) for i in range(6)], [im.shape for im in images],
                           [tuple(map(float, r)) for r in rows], [(3, 1)] * 6)
    np.testing.assert_array_equal(itab[:, 2:], want[0][:, 2:])
    np.testing.assert_array_equal(ftab, want[1])


# --- bad or unusual per-sample arguments ------------------------------------------------------

BAD = {
    "noise.gaussian": (dict(), {"stddev": [1.0, 2.0, -1.0, 3.0]}, "stddev"),
    "noise.salt_and_pepper": (dict(), {"prob": [0.1, 0.2, 1.5, 0.3]}, "prob"),
    "laplacian": (dict(), {"window_size": [3, 5, 4, 7]}, "window_size"),
    "slice": (dict(), {"start": [[0, 0], [1, 1], [np.nan, 1], [2, 2]]}, "NaN"),
    "slice_policy": (dict(end=[8, 8], axis_names="HW"), {"start": [[0, 0], [1, 1], [-5, 1], [2, 2]]},
                     "out_of_bounds_policy"),
    "slice_fill": (dict(axis_names="WC", out_of_bounds_policy="pad", fill_values=[1, 2, 3]),
                   {"start": [[0, 0], [0, 0], [-1, 1], [0, 0]], "end": [[3, 3], [3, 3], [3, 2], [3, 3]]},
                   "fill_values"),
    "pad": (dict(axis_names="HW", shape=(64, 64)), {"fill_value": [[1.0], [2.0], [3.0, 4.0], [5.0]]}, "fill_value"),
    "experimental.warp_perspective": (dict(inverse_map=False),
                                      {"matrix": [np.eye(3), np.eye(3), np.zeros((3, 3)), np.eye(3)]},
                                      "invertible"),
    "warp_perspective": (dict(matrix=list(np.eye(3).ravel())), {"size": [[4, 4], [5, 5], [-3, 4], [6, 6]]},
                         "negative"),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_a_bad_per_sample_argument_names_the_operator_and_the_sample(tables, name):
    kw, bad, words = BAD[name]
    op_name = name.split("_")[0] if name.startswith("slice") else name
    rng = np.random.default_rng(14)
    images = [rng.integers(0, 255, (int(h), int(w), 3), np.uint8) for h, w in rng.integers(10, 30, (4, 2))]
    x, batch = _batch(images)
    dtype = np.int32 if name == "laplacian" else np.float32
    arg_inputs = {k: [np.asarray(v, dtype) for v in vals] for k, vals in bad.items()}
    with pytest.raises(OperatorError, match=words) as e:
        _op(op_name, **kw).run_gpu(batch, [x], arg_inputs)
    assert e.value.operator == op_name and e.value.sample_index == 2 and e.value.source == "img2.jpg"


def test_per_frame_and_ragged_argument_inputs_take_the_per_sample_rule():
    rng = np.random.default_rng(15)
    op = _op("noise.gaussian")
    ragged = {"stddev": [np.asarray(1.0), np.asarray([2.0]), np.asarray(3.0)] * 2}
    with pytest.raises(PerSample):
        gn.gaussian_rows(op, ragged, 6)
    got = _plan(op, 6, lambda: gn.gaussian_rows(op, ragged, 6), lambda i: gn.gaussian_row_one(op, ragged, i))
    _equal(got, _stack([gn.gaussian_row_one(op, ragged, i) for i in range(6)]))
    framed = {"window_size": [np.asarray([3, 5]).view(FrameArray)] * 6}
    assert glap._has_frame_values(framed) and not glap._has_frame_values({"window_size": [np.asarray(3)] * 6})
    assert gwp._has_frame_values({"matrix": [np.eye(3).view(FrameArray)]})
    shapes = rng.integers(1, 9, (6, 3))
    mixed = {"window_size": [np.asarray(3), np.asarray([5])] * 3}
    lap = _op("laplacian")
    got = _plan(lap, 6, lambda: glap.laplacian_plans(lap, mixed, shapes, "HWC"),
                lambda i: glap.laplacian_plan_one(lap, mixed, i, shapes[i], "HWC"))
    _equal(got, _stack([glap.laplacian_plan_one(lap, mixed, i, shapes[i], "HWC") for i in range(6)]))
