"""water and sphere against DALI's CPU operators (nearest neighbour exact, linear within 1 level: OpenCV's
1/32-pixel weights); jitter (GPU-only in DALI) by its properties."""


import cv2
import numpy as np
import pytest
from oracle import check, run_graph

from stoker.errors import StokerError  # noqa: E402

RNG = np.random.default_rng(3)
SIZES = [(61, 83), (70, 45), (33, 34), (50, 51), (2, 3)]
IMGS = [cv2.resize(RNG.integers(0, 256, (8, 9, 3)).astype(np.uint8), (w, h), interpolation=cv2.INTER_CUBIC)
        for h, w in SIZES]
WATER = [dict(), dict(ampl_x=5.0, ampl_y=3.0, freq_x=0.1, freq_y=0.2, phase_x=0.3, phase_y=0.4, fill_value=200.0),
         dict(ampl_x=-2.5, ampl_y=7.0, freq_x=0.5, freq_y=0.03, phase_x=-1.0)]


@pytest.mark.oracle
@pytest.mark.parametrize("kw", WATER, ids=str)
def test_water_matches_dali(kw):
    check(lambda fn, t, x: fn.water(x, **kw), IMGS, layouts=["HWC"], what=str(kw))
    check(lambda fn, t, x: fn.water(x, interp_type=t.INTERP_LINEAR, **kw), IMGS, layouts=["HWC"], tol=1.0)


@pytest.mark.oracle
def test_sphere_matches_dali():
    check(lambda fn, t, x: fn.sphere(x), IMGS, layouts=["HWC"])
    check(lambda fn, t, x: fn.sphere(x, fill_value=77.0), IMGS, layouts=["HWC"])
    check(lambda fn, t, x: fn.sphere(x, interp_type=t.INTERP_LINEAR, fill_value=9.0), IMGS, layouts=["HWC"], tol=1.0)


@pytest.mark.oracle
def test_mask_matches_dali():
    masks = [np.int32(i % 2) for i in range(len(IMGS))]
    check(lambda fn, t, x, m: fn.water(x, mask=m), IMGS, masks, layouts=["HWC", None])
    check(lambda fn, t, x, m: fn.sphere(x, mask=m), IMGS, masks, layouts=["HWC", None])


def test_water_against_its_formula():
    img = IMGS[0]
    (out, lay), = run_graph("stoker", lambda fn, t, x: fn.water(x, ampl_x=4.0, ampl_y=0.0, freq_x=0.3), [img],
                            layouts=["HWC"])
    assert lay == "HWC"
    for y in (0, 10, 40):  # with ampl_y 0 each row is the input row shifted by a whole number of pixels
        s = int(np.floor(np.float32(4.0) * np.sin(np.float32(0.3) * y)))
        lo, hi = max(0, -s), min(83, 83 - s)
        np.testing.assert_array_equal(out[0][y, lo:hi], img[y, lo + s:hi + s])


def _jitter(imgs, **kw):
    return run_graph("stoker", lambda fn, t, x: fn.jitter(x, **kw), imgs, layouts=["HWC"])[0][0]


def test_jitter_moves_pixels_within_the_neighbourhood():
    h, w = 40, 50
    yy, xx = np.mgrid[0:h, 0:w]
    coords = np.stack([xx, yy, np.full_like(xx, 9)], -1).astype(np.uint8)  # each pixel names its position
    out, = _jitter([coords], nDegree=4, fill_value=255.0)
    inside = out[..., 2] == 9
    dx = out[..., 0].astype(int) - xx
    dy = out[..., 1].astype(int) - yy
    assert np.all(np.abs(dx[inside]) <= 2) and np.all(np.abs(dy[inside]) <= 2)
    assert set(np.unique(dx[inside])) == {-2, -1, 0, 1, 2}  # the whole range is used
    assert abs(dx[inside].mean()) < 0.2 and abs(dy[inside].mean()) < 0.2
    # only pixels near the border can read outside the image (and then get fill_value)
    assert np.all(out[~inside] == 255) and not np.any(~inside[2:-2, 2:-2])


def test_jitter_determinism_mask_and_no_degree():
    a = _jitter(IMGS, nDegree=3)
    b = _jitter(IMGS, nDegree=3)
    for u, v in zip(a, b):
        np.testing.assert_array_equal(u, v)
    for u, img in zip(_jitter(IMGS, nDegree=0), IMGS):
        np.testing.assert_array_equal(u, img)
    for u, img in zip(_jitter(IMGS, mask=0), IMGS):
        np.testing.assert_array_equal(u, img)
    lin = _jitter(IMGS, nDegree=2, interp_type=__import__("stoker").types.INTERP_LINEAR)
    assert all(u.shape == img.shape and u.dtype == img.dtype for u, img in zip(lin, IMGS))


def test_bad_arguments():
    with pytest.raises(StokerError, match="interp_type"):
        run_graph("stoker", lambda fn, t, x: fn.water(x, interp_type=t.INTERP_CUBIC), IMGS)
    with pytest.raises(StokerError, match="nDegree"):
        run_graph("stoker", lambda fn, t, x: fn.jitter(x, nDegree=-1), IMGS)
    with pytest.raises(StokerError, match="HWC"):
        run_graph("stoker", lambda fn, t, x: fn.sphere(x), [np.zeros((4, 4), np.uint8)])


@pytest.mark.parametrize("op, kw", [("sphere", {}), ("water", dict(ampl_x=7.5, freq_y=0.3, phase_x=1.0)),
                                    ("jitter", dict(nDegree=5))])
@pytest.mark.parametrize("dtype, channels, fill", [(np.uint8, 3, 0.0), (np.uint8, 1, 17.0), (np.uint16, 4, 300.0),
                                                   (np.int16, 2, -5.0), (np.float32, 3, 0.25),
                                                   (np.uint8, 3, 300.0), (np.float32, 3, 0.1), (np.uint8, 5, 0.0),
                                                   (np.int32, 3, 0.0)])
def test_nearest_pick_is_the_same_through_opencv_and_numpy(op, kw, dtype, channels, fill, monkeypatch):
    """INTERP_NN (the default): OpenCV's remap on whole-pixel maps where it applies, NumPy's
    indexing elsewhere (300 into uint8 and 0.1 into float32 are not held as they are; 5 channels;
    int32), the same pixels and fill either way, for odd sizes and per-sample randomness."""
    from stoker.operators.image import distortions

    rng = np.random.default_rng(11)
    imgs = [(rng.integers(0, 250, (h, w, channels)) * (1.5 if dtype == np.float32 else 1)).astype(dtype)
            for h, w in ((37, 53), (64, 31), (40, 40))]

    def run():
        ((samples, _),) = run_graph("stoker", lambda fn, t, x: getattr(fn, op)(x, fill_value=fill, **kw), imgs,
                                    layouts=["HWC"])
        return [np.asarray(s) for s in samples]

    fast = run()
    cls = {"sphere": distortions.Sphere, "water": distortions.Water, "jitter": distortions.Jitter}[op]
    monkeypatch.setattr(cls, "_nearest_opencv", lambda *a, **k: None)  # NumPy's indexing only
    plain = run()
    for a, b in zip(fast, plain):
        assert a.dtype == b.dtype == dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)
    assert any((a == np.asarray(fill).astype(dtype)).all(axis=-1).any() for a in fast) or op == "jitter"
