"""Per-frame arguments of ``transforms.*``, ``coord_transform`` and ``rotate``'s ``axis``, against
DALI (issue 19).

What DALI does, and these tests pin down:

* transforms.*: a per-frame argument (``fn.per_frame``) makes the output a sequence of matrices,
  (F, ndim, ndim + 1) with layout ``F**``; F is the per-frame arguments' frame count (an
  argument with one value applies to every frame; a sample with one value gives one frame). A
  constant argument applies to every frame. An input transform that is a sequence (``F**``) is
  composed frame by frame (the arguments then hold 1 or F values); a plain input applies to every
  frame. ``transforms.combine`` takes sequences too (equal frame counts; plain inputs broadcast).
  Any argument input whose layout starts with ``F`` is per-frame in DALI, so such a sequence of
  matrices feeds ``warp_affine``'s ``matrix`` or ``coord_transform``'s ``MT`` directly.
* coord_transform: points whose layout starts with ``F`` are transformed frame by frame with the
  frame's M / T / MT; points that are not a sequence are transformed by every frame's matrix,
  giving (F, ..., out_dim) with layout ``F`` + the input's (none without one).
* rotate: ``axis`` per frame rotates volume sequences (FDHWC) frame by frame onto one canvas.

Matrices agree with DALI within float32 rounding (sin/cos differ by an ulp); rotated volumes
within the trilinear tolerance of tests/operators/image/test_volumes.py.
"""

from __future__ import annotations

import numpy as np
import pytest
from oracle import assert_same, run_graph

from stoker.errors import StokerError

F32 = 1e-6  # float32 rounding of the matrices' terms (values of order 1 to 10)
VOL_TOL = (0.01, 1)  # trilinear: mean and max difference (see test_volumes.py)


def _f(*rows):
    """A batch of float32 arrays, one per sample."""
    return [np.asarray(r, np.float32) for r in rows]


# per-frame values per sample: 3 frames, then 1 (one frame in the output), then 2
ANGLES = _f([10, 20, 30], [45], [-60, 5])
VEC2 = _f([[1, 2], [3, 4], [5, 6]], [[7, 8]], [[-1, 0.5], [2, -3]])
SCALE2 = _f([[2, 3], [0.5, 1], [1.5, -2]], [[4, 4]], [[1, 2], [3, 0.25]])
AXES = _f([[0, 0, 1], [0, 1, 0], [1, 1, 1]], [[1, 0, 0]], [[0.2, 0.4, 1], [1, -1, 0.5]])
SHEAR2 = _f([[0.1, 0.2], [0, -0.3], [0.5, 0.5]], [[1, 2]], [[0.25, 0], [-0.1, 0.4]])
SHEAR_ANGLES = _f([[10, 20], [0, 30], [5, -5]], [[1, 2]], [[45, -30], [12, 0]])
BOX_LO = _f([[0.1, 0.2], [0.3, 0.4], [0, 0]], [[0.5, 0.25]], [[-1, 0], [0.2, 0.1]])
BOX_HI = _f([[1, 2], [3, 0.4 + 1], [2, 2]], [[1.5, 1.25]], [[1, 1], [0.9, 3]])
POINTS = [np.arange(3 * 4 * 2, dtype=np.float32).reshape(3, 4, 2) - 5,
          np.arange(1 * 5 * 2, dtype=np.float32).reshape(1, 5, 2),
          np.linspace(-3, 3, 2 * 3 * 2, dtype=np.float32).reshape(2, 3, 2)]
MATS = _f([[[1, 0], [0, 1]], [[2, 0], [0, 2]], [[0, 1], [1, 0]]], [[[3, 0.5], [0, 3]]],
          [[[0.5, -1], [1, 0.5]], [[1, 1], [0, 1]]])
MT = [np.concatenate([m, v[:, :, None]], 2) for m, v in zip(MATS, VEC2)]
RNG = np.random.default_rng(7)
VOLS = [RNG.integers(0, 256, (3, 6, 8, 10, 1), np.uint8), RNG.integers(0, 256, (1, 5, 7, 7, 2), np.uint8),
        RNG.integers(0, 256, (2, 7, 5, 6, 1), np.uint8)]


