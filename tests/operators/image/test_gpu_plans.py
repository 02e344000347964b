"""The GPU operators' whole-batch host plans (issue 16) give exactly the per-sample rules' numbers.

rotate, warp_affine, crop, flip, paste and grid_mask plan their kernel tables for the whole batch
with NumPy; each keeps its per-sample rule (the CPU operator's geometry, sample by sample), which
also finds and names a sample whose arguments are refused. Here both are compared to the bit over
random shapes and per-sample arguments, edge cases included, and the tables the GPU functions
upload are checked on the null device (tests/null_device.py: no GPU needed). The transforms.*
operators' batch path is compared with their run_sample the same way.
"""

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
import null_device  # noqa: E402

from stoker.errors import OperatorError  # noqa: E402
from stoker.operators.base import BatchContext  # noqa: E402
from stoker.operators.image import geometry, geometry_batch  # noqa: E402
from stoker.operators.image import gpu_crop_flip as gcf  # noqa: E402
from stoker.operators.image import gpu_grid_mask_paste as ggp  # noqa: E402
from stoker.operators.image import gpu_warp as gw  # noqa: E402
from stoker.operators.image.rotate import _half_centre_matrix  # noqa: E402
from stoker.operators.schema import get_operator  # noqa: E402
from stoker.tensors import TensorListCPU  # noqa: E402

N = 160
EDGE_ANGLES = [0, 90, 180, -90, 270, -180, 360, 45, 135, 225, 315, -45, 1e-9, 89.99999999, 30, -30]


def _op(name, device="gpu", **kw):
    cls = get_operator(name)
    static, _ = cls.schema.bind(kw, lambda v: False)
    return cls(static, device)


def _per_sample(values, dtype=np.float32, shape=()):
    """An argument input as random generators give it: one array per sample."""
    return [np.asarray(v, dtype).reshape(shape) for v in values]


def _shapes(rng, n, lo=1, hi=300):
    return rng.integers(lo, hi, (n, 2))


def _stack(rows):
    return tuple(np.asarray(col) for col in zip(*rows))


