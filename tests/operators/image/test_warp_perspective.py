"""warp_perspective against DALI's CPU ``experimental.warp_perspective``: nearest neighbour exact, linear
within 1 level (DALI evaluates the matrix in float32, we in float64, and both use OpenCV's 1/32-pixel
fixed-point weights), float images within 1e-3."""


import cv2
import numpy as np
import pytest
from oracle import check, run_graph

from stoker.errors import StokerError  # noqa: E402

RNG = np.random.default_rng(8)
IMGS = [cv2.resize(RNG.integers(0, 256, (12, 16, 3)).astype(np.uint8), (61, 47), interpolation=cv2.INTER_CUBIC),
        RNG.integers(0, 256, (30, 40, 3), np.uint8)]
M = [0.9, 0.1, 3.5, -0.1, 1.1, -2.25, 0.001, -0.002, 1.0]
CASES = [dict(matrix=M), dict(matrix=M, fill_value=[17.0]), dict(matrix=M, inverse_map=False, size=[50, 70]),
         dict(matrix=M, border_mode="replicate"), dict(matrix=M, border_mode="wrap", fill_value=[1.0, 2.0, 3.0]),
         dict(matrix=M, pixel_origin="center", border_mode="reflect_101"),
         dict(matrix=[2, 0, 0, 0, 2, 0, 0, 0, 1], border_mode="reflect")]


def _build(case, interp):
    return lambda fn, t, x: fn.experimental.warp_perspective(x, interp_type=getattr(t, interp), **case)


@pytest.mark.oracle
@pytest.mark.parametrize("case", CASES, ids=str)
def test_matches_dali(case):
    check(_build(case, "INTERP_NN"), IMGS, layouts=["HWC"], what=str(case))
    check(_build(case, "INTERP_LINEAR"), IMGS, layouts=["HWC"], tol=1.0, what=str(case))


@pytest.mark.oracle
def test_matrix_input_gray_and_float_match_dali():
    mats = [np.array(M, np.float32).reshape(3, 3),
            np.array([[1.2, 0.3, -4], [0.1, 0.8, 2], [0.002, 0.001, 1]], np.float32)]
    check(lambda fn, t, x, m: fn.experimental.warp_perspective(x, m, size=[40, 30]), IMGS, mats,
          layouts=["HWC", None], tol=1.0)
    gray = [np.ascontiguousarray(i[..., 0]) for i in IMGS]
    check(lambda fn, t, x: fn.experimental.warp_perspective(x, matrix=M, interp_type=t.INTERP_NN), gray,
          layouts=["HW"])
    flt = [i.astype(np.float32) / 255 for i in IMGS]
    check(lambda fn, t, x: fn.experimental.warp_perspective(x, matrix=M, fill_value=[0.5]), flt,
          layouts=["HWC"], tol=1e-3)


def test_against_an_independent_projection():
    # A pure translation by whole pixels is an exact shift; the identity returns the input.
    img = IMGS[1]
    (out, lay), = run_graph("stoker", lambda fn, t, x: fn.warp_perspective(
        x, matrix=[1, 0, 3, 0, 1, -2, 0, 0, 1], interp_type=t.INTERP_NN, fill_value=[0]), [img], layouts=["HWC"])
    assert lay == "HWC"
    np.testing.assert_array_equal(out[0][2:, :-3], img[:-2, 3:])
    assert np.all(out[0][:2] == 0) and np.all(out[0][:, -3:] == 0)
    (same, _), = run_graph("stoker", lambda fn, t, x: fn.warp_perspective(x, matrix=np.eye(3).ravel().tolist()),
                           [img])
    np.testing.assert_array_equal(same[0], img)
    # a projective point: output centre (x + 0.5, y + 0.5) samples M @ (x + 0.5, y + 0.5, 1) projected
    h = np.array(M).reshape(3, 3)
    (o, _), = run_graph("stoker", lambda fn, t, x: fn.warp_perspective(x, matrix=M, interp_type=t.INTERP_NN),
                        [img], layouts=["HWC"])
    for y, x in [(5, 7), (20, 30), (12, 3)]:
        p = h @ [x + 0.5, y + 0.5, 1.0]
        sx, sy = p[0] / p[2], p[1] / p[2]
        if 0 <= sx < 40 and 0 <= sy < 30 and abs(sx % 1 - 0.5) > 0.01 and abs(sy % 1 - 0.5) > 0.01:
            np.testing.assert_array_equal(o[0][y, x], img[int(sy), int(sx)])


def test_bad_arguments():
    for kw, arg in [(dict(matrix=[1, 0, 0, 0, 1, 0]), "matrix"), (dict(matrix=M, border_mode="mirror"), "border_mode"),
                    (dict(matrix=M, pixel_origin="middle"), "pixel_origin"), (dict(matrix=M, size=[3]), "size")]:
        with pytest.raises(StokerError, match=arg):
            run_graph("stoker", lambda fn, t, x, kw=kw: fn.warp_perspective(x, **kw), IMGS)
    with pytest.raises(StokerError, match="matrix"):
        run_graph("stoker", lambda fn, t, x: fn.warp_perspective(x), IMGS)
    with pytest.raises(StokerError, match="not invertible"):
        run_graph("stoker", lambda fn, t, x: fn.warp_perspective(x, matrix=[0] * 9, inverse_map=False), IMGS)


def test_empty_sources_and_outputs():
    """An empty output size gives an empty image with the input's channels; an empty source leaves
    every output pixel outside it, so all take the fill value (rounded and saturated like OpenCV's
    border value), whatever the border mode. The other samples are warped as usual."""
    img = IMGS[0]
    batch = [np.zeros((0, 9, 3), np.uint8), img]
    for border in ("constant", "replicate"):
        (o, _), = run_graph("stoker", lambda fn, t, x, b=border: fn.warp_perspective(
            x, matrix=M, size=[4, 5], fill_value=[300.7], border_mode=b), batch, layouts=["HWC"])
        assert o[0].shape == (4, 5, 3) and o[0].dtype == np.uint8 and (o[0] == 255).all()
        (want, _), = run_graph("stoker", lambda fn, t, x, b=border: fn.warp_perspective(
            x, matrix=M, size=[4, 5], fill_value=[300.7], border_mode=b), [img], layouts=["HWC"])
        np.testing.assert_array_equal(o[1], want[0])
    (o, _), = run_graph("stoker", lambda fn, t, x: fn.warp_perspective(x, matrix=M, size=[0, 6]), [img, img],
                        layouts=["HWC"])
    assert [a.shape for a in o] == [(0, 6, img.shape[2])] * 2
    gray = [np.zeros((5, 0), np.float32), np.ones((3, 3), np.float32)]
    (o, _), = run_graph("stoker", lambda fn, t, x: fn.warp_perspective(x, matrix=M, size=[2, 2], fill_value=[-1.5]),
                        gray, layouts=["HW"])
    np.testing.assert_array_equal(o[0], np.full((2, 2), -1.5, np.float32))


@pytest.mark.oracle
def test_planar_and_sequences_match_dali():
    chw = [np.ascontiguousarray(i.transpose(2, 0, 1)) for i in IMGS]
    check(lambda fn, t, x: fn.experimental.warp_perspective(x, matrix=M, interp_type=t.INTERP_NN), chw,
          layouts=["CHW"])
    seq = [np.stack([i, i[::-1]]) for i in IMGS]
    check(lambda fn, t, x: fn.experimental.warp_perspective(x, matrix=M, interp_type=t.INTERP_NN), seq,
          layouts=["FHWC"])
