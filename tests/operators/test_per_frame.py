"""fn.per_frame and per-frame argument inputs of the sequence operators, against DALI.

Sequences are FHWC batches from external_source (different frame counts and
sizes per sample); per-frame values come from a second external_source
through fn.per_frame, one value per frame or a single one for all frames.
"""

from __future__ import annotations

import numpy as np
import pytest
from oracle import assert_same, run_graph

from stoker.errors import StokerError

RNG = np.random.default_rng(17)
SEQS = [RNG.integers(0, 256, (3, 20, 30, 3), np.uint8), RNG.integers(0, 256, (2, 16, 17, 3), np.uint8),
        RNG.integers(0, 256, (1, 9, 12, 3), np.uint8)]


def _vals(per_seq):
    """One float32 array (frames,) per sequence."""
    return [np.asarray(v, np.float32) for v in per_seq]


def _run(lib, build, values, seqs=SEQS):
    return run_graph(lib, lambda fn, types, x, a: build(fn, types, x, fn.per_frame(a)), seqs, values,
                     layouts=["FHWC", None])


def _check(build, values, tol=0.0, what="", seqs=SEQS):
    ours = _run("stoker", build, values, seqs)
    theirs = _run("dali", build, values, seqs)
    assert_same(ours, theirs, tol, what)
    return ours


# (operator call, per-frame values per sequence, tolerance): each frame gets its own value; a
# single value applies to all frames of its sequence.
CASES = {
    "brightness": (lambda fn, t, x, a: fn.brightness(x, brightness=a), [[0.5, 1.0, 1.7], [2.0, 0.2], [1.3]], 1),
    "brightness_shift": (lambda fn, t, x, a: fn.brightness(x, brightness_shift=a),
                         [[0.1, -0.2, 0.0], [0.3], [-0.1]], 1),
    "contrast": (lambda fn, t, x, a: fn.contrast(x, contrast=a), [[0.5, 1.0, 1.7], [2.0, 0.2], [0.0]], 1),
    "brightness_contrast": (lambda fn, t, x, a: fn.brightness_contrast(x, contrast=a, brightness=1.1),
                            [[0.5, 1.0, 1.7], [2.0, 0.2], [1.3]], 1),
    "hue": (lambda fn, t, x, a: fn.hue(x, hue=a), [[10, 90, -45], [180, 0], [30]], 1),
    "saturation": (lambda fn, t, x, a: fn.saturation(x, saturation=a), [[0.0, 0.5, 2.0], [1.5], [0.3]], 1),
    "hsv": (lambda fn, t, x, a: fn.hsv(x, value=a, hue=20.0), [[0.5, 1.0, 1.5], [0.8, 1.2], [1.0]], 1),
    "color_twist": (lambda fn, t, x, a: fn.color_twist(x, saturation=a, contrast=1.2),
                    [[0.0, 0.5, 2.0], [1.5, 1.0], [0.3]], 1),
    "gaussian_blur": (lambda fn, t, x, a: fn.gaussian_blur(x, sigma=a), [[0.7, 1.5, 3.0], [2.0, 1.0], [1.2]], 1),
    "laplacian": (lambda fn, t, x, a: fn.laplacian(x, scale=a, dtype=t.FLOAT), [[0.5, 1.0, 2.0], [1.5, 1], [3]],
                  1e-3),
    # two per-sample operators in a row run fused (stoker.pipeline.fusion): per-frame values there too
    "fused_chain": (lambda fn, t, x, a: fn.saturation(fn.brightness(x, brightness=a), saturation=a),
                    [[0.5, 1.0, 1.7], [2.0, 0.2], [1.3]], 1),
    "rotate_keep": (lambda fn, t, x, a: fn.rotate(x, angle=a, keep_size=True, fill_value=0),
                    [[10, -35, 90], [45, 5], [180]], 1),
    "rotate_grow": (lambda fn, t, x, a: fn.rotate(x, angle=a, fill_value=0), [[10, 20, 30], [5, 45], [60]], 1),
    "rotate_grow_mixed": (lambda fn, t, x, a: fn.rotate(x, angle=a, fill_value=0), [[80, 10, 30], [45], [5]], 1),
}


@pytest.mark.oracle
@pytest.mark.parametrize("name", list(CASES))
def test_per_frame_argument_matches_dali(name):
    build, values, tol = CASES[name]
    ours = _check(build, _vals(values), tol, name)
    # sequences stay sequences (frame counts kept); test_per_frame_values_are_applied_frame_by_frame
    # checks each frame against its own value independently of DALI
    (samples, layout), = ours
    assert layout == "FHWC" and [s.shape[0] for s in samples] == [3, 2, 1]


@pytest.mark.oracle
@pytest.mark.parametrize("hw", [(16, 17), (17, 16), (20, 30), (15, 15), (15, 16), (31, 20)])
def test_rotated_sequence_canvas_matches_dali(hw):
    """The canvas of frames rotated by different angles: the largest box, at the parity the majority
    of frames asks for (the frames nearer a quarter turn swap H and W)."""
    angle_sets = [[5, 45], [80, 10], [10, 20, 30], [45], [30, 60], [0, 90], [0, 1], [170, 100, 20],
                  [10, 80, 85], [10, 20, 80, 85], [100, 10, 20, 30, 80], [46, 44, 44], [46, 46, 44]]
    seqs = [np.zeros((len(a), *hw, 1), np.uint8) for a in angle_sets]
    build = CASES["rotate_grow"][0]
    ours = [s.shape for s in _run("stoker", build, _vals(angle_sets), seqs)[0][0]]
    theirs = [s.shape for s in _run("dali", build, _vals(angle_sets), seqs)[0][0]]
    assert ours == theirs