def _equal(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape, (g.shape, w.shape)
        np.testing.assert_array_equal(g, w)


# --- rotate ---------------------------------------------------------------------------------

def test_rotated_sizes_and_matrices_match_geometry():
    rng = np.random.default_rng(1)
    in_hw = _shapes(rng, 400)
    angles = np.concatenate([EDGE_ANGLES, rng.uniform(-720, 720, 400 - len(EDGE_ANGLES))])
    cos, sin = geometry_batch.cos_sin_degrees(angles)
    out = geometry_batch.rotated_sizes(in_hw, cos, sin)
    want = np.array([geometry.rotated_size(int(h), int(w), float(a)) for (h, w), a in zip(in_hw, angles)])
    np.testing.assert_array_equal(out, want)
    for half in (False, True):
        got = geometry_batch.rotation_matrices(cos, sin, in_hw, out, half_centre=half)
        ref = [(_half_centre_matrix(float(a), tuple(i), tuple(o))[:2] if half else
                geometry.rotation_matrix(float(a), tuple(i), tuple(o))).reshape(6)
               for a, i, o in zip(angles, in_hw.tolist(), out.tolist())]
        np.testing.assert_array_equal(got, np.array(ref))


ROTATE_CASES = {
    "grow": (dict(), {}),
    "keep_size": (dict(keep_size=True), {}),
    "size": (dict(size=[37.5, 20.5]), {}),  # halves round to even, as round()
    "size_one_value": (dict(size=[31.0]), {}),
    "size_per_sample": (dict(), {"size": lambda rng: _per_sample(rng.uniform(0, 80, (N, 2)), shape=(2,))}),
    "static_angle": (dict(angle=33.0), None),
}


@pytest.mark.parametrize("nearest", [False, True], ids=["linear", "nearest"])
@pytest.mark.parametrize("case", sorted(ROTATE_CASES))
def test_rotate_plans_match_per_sample_rule(case, nearest):
    from stoker import types

    rng = np.random.default_rng(2)
    kw, extra = ROTATE_CASES[case]
    interp = types.INTERP_NN if nearest else types.INTERP_LINEAR
    op = _op("rotate", interp_type=interp, fill_value=0, **kw)
    in_hw = _shapes(rng, N)
    arg_inputs = {}
    if extra is not None:
        angles = np.concatenate([EDGE_ANGLES, rng.uniform(-360, 360, N - len(EDGE_ANGLES))])
        # float32 as random.uniform gives them, some float64 (exact diagonals, ties)
        arg_inputs["angle"] = _per_sample(angles[:N // 2]) + _per_sample(angles[N // 2:], np.float64)
        arg_inputs.update({k: f(rng) for k, f in extra.items()})
    got = gw.rotate_plans(op, arg_inputs, in_hw, nearest)
    _equal(got, _stack([gw.rotate_plan(op, arg_inputs, i, in_hw[i], nearest) for i in range(N)]))


# --- warp_affine ----------------------------------------------------------------------------

def _matrices(rng, n, width=6):
    m = np.tile([1.0, 0.0, 0.0, 0.0, 1.0, 0.0], (n, 1)) + rng.normal(0, 0.3, (n, 6)) * [1, 1, 20, 1, 1, 20]
    return np.concatenate([m, np.tile([0.0, 0.0, 1.0], (n, 1))], 1)[:, :width]


@pytest.mark.parametrize("nearest", [False, True], ids=["linear", "nearest"])
@pytest.mark.parametrize("inverse_map", [True, False])
@pytest.mark.parametrize("how", ["static", "per_sample", "per_sample_9", "size", "size_per_sample"])
def test_warp_affine_plans_match_per_sample_rule(how, inverse_map, nearest):
    rng = np.random.default_rng(3)
    in_hw = _shapes(rng, N)
    kw, arg_inputs = dict(inverse_map=inverse_map), {}
    if how == "static":
        kw["matrix"] = [1.0, 0.1, -10.0, 0.05, 1.0, 5.0]
    else:
        width = 9 if how == "per_sample_9" else 6
        arg_inputs["matrix"] = _per_sample(_matrices(rng, N, width), shape=(2, 3) if width == 6 else (3, 3))
    if how == "size":
        kw["size"] = [40.7, 33.2]  # truncated, as int()
    if how == "size_per_sample":
        arg_inputs["size"] = _per_sample(rng.uniform(1, 90, (N, 2)), shape=(2,))
    op = _op("warp_affine", **kw)
    got = gw.warp_affine_plans(op, arg_inputs, in_hw, nearest)
    _equal(got, _stack([gw.warp_affine_plan(op, arg_inputs, i, in_hw[i], nearest) for i in range(N)]))


# --- crop, flip -----------------------------------------------------------------------------

CROP_CASES = {
    "pad": (dict(crop=(300, 300), out_of_bounds_policy="pad"), ()),
    "one_value": (dict(crop=[57.9]), ()),
    "hw": (dict(crop_h=40.5, crop_w=0.5), ()),  # an extent below one pixel keeps the axis
    "truncate": (dict(crop=(31, 77), rounding="truncate"), ()),
    "per_sample": (dict(out_of_bounds_policy="pad"), ("crop",)),
    "per_sample_hw": (dict(), ("crop_h", "crop_w")),
    "static_pos": (dict(crop=(20, 20), crop_pos_x=0.3, crop_pos_y=1.0), None),
}


@pytest.mark.parametrize("case", sorted(CROP_CASES))
def test_crop_windows_match_per_sample_rule(case):
    rng = np.random.default_rng(4)
    kw, per = CROP_CASES[case]
    op = _op("crop", **kw)
    in_hw = _shapes(rng, N, 1, 400)
    arg_inputs = {}
    if per is not None:
        pos = rng.random((N, 2))
        pos[:8] = [[0, 0], [1, 1], [0.5, 0.5], [0, 1], [1, 0], [0.25, 0.75], [0.9, 0.1], [0.5, 1]]
        arg_inputs = {"crop_pos_y": _per_sample(pos[:, 0]), "crop_pos_x": _per_sample(pos[:, 1])}
        if "crop" in per:
            arg_inputs["crop"] = _per_sample(rng.uniform(-2, 500, (N, 2)), shape=(2,))
        for k in ("crop_h", "crop_w"):
            if k in per:
                arg_inputs[k] = _per_sample(rng.uniform(-1, 450, N), shape=(1,))
    got = gcf.crop_windows(op, arg_inputs, in_hw)
    _equal(got, _stack([gcf.crop_window_one(op, arg_inputs, i, in_hw[i]) for i in range(N)]))


@pytest.mark.parametrize("how", ["static", "horizontal", "both", "ints"])
def test_flip_flags_match_per_sample_rule(how):
    rng = np.random.default_rng(5)
    arg_inputs, kw = {}, {}
    if how == "static":
        kw = dict(horizontal=0, vertical=1)
    if how in ("horizontal", "both"):
        arg_inputs["horizontal"] = _per_sample(rng.integers(0, 2, N), np.int32)
    if how == "both":
        arg_inputs["vertical"] = _per_sample(rng.integers(0, 2, N), np.float32)
    if how == "ints":
        arg_inputs["horizontal"] = _per_sample(rng.integers(-3, 3, N), np.int64, (1,))
    op = _op("flip", **kw)
    got = gcf.flip_flags(op, arg_inputs, N)
    _equal(got, _stack([gcf.flip_flag_one(op, arg_inputs, i) for i in range(N)]))


# --- paste, grid_mask -----------------------------------------------------------------------

@pytest.mark.parametrize("how", ["static", "per_sample", "min_canvas"])
def test_paste_canvases_match_per_sample_rule(how):
    rng = np.random.default_rng(6)
    shapes = np.column_stack([_shapes(rng, N), np.full(N, 3)])
    kw = dict(ratio=1.25, fill_value=[0, 0, 0])
    arg_inputs = {"paste_x": _per_sample(rng.random(N)), "paste_y": _per_sample(rng.random(N))}
    arg_inputs["paste_x"][:3] = _per_sample([0.0, 1.0, 0.5])
    if how == "static":
        arg_inputs = {}
        kw.update(paste_x=0.3, paste_y=0.9)
    if how == "per_sample":
        arg_inputs["ratio"] = _per_sample(rng.uniform(1, 3, N))
    if how == "min_canvas":
        arg_inputs["min_canvas_size"] = _per_sample(rng.uniform(0, 500, N))
    op = _op("paste", **kw)
    got = ggp.paste_canvases(op, arg_inputs, shapes)
    _equal(got, _stack([ggp.paste_canvas_one(op, arg_inputs, i, shapes[i]) for i in range(N)]))


@pytest.mark.parametrize("how", ["static", "per_sample"])
def test_grid_mask_grids_match_per_sample_rule(how):
    rng = np.random.default_rng(7)
    shapes = np.column_stack([_shapes(rng, N), np.full(N, 3)])
    kw, arg_inputs = dict(tile=37, ratio=0.4, angle=0.7, shift_x=3.5), {}
    if how == "per_sample":
        arg_inputs = {"tile": _per_sample(rng.integers(1, 200, N), np.int32),
                      "ratio": _per_sample(rng.random(N)), "angle": _per_sample(rng.uniform(-7, 7, N)),
                      "shift_x": _per_sample(rng.uniform(-50, 50, N)), "shift_y": _per_sample(rng.uniform(-50, 50, N))}
    op = _op("grid_mask", **kw)
    got = ggp.grid_mask_grids(op, arg_inputs, shapes)
    _equal(got, _stack([ggp.grid_mask_grid_one(op, arg_inputs, i, shapes[i]) for i in range(N)]))


# --- the GPU functions on the null device: their uploaded tables -----------------------------

@pytest.fixture
def tables(monkeypatch):
    """The host tables the GPU functions upload, in order (the null device runs no kernel)."""
    with null_device.recording_uploads(monkeypatch, (gw, gcf, ggp)) as got:
        yield got


def _batch(images, layout="HWC"):
    """A TensorListGPU of ``images`` on the null device and its batch context."""
    return null_device.device_batch(images, layout)


def _images(rng, n, channels=3):
    return [rng.integers(0, 255, (int(h), int(w), channels), dtype=np.uint8) for h, w in _shapes(rng, n, 5, 60)]


def test_gpu_rotate_uploads_the_per_sample_tables(tables):
    rng = np.random.default_rng(8)
    images = _images(rng, 12)
    x, batch = _batch(images)
    op = _op("rotate", fill_value=0)
    angles = _per_sample(np.concatenate([EDGE_ANGLES[:6], rng.uniform(-30, 30, 6)]))
    (out,) = op.run_gpu(batch, [x], {"angle": angles})
    itab, ftab = tables
    ptrs, row, shapes = x.geometry()
    want = _stack([gw.rotate_plan(op, {"angle": angles}, i, shapes[i, :2], False) for i in range(12)])
    np.testing.assert_array_equal(ftab[:, :6], want[0].astype(np.float32))
    np.testing.assert_array_equal(itab[:, 5:7], want[1])
    np.testing.assert_array_equal(itab[:, 0], ptrs)
    np.testing.assert_array_equal(itab[:, 2:4], shapes[:, :2])
    assert [s[:2] for s in out.shape()] == [tuple(hw) for hw in want[1].tolist()]


def test_gpu_crop_and_flip_upload_the_old_tables(tables):
    """The crop/flip table is the one crop_flip_samples builds from per-sample views and windows
    (the code before issue 16), output pointers aside."""
    rng = np.random.default_rng(9)
    images = _images(rng, 10)
    x, batch = _batch(images)
    op = _op("crop", crop=(30, 40), out_of_bounds_policy="pad")
    pos = {"crop_pos_x": _per_sample(rng.random(10)), "crop_pos_y": _per_sample(rng.random(10))}
    (out,) = op.run_gpu(batch, [x], pos)
    windows = [gcf.crop_window_one(op, pos, i, im.shape[:2])[0] for i, im in enumerate(images)]
    gcf.crop_flip_samples(x.samples(), windows, [0] * 10, batch)
    new, old = tables
    np.testing.assert_array_equal(new[:, :9], old[:, :9])
    assert out.shape() == [(30, 40, 3)] * 10

    tables.clear()
    flip = _op("flip")
    hz = {"horizontal": _per_sample(rng.integers(0, 2, 10), np.int32)}
    (out,) = flip.run_gpu(batch, [x], hz)
    flags = [gcf.flip_flag_one(flip, hz, i)[0] for i in range(10)]
    gcf.crop_flip_samples(x.samples(), [(0, 0, *im.shape[:2]) for im in images], flags, batch)
    new, old = tables
    np.testing.assert_array_equal(new[:, :9], old[:, :9])
    assert out.shape() == [im.shape for im in images]


def test_gpu_paste_and_grid_mask_upload_the_per_sample_tables(tables):
    rng = np.random.default_rng(10)
    images = _images(rng, 9)
    x, batch = _batch(images)
    op = _op("paste", ratio=1.5, fill_value=[1, 2, 3])
    args = {"paste_x": _per_sample(rng.random(9)), "paste_y": _per_sample(rng.random(9))}
    (out,) = op.run_gpu(batch, [x], args)
    canvases = [op.canvas(im.shape, op.sample_args(args, i)) for i, im in enumerate(images)]
    itab = tables[0]
    np.testing.assert_array_equal(itab[:, 2:], [(h * w * 3, w, im.shape[0], im.shape[1], y, x0)
                                                for im, (h, w, y, x0) in zip(images, canvases)])
    assert out.shape() == [(h, w, 3) for h, w, _, _ in canvases]

    tables.clear()
    gm = _op("grid_mask", tile=13, ratio=0.3)
    angle = {"angle": _per_sample(rng.uniform(-3, 3, 9))}
    gm.run_gpu(batch, [x], angle)
    itab, ftab = tables
    want = [ggp.grid_mask_params(*gm.grid(im.shape, gm.sample_args(angle, i))) for i, im in enumerate(images)]
    np.testing.assert_array_equal(ftab, np.array(want))
    np.testing.assert_array_equal(itab[:, 2], [im.size for im in images])


def test_empty_batches(tables):
    from stoker.tensors_gpu import TensorListGPU

    empty = TensorListGPU([], "HWC")
    for name, kw in (("crop", dict(crop=(3, 3))), ("flip", {}), ("paste", dict(ratio=2.0, fill_value=[0])),
                     ("grid_mask", {})):
        (out,) = _op(name, **kw).run_gpu(BatchContext(batch_size=0), [empty], {})
        assert len(out) == 0
    assert gcf.crop_windows(_op("crop", crop=(3, 3)), {}, np.zeros((0, 2), np.int64))[0].shape == (0, 4)


# --- bad or unusual per-sample arguments ----------------------------------------------------

BAD = {
    "rotate": (dict(fill_value=0), {"angle": [0.0, 10.0, np.nan, 5.0]}, "angle"),
    "warp_affine": (dict(inverse_map=False),
                    {"matrix": [np.eye(2, 3), np.eye(2, 3), np.zeros((2, 3)), np.eye(2, 3)]}, "invertible"),
    "crop": (dict(crop=(10, 10)), {"crop_pos_x": [0.5, 0.5, np.inf, 0.1]}, "infinity"),
    "flip": (dict(), {"horizontal": [1.0, 0.0, 0.5, 1.0]}, "whole numbers"),
    "paste": (dict(ratio=2.0, fill_value=[0]), {"paste_x": [0.5, 0.5, 1.5, 0.5]}, "paste_x"),
    "grid_mask": (dict(), {"tile": [10, 20, 0, 5]}, "tile"),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_a_bad_per_sample_argument_names_the_operator_and_the_sample(tables, name):
    kw, bad, words = BAD[name]
    rng = np.random.default_rng(11)
    x, batch = _batch(_images(rng, 4))
    arg_inputs = {k: [np.asarray(v, np.float32) for v in vals] for k, vals in bad.items()}
    with pytest.raises(OperatorError, match=words) as e:
        _op(name, **kw).run_gpu(batch, [x], arg_inputs)
    assert e.value.operator == name and e.value.sample_index == 2 and e.value.source == "img2.jpg"


def test_ragged_and_per_frame_argument_inputs_take_the_per_sample_rule():
    from stoker.operators.per_frame import FrameArray

    rng = np.random.default_rng(12)
    in_hw = _shapes(rng, 6)
    op = _op("rotate", fill_value=0)
    # () and (1,) samples mixed: valid, but not one NumPy array
    ragged = {"angle": [np.asarray(10.0), np.asarray([20.0]), np.asarray(30.0)] * 2}
    with pytest.raises(geometry_batch.PerSample):
        gw.rotate_plans(op, ragged, in_hw, False)
    got = geometry_batch.plan_rows(op, BatchContext(batch_size=6), 6, lambda: gw.rotate_plans(op, ragged, in_hw, False),
                                   lambda i: gw.rotate_plan(op, ragged, i, in_hw[i], False))
    _equal(got, _stack([gw.rotate_plan(op, ragged, i, in_hw[i], False) for i in range(6)]))
    framed = {"angle": [np.asarray([1.0, 2.0]).view(FrameArray)] * 6}
    with pytest.raises(geometry_batch.PerSample):
        gw.rotate_plans(op, framed, in_hw, False)


# --- transforms.* -------------------------------------------------------------------------

TRANSFORMS = [
    ("shear", dict(center=(128.0, 128.0)), {"shear": (2,)}),
    ("shear", dict(), {"angles": (2,), "center": (2,)}),
    ("shear", dict(center=[1.0, 2.0, 3.0]), {"shear": (6,)}),
    ("translation", dict(), {"offset": (2,)}),
    ("translation", dict(offset=[1.0, 2.0, 3.0]), {}),
    ("scale", dict(center=[1.5, -2.0]), {"scale": (2,)}),
    ("scale", dict(ndim=3), {"scale": (1,)}),
    ("scale", dict(), {"scale": (1,), "center": (2,)}),
    ("rotation", dict(center=[3.0, 4.0]), {"angle": ()}),
    ("rotation", dict(angle=30.0), {"center": (1,)}),
    ("crop", dict(to_start=[0.2, 0.3]), {"from_end": (2,)}),
    ("crop", dict(absolute=True), {"from_start": (3,), "from_end": (3,), "to_end": (1,)}),
]


def _transform_args(rng, per, n):
    out = {}
    for k, shape in per.items():
        lo, hi = (-60.0, 60.0) if k in ("angles", "angle") else (-3.0, 3.0)
        out[k] = [rng.uniform(lo, hi, shape).astype(np.float32) for _ in range(n)]
    return out


@pytest.mark.parametrize("with_input", [None, "forward", "reverse"])
@pytest.mark.parametrize("name,kw,per", TRANSFORMS, ids=[f"{t[0]}{i}" for i, t in enumerate(TRANSFORMS)])
def test_transforms_batch_path_matches_run_sample(name, kw, per, with_input):
    rng = np.random.default_rng(13)
    n = 40
    op = _op(f"transforms.{name}", "cpu", reverse_order=with_input == "reverse", **kw)
    arg_inputs = _transform_args(rng, per, n)
    inputs = []
    if with_input:
        d = op.own(op.sample_args(arg_inputs, 0)).shape[0]
        prev = [np.concatenate([np.eye(d) + rng.uniform(-.5, .5, (d, d)), rng.uniform(-3, 3, (d, 1))], 1)
                .astype(np.float32) for _ in range(n)]
        inputs = [TensorListCPU(prev, "")]
    (out,) = op.run_cpu(BatchContext(batch_size=n), inputs, arg_inputs)
    assert getattr(out, "_dense", None) is not None  # the batch path ran
    for i in range(n):
        want = op.run_sample(tuple(t.samples()[i] for t in inputs), op.sample_args(arg_inputs, i), None)
        got = out.samples()[i]
        assert got.dtype == want.dtype == np.float32
        np.testing.assert_array_equal(got, want)


def test_transforms_combine_batch_path_matches_run_sample():
    rng = np.random.default_rng(14)
    n = 30
    mats = [[np.concatenate([np.eye(2) + rng.uniform(-.5, .5, (2, 2)), rng.uniform(-3, 3, (2, 1))], 1)
             .astype(np.float32) for _ in range(n)] for _ in range(3)]
    for reverse in (False, True):
        op = _op("transforms.combine", "cpu", reverse_order=reverse)
        inputs = [TensorListCPU(m, "") for m in mats]
        (out,) = op.run_cpu(BatchContext(batch_size=n), inputs, {})
        assert getattr(out, "_dense", None) is not None
        for i in range(n):
            np.testing.assert_array_equal(out.samples()[i], op.run_sample(tuple(m[i] for m in mats), {}, None))


def test_transforms_bad_sample_still_fails_as_before():
    """The batch path leaves errors to the per-sample path: the same exception for the same sample."""
    op = _op("transforms.shear", "cpu")
    shear = [np.float32([0.1, 0.2])] * 3 + [np.float32([0.1, 0.2, 0.3])]  # sample 3: 3 values
    with pytest.raises(OperatorError, match="expected 2") as e:
        op.run_cpu(BatchContext(batch_size=4, sources=list("abcd")), [], {"shear": shear})
    assert e.value.source == "d"
    angles = [np.float32([10, 20])] * 3 + [np.float32([95, 0])]
    with pytest.raises(OperatorError, match="-90, 90"):
        op.run_cpu(BatchContext(batch_size=4), [], {"angles": angles})