def _pf(fn, a):
    return fn.per_frame(a)


# (operator, argument) -> (graph, batches, input layouts, tolerance): the argument per frame,
# the others constant or absent
CASES = {
    ("transforms.translation", "offset"): (lambda fn, t, a: fn.transforms.translation(offset=_pf(fn, a)), [VEC2]),
    ("transforms.scale", "scale"): (lambda fn, t, a: fn.transforms.scale(scale=_pf(fn, a), center=[1, 2]),
                                    [SCALE2]),
    ("transforms.scale", "center"): (lambda fn, t, a: fn.transforms.scale(scale=[2, 3], center=_pf(fn, a)), [VEC2]),
    ("transforms.rotation", "angle"): (lambda fn, t, a: fn.transforms.rotation(angle=_pf(fn, a)), [ANGLES]),
    ("transforms.rotation", "axis"): (lambda fn, t, a: fn.transforms.rotation(angle=30.0, axis=_pf(fn, a)), [AXES]),
    ("transforms.rotation", "center"): (lambda fn, t, a: fn.transforms.rotation(angle=25.0, center=_pf(fn, a)),
                                        [VEC2]),
    ("transforms.shear", "shear"): (lambda fn, t, a: fn.transforms.shear(shear=_pf(fn, a), center=[1, 1]), [SHEAR2]),
    ("transforms.shear", "angles"): (lambda fn, t, a: fn.transforms.shear(angles=_pf(fn, a)), [SHEAR_ANGLES]),
    ("transforms.shear", "center"): (lambda fn, t, a: fn.transforms.shear(shear=[0.1, 0.2], center=_pf(fn, a)),
                                     [VEC2]),
    ("transforms.crop", "from_start"): (lambda fn, t, a: fn.transforms.crop(from_start=_pf(fn, a), to_end=[2, 4]),
                                        [BOX_LO]),
    ("transforms.crop", "from_end"): (lambda fn, t, a: fn.transforms.crop(from_end=_pf(fn, a)), [BOX_HI]),
    ("transforms.crop", "to_start"): (lambda fn, t, a: fn.transforms.crop(to_start=_pf(fn, a), from_end=[4, 4]),
                                      [BOX_LO]),
    ("transforms.crop", "to_end"): (lambda fn, t, a: fn.transforms.crop(to_end=_pf(fn, a), absolute=True), [BOX_HI]),
    ("coord_transform", "M"): (lambda fn, t, x, a: fn.coord_transform(x, M=_pf(fn, a)), [POINTS, MATS], "F**"),
    ("coord_transform", "T"): (lambda fn, t, x, a: fn.coord_transform(x, T=_pf(fn, a), M=[1, 2, 3, 4]),
                               [POINTS, VEC2], "F**"),
    ("coord_transform", "MT"): (lambda fn, t, x, a: fn.coord_transform(x, MT=_pf(fn, a)), [POINTS, MT], "F**"),
    ("rotate", "axis"): (lambda fn, t, x, a: fn.rotate(x, angle=30.0, axis=_pf(fn, a), fill_value=0),
                         [VOLS, AXES], "FDHWC", VOL_TOL),
}


def _check(build, batches, layout=None, tol=F32, what=""):
    """stoker against DALI; returns stoker's outputs (as run_graph gives them)."""
    layouts = [layout] + [None] * (len(batches) - 1)
    ours = run_graph("stoker", build, *batches, layouts=layouts)
    theirs = run_graph("dali", build, *batches, layouts=layouts)
    assert_same(ours, theirs, tol, what)
    return ours


@pytest.mark.oracle
@pytest.mark.parametrize("key", list(CASES), ids=[f"{op}-{arg}" for op, arg in CASES])
def test_per_frame_argument_matches_dali(key):
    build, batches, *rest = CASES[key]
    layout = rest[0] if rest else None
    tol = rest[1] if len(rest) > 1 else F32
    (samples, lay), = _check(build, batches, layout, tol, str(key))
    frames = [len(v) for v in batches[-1]]  # one output frame per per-frame value
    assert [s.shape[0] for s in samples] == frames
    assert lay == (layout or "F**")


