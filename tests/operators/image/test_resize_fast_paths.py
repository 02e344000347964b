"""The CPU fast paths of resize (torch's 8-bit kernel with the edge fix-up, torch + Pillow for
sub-pixel regions: an opt-in, ``STOKER_TORCH_RESIZE=1``) and of crop_mirror_normalize (OpenCV
planes) against exact references."""

import importlib.util

import numpy as np
import pytest
from oracle import run_op

from stoker import settings, types
from stoker.operators.image import resample as rs
from stoker.operators.image import resample_torch
from stoker.operators.image.geometry import resize_plan

LIN = types.INTERP_LINEAR
U8 = np.dtype(np.uint8)

_HAS_TORCH = importlib.util.find_spec("torch") is not None


@pytest.fixture
def torch_resize():
    """The torch path switched on (it is off by default), its cached availability reset."""
    resample_torch._state.clear()
    with settings.override(torch_resize=True):
        assert resample_torch.available()
        yield
    resample_torch._state.clear()


needs_torch = pytest.mark.skipif(not _HAS_TORCH, reason="torch is not installed")


def test_the_torch_path_is_off_by_default():
    """Results must not depend on whether torch is installed: the default never takes it."""
    resample_torch._state.clear()
    assert settings.get().torch_resize is False
    assert not resample_torch.available()
    img = np.random.default_rng(1).integers(0, 256, (60, 80, 3), np.uint8)
    assert rs._torch_path(img, [0, 1], (30, 40), [0.0, 0.0], [60.0, 80.0], [LIN, LIN], True, U8) is None


def _exact(img, out_size, lo, hi):
    return rs._matrix_path(img, [0, 1], out_size, list(map(float, lo)), list(map(float, hi)), [LIN, LIN],
                           True, U8)


def _diff(a, b):
    d = np.abs(a.astype(np.int32) - b.astype(np.int32))
    return d.max(), d.mean()


@needs_torch
@pytest.mark.usefixtures("torch_resize")
@pytest.mark.parametrize("shape,out", [
    ((61, 83, 3), (30, 41)), ((316, 300, 3), (224, 224)), ((101, 9, 3), (40, 60)), ((37, 5), (20, 3)),
    ((500, 375, 4), (100, 300)), ((300, 40, 3), (224, 224)), ((53, 37, 1), (20, 20)), ((2, 999, 3), (1, 224)),
])
def test_torch_path_matches_exact_weights(shape, out):
    """Noise (the worst case for rounding) stays within one level, edge rows and columns included."""
    img = np.random.default_rng(sum(shape)).integers(0, 256, shape, np.uint8)
    fast = rs._torch_path(img, [0, 1], out, [0.0, 0.0], [float(shape[0]), float(shape[1])], [LIN, LIN], True, U8)
    assert fast is not None and fast.shape == (*out, *shape[2:]) and fast.dtype == np.uint8
    worst, mean = _diff(fast, _exact(img, out, (0, 0), shape[:2]))
    assert worst <= 1 and mean < 0.25


@needs_torch
@pytest.mark.usefixtures("torch_resize")
def test_torch_path_edges_repeat_the_border_pixel():
    """A bright first column must not be renormalized away: DALI repeats it past the edge."""
    img = np.zeros((40, 50, 3), np.uint8)
    img[:, 0] = 255
    out = rs.resample(img, [0, 1], (20, 20), (0, 0), (40, 50), min_filter=LIN, mag_filter=LIN, antialias=True)
    want = _exact(img, (20, 20), (0, 0), (40, 50))
    assert _diff(out, want)[0] <= 1 and want[:, 0].min() > 0


@needs_torch
@pytest.mark.usefixtures("torch_resize")
@pytest.mark.parametrize("shape", [(457, 471, 3), (471, 457, 3), (375, 500, 3), (61, 83, 1), (300, 41, 3)])
def test_subpixel_region_uses_torch_then_pillow(shape):
    """resize_shorter gives one whole axis and one fractional region: still within one level."""
    img = np.random.default_rng(shape[0]).integers(0, 256, shape, np.uint8)
    for short in (256, 30):
        p = resize_plan(shape[:2], (0, 0), resize_shorter=short)
        out = rs.resample(img, [0, 1], p.out_size, p.lo, p.hi, min_filter=LIN, mag_filter=LIN, antialias=True)
        worst, mean = _diff(out, _exact(img, p.out_size, p.lo, p.hi))
        assert worst <= 1 and mean < 0.25, (shape, short)


