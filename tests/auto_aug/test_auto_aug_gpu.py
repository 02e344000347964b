"""GPU kernels of stoker.auto_aug's own steps (stoker/auto_aug/gpu_ops.py) against the CPU operators
(stoker/auto_aug/_ops.py): every op on batches of randomly sized images with per-sample parameters
(moved to the GPU by the pipeline, as in a scheme), edge cases (flat channels, one-pixel extents,
rounding ties, many channels, channel counts that differ between samples, parameters of other
types), the host fallback (videos), and RandAugment / TrivialAugment of these ops end to end.

Tolerances: none. The 3x3 filter (sharpness) sums as the host's OpenCV does once a probe has found
how (``gpu_ops.opencv_filter_lanes``); should the probe find no match, a result on a rounding tie
may differ by one level (at most 1, on a small share of the values).
"""

import numpy as np
import pytest

import stoker
import stoker.fn as fn
from stoker.auto_aug import augmentations as aa
from stoker.auto_aug import rand_augment, trivial_augment
from stoker.operators import gpu_registry
from stoker.pipeline.data_node import invoke

pytestmark = pytest.mark.gpu

OPS = ("_auto_aug.filter", "_auto_aug.equalize", "_auto_aug.contrast", "_auto_aug.auto_contrast",
       "_auto_aug.solarize", "_auto_aug.solarize_add")


def _run(name, images, params, gpu, iterations=1, layout="HWC"):
    """``name``'s output samples (host arrays) for ``images`` and, when given, one parameter per
    sample (a second input, which the pipeline moves to the GPU with the images)."""

    @stoker.pipeline_def(batch_size=len(images), num_threads=1, device_id=0, seed=1)
    def pipe():
        x = fn.external_source(source=[images], cycle=True, layout=layout)
        ins = [x.gpu() if gpu else x]
        if params is not None:
            ins.append(fn.external_source(source=[params], cycle=True))
        return invoke(name, ins, {})

    p = pipe()
    p.build()
    outs = []
    for _ in range(iterations):
        (out,) = p.run()
        outs.append([np.asarray(s) for s in (out.as_cpu() if gpu else out).samples()])
    p.close()
    return outs[-1]


def _both(name, images, params=None, kernel=True, layout="HWC"):
    before = gpu_registry.FALLBACKS[name]
    got = _run(name, images, params, True, layout=layout)
    if kernel:
        assert gpu_registry.FALLBACKS[name] == before, "the host fallback ran instead of the kernel"
    else:
        assert gpu_registry.FALLBACKS[name] > before, "expected the host fallback"
    want = _run(name, images, params, False, layout=layout)
    assert len(got) == len(want) == len(images)
    return got, want


def _exact(name, images, params=None, **kw):
    got, want = _both(name, images, params, **kw)
    for g, w, x in zip(got, want, images):
        assert g.shape == w.shape == x.shape and g.dtype == w.dtype == np.uint8
        np.testing.assert_array_equal(g, w)