@pytest.mark.oracle
def test_every_per_frame_argument_dali_has_is_covered():
    """The cases above cover each argument these operators take per frame in DALI."""
    backend = pytest.importorskip("nvidia.dali.backend")
    from oracle import libs, lookup

    dali_fn = libs("dali")[0]
    theirs = set()
    for op in {op for op, _ in CASES}:
        d = backend.GetSchema(lookup(dali_fn, op)._schema_name)
        theirs |= {(op, a) for a in d.GetArgumentNames()
                   if not a.startswith("_") and not d.IsDeprecatedArg(a) and d.ArgSupportsPerFrameInput(a)}
    assert theirs - {("rotate", "angle")} == set(CASES)  # (rotate's angle: tests/operators/test_per_frame.py)


# --- several arguments, and transforms chained ----------------------------------------------

MIXED = {
    # per-frame and constant arguments
    "angle_pf_center_const": (lambda fn, t, a: fn.transforms.rotation(angle=_pf(fn, a), center=[1, 2]), [ANGLES]),
    # two per-frame arguments; sample 1 has one value for all frames in the second
    "angle_pf_center_pf": (lambda fn, t, a, c: fn.transforms.rotation(angle=_pf(fn, a), center=_pf(fn, c)),
                           [ANGLES, _f([[1, 2], [3, 4], [5, 6]], [[7, 8]], [[1, 1]])]),
    # (center holds the frame count: DALI takes it from the first per-frame argument by name)
    "scale_center_pf_3d": (lambda fn, t, a, c: fn.transforms.scale(scale=_pf(fn, a), center=_pf(fn, c), ndim=3),
                           [_f([1, 2, 3], [4], [0.5]),
                            _f([[1, 2, 3], [0, 1, 0], [2, 2, 2]], [[0, 0, 1]], [[1, 1, 1], [2, 0, 2]])]),
    "crop_all_four": (lambda fn, t, a, b: fn.transforms.crop(from_start=_pf(fn, a), from_end=_pf(fn, b),
                                                             to_start=_pf(fn, a), to_end=[8, 9]), [BOX_LO, BOX_HI]),
    # a plain input matrix applies to every frame (either order)
    "plain_input": (lambda fn, t, x, a: fn.transforms.rotation(x, angle=_pf(fn, a)),
                    [_f([[1, 0, 1], [0, 1, 2]], [[2, 0, 0], [0, 2, 0]], [[1, 0.5, 0], [0, 1, -1]]), ANGLES]),
    "plain_input_reversed": (lambda fn, t, x, a: fn.transforms.translation(x, offset=_pf(fn, a), reverse_order=True),
                             [_f([[1, 0, 1], [0, 1, 2]], [[2, 0, 0], [0, 2, 0]], [[1, 0.5, 0], [0, 1, -1]]), VEC2]),
    # a sequence input (F**) composed frame by frame with constant or per-frame arguments
    "seq_input_const": (lambda fn, t, a: fn.transforms.scale(fn.transforms.rotation(angle=_pf(fn, a)), scale=[2, 3]),
                        [ANGLES]),
    "seq_input_pf": (lambda fn, t, a, b: fn.transforms.translation(fn.transforms.rotation(angle=_pf(fn, a)),
                                                                   offset=_pf(fn, b)),
                     [ANGLES, _f([[1, 2], [3, 4], [5, 6]], [[7, 8]], [[1, 1]])]),
    # (3D shear per frame: DALI wants a 3x2 matrix per frame)
    "seq_input_shear_3d": (lambda fn, t, a, b: fn.transforms.shear(fn.transforms.rotation(angle=30.0, axis=_pf(fn, a)),
                                                                   shear=_pf(fn, b)),
                           [AXES, _f([[[0.1, 0.1]] * 3], [[[0.2, 0], [0, 0.1], [0, 0]]],
                                     [[[0, 0.3], [0, 0], [0.1, 0]]])]),
    "combine_seq_plain": (lambda fn, t, a: fn.transforms.combine(fn.transforms.rotation(angle=_pf(fn, a)),
                                                                 fn.transforms.translation(offset=[1, 2])), [ANGLES]),
    "combine_seq_seq": (lambda fn, t, a, b: fn.transforms.combine(fn.transforms.translation(offset=[3, 4]),
                                                                  fn.transforms.rotation(angle=_pf(fn, a)),
                                                                  fn.transforms.scale(scale=_pf(fn, b)),
                                                                  reverse_order=True), [ANGLES, SCALE2]),
}


