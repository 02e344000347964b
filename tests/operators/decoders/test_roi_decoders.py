"""decoders.image_crop / image_slice / image_random_crop: windows as DALI computes them.

Decode-then-crop equivalence: every ROI output must equal the full decode cut
at the window, exactly; the window itself must equal DALI's (checked on
PNG and JPEG alike: the pixels must match DALI exactly too).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from decoder_helpers import H, W, as_u8, pil_bytes, run_dali, run_stoker, smooth_image

from stoker.errors import OperatorError
from stoker.operators.decoders.cpu import decode_cpu

CROP_CASES = [
    dict(crop=(10, 20)),
    dict(crop=(10.6, 20.4)),
    dict(crop=(10.5, 20.5), crop_pos_x=0.3, crop_pos_y=0.7),
    dict(crop_h=10, crop_w=20, crop_pos_x=0.25, crop_pos_y=0.25, rounding="truncate"),
    dict(crop=(H, H), crop_pos_x=1.0, crop_pos_y=0.0),
    dict(crop=(1, 1), crop_pos_x=1.0, crop_pos_y=1.0),
    # pos * (in - crop) just below a half (0.9f * 5): DALI's product is exact
    dict(crop=(H - 5, H - 5), crop_pos_x=0.7, crop_pos_y=0.9),
    dict(crop=(H - 5, H - 5), crop_pos_x=0.7, crop_pos_y=0.9, rounding="truncate"),
]

SLICE_CASES = [
    dict(rel_start=(0.1, 0.2), rel_shape=(0.5, 0.5)),
    dict(rel_start=(0.3, 0.1), rel_end=(0.9, 0.77)),
    dict(start=(3, 4), end=(20, 30), axis_names="HW"),
    dict(start=(3, 4), end=(20, 30), axes=(0, 1)),
    dict(start=(3, 4), end=(20, 30), axes=(-1, -2)),
    dict(rel_start=(0.2,), rel_shape=(0.5,), axes=(0,)),
    dict(start=(7,), end=(30,), axis_names="W"),
    dict(start=(5, 7), shape=(11, 13)),
    dict(rel_shape=(0.51, 0.49)),
    dict(start=(0, 0), shape=(H, H)),
]


def _names(images):
    return [n for n in ("rgb.png", "exif6.png", "rgb.jpg", "gray.png") if n in images]


@pytest.mark.oracle
@pytest.mark.parametrize("kw", CROP_CASES, ids=lambda k: str(k))
def test_image_crop_matches_dali(images, kw):
    names = _names(images)
    datas = [as_u8(images[n]) for n in names]
    ours, full = run_stoker(datas, lambda x, fn, t: (fn.decoders.image_crop(x, **kw), fn.decoders.image(x)))
    (ref,) = run_dali(datas, lambda x, fn, t: fn.decoders.image_crop(x, device="cpu", **kw))
    for name, a, b, f in zip(names, ours, ref, full):
        assert a.shape == b.shape, (name, a.shape, b.shape)
        np.testing.assert_array_equal(a, b, err_msg=name)
        assert _is_window_of(a, f), name


@pytest.mark.oracle
@pytest.mark.parametrize("kw", SLICE_CASES, ids=lambda k: str(k))
def test_image_slice_named_matches_dali(images, kw):
    names = _names(images)
    datas = [as_u8(images[n]) for n in names]
    ours, full = run_stoker(datas, lambda x, fn, t: (fn.decoders.image_slice(x, **kw), fn.decoders.image(x)))
    (ref,) = run_dali(datas, lambda x, fn, t: fn.decoders.image_slice(x, device="cpu", **kw))
    for name, a, b, f in zip(names, ours, ref, full):
        assert a.shape == b.shape, (name, a.shape, b.shape)
        np.testing.assert_array_equal(a, b, err_msg=name)
        assert _is_window_of(a, f), name


POSITIONAL = [
    (np.array([0.1, 0.2], np.float32), np.array([0.5, 0.5], np.float32), {}),
    (np.array([0.25, 0.5], np.float32), np.array([0.5, 0.25], np.float32), {}),
    (np.array([5, 6], np.int32), np.array([20, 10], np.int32), {}),
    (np.array([5.0, 6.0], np.float32), np.array([20.0, 10.0], np.float32),
     dict(normalized_anchor=False, normalized_shape=False)),
    (np.array([0.5, 0.1], np.float32), np.array([10.0, 30.0], np.float32),
     dict(normalized_shape=False, normalized_anchor=True, axis_names="HW")),
]


@pytest.mark.oracle
@pytest.mark.parametrize("case", range(len(POSITIONAL)))
def test_image_slice_positional_matches_dali(images, case):
    anchor, shape, kw = POSITIONAL[case]
    names = _names(images)
    datas = [as_u8(images[n]) for n in names]

    def build_s(x, fn, t):
        a = fn.external_source(source=lambda: [anchor] * len(datas), batch=True)
        s = fn.external_source(source=lambda: [shape] * len(datas), batch=True)
        return fn.decoders.image_slice(x, a, s, **kw), fn.decoders.image(x)

    def build_d(x, fn, t):
        a = fn.external_source(source=lambda: [anchor] * len(datas), batch=True)
        s = fn.external_source(source=lambda: [shape] * len(datas), batch=True)
        return fn.decoders.image_slice(x, a, s, device="cpu", **kw)

    ours, full = run_stoker(datas, build_s)
    (ref,) = run_dali(datas, build_d)
    for name, a, b, f in zip(names, ours, ref, full):
        assert a.shape == b.shape, (name, a.shape, b.shape)
        np.testing.assert_array_equal(a, b, err_msg=name)
        assert _is_window_of(a, f), name


def test_image_crop_per_sample_tensor_args(images, reference_rgb):
    datas = [as_u8(images["rgb.png"])] * 3
    pos = [np.float32(0.0), np.float32(0.5), np.float32(1.0)]
    sizes = [np.array([5, 7], np.float32), np.array([10, 20], np.float32), np.array([H, 1], np.float32)]

    def build(x, fn, t):
        px = fn.external_source(source=lambda: pos, batch=True)
        c = fn.external_source(source=lambda: sizes, batch=True)
        return fn.decoders.image_crop(x, crop=c, crop_pos_x=px, crop_pos_y=px)

    (outs,) = run_stoker(datas, build)
    assert [o.shape for o in outs] == [(5, 7, 3), (10, 20, 3), (H, 1, 3)]
    np.testing.assert_array_equal(outs[0], reference_rgb[:5, :7])
    y, x = math.floor(0.5 * (H - 10) + 0.5), math.floor(0.5 * (W - 20) + 0.5)
    np.testing.assert_array_equal(outs[1], reference_rgb[y:y + 10, x:x + 20])
    np.testing.assert_array_equal(outs[2], reference_rgb[:, W - 1:])


@pytest.mark.oracle
def test_image_slice_per_sample_axes_match_dali(images):
    """axes as a per-sample tensor (DALI allows it): each sample reads start/end in its own order."""
    names = _names(images)
    datas = [as_u8(images[n]) for n in names]
    orders = [np.array(a, np.int32) for a in ([0, 1], [1, 0], [-1, -2], [-2, -1])][:len(datas)]

    def build(x, fn, t, **extra):
        ax = fn.external_source(source=lambda: orders, batch=True)
        return fn.decoders.image_slice(x, start=(2, 5), end=(20, 30), axes=ax, **extra)

    (ours,) = run_stoker(datas, build)
    (ref,) = run_dali(datas, lambda x, fn, t: build(x, fn, t, device="cpu"))
    for name, a, b in zip(names, ours, ref):
        assert a.shape == b.shape, (name, a.shape, b.shape)
        np.testing.assert_array_equal(a, b, err_msg=name)
    assert ours[0].shape[:2] == (18, 25) and ours[1].shape[:2] == (25, 18)


@pytest.mark.parametrize("kw,match", [
    (dict(axes=(0, 1), axis_names="HW"), "mutually exclusive"),
    (dict(axes=(0, 2)), "out of range"),
    (dict(axes=(-3, 0)), "out of range"),
    (dict(axis_names="CW"), "channel"),
    (dict(axes=(1, -1)), "twice"),
])
def test_bad_slice_axes_fail_at_build(kw, match):
    from stoker import fn, pipeline_def
    from stoker.errors import PipelineBuildError

    @pipeline_def(batch_size=1, num_threads=1, device_id=None)
    def pipe():
        src = fn.external_source(source=lambda: [np.zeros(4, np.uint8)], batch=True)
        return fn.decoders.image_slice(src, start=(1, 1), end=(3, 3), **kw)

    with pytest.raises(PipelineBuildError, match=match) as e:
        pipe().build()
    assert "decoders.image_slice" in str(e.value)


def test_bad_per_sample_axes_name_the_argument(images):
    datas = [as_u8(images["rgb.png"])]

    def build(x, fn, t):
        ax = fn.external_source(source=lambda: [np.array([0, 5], np.int32)], batch=True)
        return fn.decoders.image_slice(x, start=(1, 1), end=(3, 3), axes=ax)

    with pytest.raises(OperatorError, match="'axes'.*out of range"):
        run_stoker(datas, build)


@pytest.mark.parametrize("op,kw,match", [
    ("image_crop", dict(crop=(H + 1, 10)), "does not fit"),
    ("image_crop", dict(crop=(10, 10), crop_pos_x=1.5), "crop_pos_x"),
    ("image_slice", dict(rel_start=(0.9, 0.2), rel_shape=(0.5, 0.5)), "does not fit"),
    ("image_slice", dict(start=(-5, 3), shape=(10, 10)), "does not fit"),
])
def test_window_outside_image_is_a_sample_error(images, tmp_path, op, kw, match):
    from stoker import fn, pipeline_def

    path = tmp_path / "picture.png"
    path.write_bytes(images["rgb.png"])

    @pipeline_def(batch_size=1, num_threads=1, device_id=None)
    def pipe():
        enc, _ = fn.readers.file(files=[str(path)])
        return getattr(fn.decoders, op)(enc, **kw)

    p = pipe()
    p.build()
    with pytest.raises(OperatorError, match=match) as e:
        p.run()
    assert str(path) in str(e.value) and f"decoders.{op}" in str(e.value)


def test_bad_crop_arguments_fail_at_build():
    from stoker import fn, pipeline_def
    from stoker.errors import PipelineBuildError

    for kw in (dict(), dict(crop=(3, 3), crop_h=2, crop_w=2), dict(crop=(3, 3), rounding="up")):
        @pipeline_def(batch_size=1, num_threads=1, device_id=None)
        def pipe(kw=kw):
            return fn.decoders.image_crop(fn.external_source(source=lambda: [np.zeros(4, np.uint8)], batch=True),
                                          **kw)

        with pytest.raises(PipelineBuildError):
            pipe().build()


# --- random crop ------------------------------------------------------------------

def _is_window_of(crop: np.ndarray, full: np.ndarray) -> bool:
    h, w = crop.shape[:2]
    for y in range(full.shape[0] - h + 1):
        rows = full[y:y + h]
        for x in range(full.shape[1] - w + 1):
            if np.array_equal(rows[:, x:x + w], crop):
                return True
    return False


def _random_crop_outputs(datas, num_threads, seed=11, iterations=2, **kw):
    def build(x, fn, t):
        return fn.decoders.image_random_crop(x, seed=seed, **kw), fn.decoders.image(x)

    return run_stoker(datas, build, num_threads=num_threads, iterations=iterations)


def test_random_crop_windows_in_range_and_exact(images):
    img = smooth_image(60, 80, 3, seed=5)
    datas = [as_u8(pil_bytes(img, "PNG"))] * 16
    area, aspect = (0.2, 0.6), (0.5, 2.0)
    runs = _random_crop_outputs(datas, 1, random_area=area, random_aspect_ratio=aspect, num_attempts=50)
    shapes = set()
    for crops, fulls in runs:
        for c, f in zip(crops, fulls):
            h, w = c.shape[:2]
            shapes.add((h, w))
            # rounding the sides to whole pixels can move the area a little past the range
            assert area[0] * 0.9 <= h * w / (60 * 80) <= area[1] * 1.1, (h, w)
            assert aspect[0] <= w / h <= aspect[1], (h, w)
            assert _is_window_of(c, f)
    assert len(shapes) > 8  # windows differ between samples and iterations


def test_random_crop_deterministic_and_thread_independent(images):
    datas = [as_u8(images[n]) for n in ("rgb.png", "rgb.jpg", "exif6.png", "gray.png")] * 2
    a = _random_crop_outputs(datas, 1)
    b = _random_crop_outputs(datas, 1)
    c = _random_crop_outputs(datas, 3)
    d = _random_crop_outputs(datas, 1, seed=12)
    for run_a, run_b, run_c in zip(a, b, c):
        for x, y, z in zip(run_a[0], run_b[0], run_c[0]):
            np.testing.assert_array_equal(x, y)
            np.testing.assert_array_equal(x, z)
    assert any(x.shape != y.shape for x, y in zip(a[0][0], d[0][0]))
    # different iterations draw different windows
    assert any(x.shape != y.shape for x, y in zip(a[0][0], a[1][0]))


@pytest.mark.oracle
def test_random_crop_window_distribution_like_dali():
    """Same area/aspect distribution as DALI (statistics over 256 windows of a 64x96 image)."""
    img = smooth_image(64, 96, 3, seed=2)
    datas = [as_u8(pil_bytes(img, "PNG"))] * 256
    (ours,) = run_stoker(datas, lambda x, fn, t: fn.decoders.image_random_crop(x, seed=3))
    (ref,) = run_dali(datas, lambda x, fn, t: fn.decoders.image_random_crop(x, device="cpu", seed=3))

    def stats(outs):
        hw = np.array([o.shape[:2] for o in outs], np.float64)
        area = hw[:, 0] * hw[:, 1] / (64 * 96)
        ratio = np.log(hw[:, 1] / hw[:, 0])
        return area.mean(), ratio.mean(), area.min(), area.max()

    (ma, mr, lo_a, hi_a), (da, dr, dlo, dhi) = stats(ours), stats(ref)
    print("stoker", stats(ours), "DALI", stats(ref))
    assert abs(ma - da) < 0.06 and abs(mr - dr) < 0.05, (stats(ours), stats(ref))
    assert min(lo_a, dlo) >= 0.07 and max(hi_a, dhi) <= 1.0


def test_random_crop_decode_equals_full_decode_window(images):
    data = as_u8(images["rgb.jpg"])
    full = decode_cpu(data)
    out = decode_cpu(data, roi=(3, 5, 20, 30))
    np.testing.assert_array_equal(out, full[3:23, 5:35])