def _edge_images(rng):
    """Flat channels, two values, one-pixel extents, full range, and ties for equalize's rounding
    (510 pixels above the first value: halves of 255 / 510)."""
    flat = np.full((7, 9, 3), 77, np.uint8)
    flat[..., 1] = 0
    two = np.where(rng.random((12, 5, 3)) < 0.5, 10, 200).astype(np.uint8)
    line = rng.integers(0, 256, (1, 17, 3), dtype=np.uint8)
    column = rng.integers(0, 256, (13, 1, 3), dtype=np.uint8)
    dot = rng.integers(0, 256, (1, 1, 3), dtype=np.uint8)
    ramp = np.repeat(np.arange(256, dtype=np.uint8)[None, :, None], 3, axis=2).repeat(2, axis=0)
    ties = np.zeros((1, 511, 3), np.uint8)  # 1 at 0, then 510 pixels over the values 1..255
    ties[0, 1:] = (np.arange(510)[:, None] // 2 + 1).clip(1, 255)
    return [flat, two, line, column, dot, ramp, ties]


@pytest.fixture
def images(make_images, rng):
    return make_images(10, 3, 70) + _edge_images(rng)


@pytest.mark.parametrize("name", ["_auto_aug.equalize", "_auto_aug.auto_contrast"])
def test_histogram_ops_match_cpu(name, images):
    _exact(name, images)


@pytest.mark.parametrize("name", ["_auto_aug.equalize", "_auto_aug.auto_contrast"])
@pytest.mark.parametrize("channels", [1, 4, 50])
def test_histogram_ops_other_channel_counts(name, channels, make_images):
    # 50 channels: beyond the shared-memory histogram (global atomics)
    _exact(name, make_images(5, 2, 40, c=channels))


@pytest.mark.parametrize("name", ["_auto_aug.equalize", "_auto_aug.auto_contrast", "_auto_aug.solarize"])
def test_grey_images_and_mixed_channel_counts(name, make_images, rng):
    grey = [img[..., 0].copy() for img in make_images(4, 5, 40)]
    params = None if name != "_auto_aug.solarize" else [np.float32(t) for t in rng.uniform(0, 256, 4)]
    _exact(name, grey, params, layout="HW")
    mixed = make_images(2, 5, 40, c=1) + make_images(2, 5, 40, c=3) + make_images(2, 5, 40, c=5)
    params = None if name != "_auto_aug.solarize" else [np.float32(t) for t in rng.uniform(0, 256, 6)]
    _exact(name, mixed, params)


def test_contrast_matches_cpu(images, rng):
    factors = np.concatenate([[0, 1, 0.1, 1.9, -0.5, 3.7, 1.5], rng.uniform(0.1, 1.9, len(images) - 7)])
    _exact("_auto_aug.contrast", images, [np.float32(f) for f in factors])


@pytest.mark.parametrize("dtype", [np.float64, np.int32, np.uint8])
def test_contrast_factor_types(dtype, make_images, rng):
    imgs = make_images(6, 5, 50)
    values = rng.uniform(0, 3, 6) if np.dtype(dtype).kind == "f" else rng.integers(0, 3, 6)
    _exact("_auto_aug.contrast", imgs, [np.asarray(v, dtype) for v in values])


def test_solarize_matches_cpu(images, rng):
    thresholds = np.concatenate([np.linspace(256, 0, 7), rng.uniform(0, 256, len(images) - 7)])
    _exact("_auto_aug.solarize", images, [np.float32(t) for t in thresholds])


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint8, np.float64])
def test_solarize_threshold_types(dtype, make_images, rng):
    imgs = make_images(6, 5, 50)
    values = [0, 1, 128, 255, 256, 100.5] if np.dtype(dtype).kind == "f" else [0, 1, 128, 255, 77, 200]
    _exact("_auto_aug.solarize", imgs, [np.asarray(v).astype(dtype) for v in values])


def test_solarize_add_matches_cpu(images, rng):
    shifts = np.concatenate([[0, 1, 127, 110], rng.integers(0, 128, len(images) - 4)])
    _exact("_auto_aug.solarize_add", images, [np.uint8(s) for s in shifts])


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float32])
def test_solarize_add_shift_types(dtype, make_images):
    imgs = make_images(5, 5, 50)
    values = [0, 3, 127, 200, 300] if np.dtype(dtype).kind == "i" else [0.0, 3.7, 127.2, 128.9, 255.5]
    _exact("_auto_aug.solarize_add", imgs, [np.asarray(v, dtype) for v in values])