@pytest.mark.oracle
def test_warp_affine_per_frame_matrices_match_dali():
    mats = [np.stack([np.float32([[1, 0.1 * f, 2], [0.05, 1, -1.5 * f]]) for f in range(s.shape[0])]) for s in SEQS]
    _check(lambda fn, t, x, a: fn.warp_affine(x, matrix=a, fill_value=0), mats, 1, "warp_affine")


@pytest.mark.oracle
def test_warp_perspective_per_frame_matrices_match_dali():
    mats = [np.stack([np.float32([[1, 0.05 * f, 1], [0.02, 1, -1.0 * f], [0.001 * f, 0, 1]])
                      for f in range(s.shape[0])]) for s in SEQS]

    def build(fn, t, x, a):
        # DALI 2.4 has it as fn.experimental.warp_perspective only; stoker has both names
        op = fn.warp_perspective if hasattr(fn, "warp_perspective") else fn.experimental.warp_perspective
        return op(x, matrix=a, fill_value=0)

    _check(build, mats, 1, "warp_perspective")


@pytest.mark.oracle
def test_sequences_without_per_frame_arguments_match_dali():
    """rotate and warp_affine take FHWC sequences frame by frame with one value for all frames."""
    from oracle import check

    check(lambda fn, t, x: fn.rotate(x, angle=25.0, fill_value=0), SEQS, layouts=["FHWC"], tol=1, what="rotate")
    check(lambda fn, t, x: fn.warp_affine(x, matrix=[1, 0.2, 1, 0, 1, 2], fill_value=0), SEQS, layouts=["FHWC"],
          tol=1, what="warp_affine")


def test_per_frame_values_are_applied_frame_by_frame():
    """Independent reference: brightness per frame equals brightness of each frame on its own."""
    vals = _vals([[0.5, 1.0, 1.5], [2.0, 0.25], [0.75]])
    (samples, _), = _run("stoker", lambda fn, t, x, a: fn.brightness(x, brightness=a), vals)
    for seq, out, v in zip(SEQS, samples, vals):
        for f in range(seq.shape[0]):
            want = np.clip(np.floor(seq[f].astype(np.float32) * v[f if v.size > 1 else 0] + 0.5), 0, 255)
            np.testing.assert_array_equal(out[f], want.astype(np.uint8))


@pytest.mark.oracle
@pytest.mark.parametrize("layout,replace", [(None, False), ("X", True), ("F", False)])
def test_per_frame_layout_matches_dali(layout, replace):
    vals = _vals([[1, 2, 3], [4, 5], [6]])

    def build(fn, t, a):
        return fn.per_frame(a, replace=replace)

    from oracle import check

    check(build, vals, layouts=[layout], what=f"{layout} {replace}")


def test_per_frame_refuses_a_non_frame_layout():
    vals = _vals([[1, 2, 3], [4, 5], [6]])
    with pytest.raises(StokerError, match="replace"):
        run_graph("stoker", lambda fn, t, a: fn.per_frame(a), vals, layouts=["X"])


@pytest.mark.parametrize("values,match", [
    (_vals([[1, 2], [1, 1], [1]]), "2 per-frame values, but the sequence has 3 frames"),
])
def test_frame_count_mismatch_names_the_argument(values, match):
    with pytest.raises(StokerError, match=match) as e:
        _run("stoker", lambda fn, t, x, a: fn.brightness(x, brightness=a), values)
    assert "brightness" in str(e.value)


def test_per_frame_argument_needs_a_sequence():
    imgs = [s[0] for s in SEQS]
    with pytest.raises(StokerError, match="not a sequence"):
        run_graph("stoker", lambda fn, t, x, a: fn.brightness(x, brightness=fn.per_frame(a)), imgs,
                  _vals([[1, 2, 3], [4, 5], [6]]), layouts=["HWC", None])


def test_argument_without_per_frame_support_is_refused():
    """crop's positions are not per frame in DALI either: the frame values are refused."""
    with pytest.raises(StokerError, match="crop_pos_x"):
        run_graph("stoker", lambda fn, t, x, a: fn.crop(x, crop_pos_x=fn.per_frame(a), crop=(5, 5)), SEQS,
                  _vals([[0.1, 0.2, 0.3], [0.4, 0.5], [0.6]]), layouts=["FHWC", None])


def test_per_frame_argument_of_an_operator_that_has_other_per_frame_ones_is_refused():
    """rotate takes angle per frame, but its size only per sample (as in DALI)."""
    sizes = [np.full((s.shape[0], 2), 20, np.float32) for s in SEQS]
    with pytest.raises(StokerError, match="argument 'size' does not take per-frame values"):
        run_graph("stoker", lambda fn, t, x, a: fn.rotate(x, angle=10.0, size=fn.per_frame(a)), SEQS, sizes,
                  layouts=["FHWC", None])