@pytest.mark.oracle
@pytest.mark.parametrize("name", list(MIXED))
def test_mixed_and_chained_transforms_match_dali(name):
    build, batches = MIXED[name]
    (samples, lay), = _check(build, batches, what=name)
    assert lay == "F**" and [s.shape[0] for s in samples] == [3, 1, 2]


COORD = {
    # M per frame, T constant
    "M_pf_T_const": (lambda fn, t, x, a: fn.coord_transform(x, M=_pf(fn, a), T=[1, -2]), [POINTS, MATS], "F**"),
    # scalar M per frame; T with one value for all frames in sample 1
    "M_scalar_T_pf": (lambda fn, t, x, a, b: fn.coord_transform(x, M=_pf(fn, a), T=_pf(fn, b)),
                      [POINTS, _f([1, 2, 3], [4], [0.5, -1]), _f([[1, 1], [2, 2], [3, 3]], [[5, 5]], [[0, 1]])],
                      "F**"),
    "named_layout": (lambda fn, t, x, a: fn.coord_transform(x, M=_pf(fn, a)), [POINTS, MATS], "FXY"),
    # points that are not a sequence: every frame's matrix transforms all of them
    "points_not_sequence": (lambda fn, t, x, a: fn.coord_transform(x, MT=_pf(fn, a)), [POINTS, MT], None),
    "points_not_sequence_layout": (lambda fn, t, x, a: fn.coord_transform(x, M=_pf(fn, a)), [POINTS, MATS], "XYZ"),
    "int_points": (lambda fn, t, x, a: fn.coord_transform(x, M=_pf(fn, a), dtype=t.INT32),
                   [[p.astype(np.int32) for p in POINTS], [m * 1.37 for m in MATS]], "F**"),
    # a sequence of matrices from the transforms, as an argument input without fn.per_frame
    "matrices_from_transforms": (lambda fn, t, x, a: fn.coord_transform(
        x, MT=fn.transforms.rotation(angle=_pf(fn, a), center=[1, 1])), [POINTS, ANGLES], "F**"),
}


@pytest.mark.oracle
@pytest.mark.parametrize("name", list(COORD))
def test_coord_transform_per_frame_matches_dali(name):
    build, batches, layout = COORD[name]
    _check(build, batches, layout, what=name)


@pytest.mark.oracle
def test_warp_affine_takes_a_sequence_of_matrices_from_the_transforms():
    seqs = [RNG.integers(0, 256, (n, 12, 14, 3), np.uint8) for n in (3, 1, 2)]

    def build(fn, t, x, a):
        m = fn.transforms.combine(fn.transforms.rotation(angle=_pf(fn, a), center=[6, 7]),
                                  fn.transforms.translation(offset=[1, -2]))
        return fn.warp_affine(x, matrix=m, fill_value=0)

    _check(build, [seqs, ANGLES], "FHWC", tol=1)


ROTATE = {
    "axis_keep_size": (lambda fn, t, x, a: fn.rotate(x, angle=40.0, axis=_pf(fn, a), keep_size=True, fill_value=0),
                       [VOLS, AXES]),
    "axis_and_angle": (lambda fn, t, x, a, b: fn.rotate(x, angle=_pf(fn, b), axis=_pf(fn, a), fill_value=0),
                       [VOLS, AXES, _f([10, 50, 80], [20], [-35, 65])]),
    # one canvas for frames rotated about one axis by different angles
    "angle_pf_axis_const": (lambda fn, t, x, b: fn.rotate(x, angle=_pf(fn, b), axis=[0.2, 0.4, 1], fill_value=0),
                            [VOLS, _f([10, 50, 80], [20], [-35, 65])]),
    "no_per_frame": (lambda fn, t, x: fn.rotate(x, angle=30.0, axis=[0.2, 0.4, 1], fill_value=0), [VOLS]),
}