def _check_filter(images, kernels):
    """GPU == CPU to the bit when the probe of this host's OpenCV found how filter2D sums (else
    within one level, on a small share of the values)."""
    from stoker.auto_aug.gpu_ops import opencv_filter_lanes

    got, want = _both("_auto_aug.filter", images, kernels)
    differing = total = 0
    for g, w, x in zip(got, want, images):
        assert g.shape == w.shape == x.shape and g.dtype == w.dtype == np.uint8
        d = np.abs(g.astype(int) - w.astype(int))
        assert d.max(initial=0) <= 1
        differing += int((d > 0).sum())
        total += d.size
    allowed = 0 if opencv_filter_lanes()[1] else max(2, total // 1000)
    assert differing <= allowed, f"{differing} of {total} values differ by one level"


def test_filter_matches_cpu_within_one_level(images, rng):
    mags = np.concatenate([[0.0, 0.9, -0.9, 0.5], rng.uniform(-0.9, 0.9, len(images) - 4)]).astype(np.float32)
    _check_filter(images, [aa.sharpness_kernel(m) for m in mags])


def test_filter_kernel_types_and_grey_images(make_images, rng):
    imgs = [img[..., :1].copy() for img in make_images(4, 1, 30)] + make_images(2, 1, 4, c=4)
    kernels = [rng.uniform(-1, 1, (3, 3)) for _ in imgs]  # float64: rounded to float32 as the CPU does
    _check_filter(imgs, kernels)


def test_videos_take_the_host_fallback(rng):
    videos = [rng.integers(0, 256, (2, 9, 11, 3), dtype=np.uint8) for _ in range(3)]
    _exact("_auto_aug.equalize", videos, kernel=False, layout="FHWC")
    _exact("_auto_aug.solarize", videos, [np.float32(100)] * 3, kernel=False, layout="FHWC")


def test_contrast_on_grey_images_raises_as_the_cpu(make_images):
    grey = [img[..., :1].copy() for img in make_images(2, 5, 20)]
    with pytest.raises(Exception, match="3 channels"):
        _run("_auto_aug.contrast", grey, [np.float32(1.5)] * 2, True)


# --- the schemes, end to end --------------------------------------------------------------------

def _exact_suite():
    """The six ops (and identity); sharpness only where the filter is exact (see the module's doc)."""
    from stoker.auto_aug.gpu_ops import opencv_filter_lanes

    suite = [aa.contrast, aa.equalize, aa.auto_contrast, aa.solarize, aa.solarize_add, aa.identity]
    return suite + [aa.sharpness] if opencv_filter_lanes()[1] else suite


def _scheme(build, images, gpu, seed=3):
    @stoker.pipeline_def(batch_size=len(images), num_threads=1, device_id=0, seed=seed, enable_conditionals=True)
    def pipe():
        x = fn.external_source(source=lambda: images, batch=True, layout="HWC")
        return build(x.gpu() if gpu else x)

    p = pipe()
    p.build()
    outs = []
    for _ in range(2):
        (out,) = p.run()
        outs.append([np.asarray(s) for s in (out.as_cpu() if gpu else out).samples()])
    p.close()
    return outs


@pytest.mark.parametrize("build", [
    lambda x: rand_augment.apply_rand_augment(_exact_suite(), x, n=2, m=9),
    lambda x: rand_augment.apply_rand_augment(_exact_suite(), x, n=3, m=25),
    lambda x: trivial_augment.apply_trivial_augment(_exact_suite(), x),
], ids=["ra-n2", "ra-n3", "ta"])
@pytest.mark.parametrize("n", [40, 3])  # 3: most ops get no sample (empty branches)
def test_schemes_of_these_ops_match_cpu_exactly(build, n, make_images):
    images = make_images(n, 20, 60)
    before = {k: gpu_registry.FALLBACKS[k] for k in OPS}
    got = _scheme(build, images, True)
    assert {k: gpu_registry.FALLBACKS[k] for k in OPS} == before
    want = _scheme(build, images, False)
    for g_it, w_it in zip(got, want):
        for g, w in zip(g_it, w_it):
            np.testing.assert_array_equal(g, w)


def test_sharpness_in_a_scheme(make_images):
    from stoker.auto_aug.gpu_ops import opencv_filter_lanes

    images = make_images(24, 20, 60)
    build = lambda x: trivial_augment.apply_trivial_augment([aa.sharpness, aa.identity], x)  # noqa: E731
    got, want = _scheme(build, images, True), _scheme(build, images, False)
    for g_it, w_it in zip(got, want):
        for g, w in zip(g_it, w_it):
            assert g.shape == w.shape
            assert np.abs(g.astype(int) - w.astype(int)).max() <= (0 if opencv_filter_lanes()[1] else 1)


def test_rand_augment_runs_without_host_fallback(make_images):
    images = make_images(32, 40, 60)
    before = {k: gpu_registry.FALLBACKS[k] for k in OPS}
    got = _scheme(lambda x: rand_augment.rand_augment(x, n=2, m=9), images, True)
    assert {k: gpu_registry.FALLBACKS[k] for k in OPS} == before
    want = _scheme(lambda x: rand_augment.rand_augment(x, n=2, m=9), images, False)
    for g_it, w_it in zip(got, want):
        for g, w in zip(g_it, w_it):
            assert g.shape == w.shape and g.dtype == w.dtype
            # the GPU's bilinear warps differ from OpenCV's by a level or two at edges
            assert np.abs(g.astype(float) - w.astype(float)).mean() < 1.0