@needs_torch
@pytest.mark.usefixtures("torch_resize")
def test_without_torch_the_pillow_path_gives_the_same_pixels(monkeypatch):
    img = np.random.default_rng(5).integers(0, 256, (120, 90, 3), np.uint8)
    args = dict(min_filter=LIN, mag_filter=LIN, antialias=True)
    with_torch = rs.resample(img, [0, 1], (50, 40), (0, 0), (120, 90), **args)
    monkeypatch.setitem(resample_torch._state, "ok", False)
    assert rs._torch_path(img, [0, 1], (50, 40), [0.0, 0.0], [120.0, 90.0], [LIN, LIN], True, U8) is None
    without = rs.resample(img, [0, 1], (50, 40), (0, 0), (120, 90), **args)
    assert _diff(with_torch, without)[0] <= 1


def test_torch_path_declines_what_it_cannot_do():
    img = np.random.default_rng(6).integers(0, 256, (60, 80, 3), np.uint8)
    full = [0.0, 0.0], [60.0, 80.0]
    assert rs._torch_path(img, [0, 1], (30, 40), [1.5, 0.0], [60.0, 80.0], [LIN, LIN], True, U8) is None  # region
    assert rs._torch_path(img, [0, 1], (30, 40), *full, [types.INTERP_CUBIC] * 2, True, U8) is None
    assert rs._torch_path(img, [0, 1], (30, 40), *full, [LIN, LIN], False, U8) is None  # no antialias
    assert rs._torch_path(img, [0, 1], (90, 100), *full, [LIN, LIN], True, U8) is None  # upscale: OpenCV
    assert rs._torch_path(img.astype(np.float32), [0, 1], (30, 40), *full, [LIN, LIN], True,
                          np.dtype(np.float32)) is None


@pytest.mark.parametrize("mirror", [0, 1])
@pytest.mark.parametrize("dtype", [types.FLOAT, types.FLOAT16])
def test_crop_mirror_normalize_planes_match_numpy(mirror, dtype):
    """The OpenCV plane path (uint8 HWC -> float CHW) against a direct NumPy formula, with a crop
    (a strided view) and per-channel mean/std."""
    rng = np.random.default_rng(mirror)
    batch = [rng.integers(0, 256, (37, 53, 3), np.uint8), rng.integers(0, 256, (20, 20, 1), np.uint8)]
    mean, std = [10.0, 120.5, 250.0], [58.4, 1.5, 3.0]
    out = run_op("stoker", "crop_mirror_normalize", batch[:1], crop=(30, 41), mean=mean, std=std, mirror=mirror,
                     dtype=dtype)
    img = batch[0][4:34, 6:47].astype(np.float64)  # centre crop: 0.5 * (37 - 30) rounds away from 0
    if mirror:
        img = img[:, ::-1]
    want = ((img - mean) / std).transpose(2, 0, 1)
    tol = 1e-4 if dtype == types.FLOAT else 2e-3 * np.abs(want).max()
    assert out[0].shape == (3, 30, 41)
    np.testing.assert_allclose(out[0].astype(np.float64), want, atol=tol, rtol=1e-3)
    gray = run_op("stoker", "crop_mirror_normalize", batch[1:], mean=[5.0], std=[2.0], mirror=mirror)
    want_g = (batch[1].astype(np.float64)[:, ::-1] if mirror else batch[1]) - 5.0
    np.testing.assert_allclose(gray[0][0], want_g[:, :, 0] / 2.0, atol=1e-5)


@needs_torch
@pytest.mark.usefixtures("torch_resize")
@pytest.mark.oracle
@pytest.mark.parametrize("case", [dict(resize_x=224, resize_y=224), dict(resize_shorter=256), dict(size=(100, 333))])
def test_training_sizes_match_dali(case):
    """The benchmark's resizes on noise at ImageNet-like sizes (the torch and torch + Pillow paths)."""
    rng = np.random.default_rng(11)
    batch = [rng.integers(0, 256, s, np.uint8) for s in [(316, 300, 3), (457, 471, 3), (375, 500, 3), (97, 230, 3)]]
    ours, theirs = run_op("stoker", "resize", batch, **case), run_op("dali", "resize", batch, **case)
    for a, b in zip(ours, theirs):
        assert a.shape == b.shape
        worst, mean = _diff(a, b)
        assert worst <= 1 and mean < 0.25, (case, a.shape, worst, mean)