@pytest.mark.oracle
@pytest.mark.parametrize("name", list(ROTATE))
def test_rotate_volume_sequences_match_dali(name):
    build, batches = ROTATE[name]
    (samples, lay), = _check(build, batches, "FDHWC", VOL_TOL, name)
    assert lay == "FDHWC" and [s.shape[0] for s in samples] == [3, 1, 2]


# --- errors ---------------------------------------------------------------------------------

ERRORS = {
    # two per-frame arguments of different frame counts
    "args_differ": (lambda fn, t, a, c: fn.transforms.rotation(angle=_pf(fn, a), center=_pf(fn, c)),
                    [ANGLES, _f([[1, 2], [3, 4]], [[7, 8]], [[1, 1]])], None,
                    "argument 'center' has 2 per-frame values, but argument 'angle' has 3"),
    # a per-frame argument against a sequence input of another frame count
    "input_differs": (lambda fn, t, a, b: fn.transforms.rotation(fn.transforms.rotation(angle=_pf(fn, a)),
                                                                 angle=_pf(fn, b)),
                      [ANGLES, _f([1, 2], [3], [4, 5])], None, "argument 'angle' has 2 per-frame values, but the "
                                                                 "sequence has 3 frames"),
    "combine_differs": (lambda fn, t, a, b: fn.transforms.combine(fn.transforms.rotation(angle=_pf(fn, a)),
                                                                  fn.transforms.rotation(angle=_pf(fn, b))),
                        [ANGLES, _f([1, 2], [3], [4, 5])], None, "input 0 has 3 frames, but input 1 has 2"),
    "no_frames": (lambda fn, t, a: fn.transforms.translation(offset=_pf(fn, a)),
                  [[np.zeros((0, 2), np.float32)] + VEC2[1:]], None, "argument 'offset' has no per-frame values"),
    "coord_transform": (lambda fn, t, x, a: fn.coord_transform(x, M=_pf(fn, a)), [POINTS, [m[:2] for m in MATS]],
                        "F**", "argument 'M' has 2 per-frame values, but the sequence has 3 frames"),
    "rotate_axis": (lambda fn, t, x, a: fn.rotate(x, angle=30.0, axis=_pf(fn, a)), [VOLS, [a[:2] for a in AXES]],
                    "FDHWC", "argument 'axis' has 2 per-frame values, but the sequence has 3 frames"),
}


@pytest.mark.parametrize("name", list(ERRORS))
def test_frame_count_mismatch_names_operator_and_argument(name):
    build, batches, layout, match = ERRORS[name]
    layouts = [layout] + [None] * (len(batches) - 1)
    with pytest.raises(StokerError, match=match) as err:
        run_graph("stoker", build, *batches, layouts=layouts)
    op = {"combine_differs": "transforms.combine", "no_frames": "transforms.translation",
          "coord_transform": "coord_transform", "rotate_axis": "rotate"}.get(name, "transforms.rotation")
    assert f"[{op}]" in str(err.value)


@pytest.mark.oracle
@pytest.mark.parametrize("name", list(ERRORS))
def test_dali_refuses_the_same(name):
    build, batches, layout, _ = ERRORS[name]
    layouts = [layout] + [None] * (len(batches) - 1)
    with pytest.raises(RuntimeError):
        run_graph("dali", build, *batches, layouts=layouts)


def test_one_value_for_all_frames_in_any_argument():
    """Beyond DALI: it takes the frame count from the first per-frame argument by name, so
    angle=[a] with center=[c0, c1, c2] fails there; stoker takes the largest count and applies
    the single angle to every frame (what the other order gives in DALI too)."""
    one_angle = _f([30], [45], [60])
    centers = _f([[1, 2], [3, 4], [5, 6]], [[7, 8]], [[1, 1], [2, 2]])
    (ours, lay), = run_graph("stoker", lambda fn, t, a, c: fn.transforms.rotation(angle=_pf(fn, a),
                                                                                  center=_pf(fn, c)),
                             one_angle, centers)
    (each, _), = run_graph("stoker", lambda fn, t, a, c: fn.transforms.rotation(angle=_pf(fn, a), center=_pf(fn, c)),
                           [np.repeat(a, len(c)) for a, c in zip(one_angle, centers)], centers)
    assert lay == "F**"
    for a, b in zip(ours, each):
        np.testing.assert_array_equal(a, b)
