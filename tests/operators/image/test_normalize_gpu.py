"""GPU normalize (stoker/operators/image/gpu_normalize.py) against the CPU operator: the same
pipelines on batches of one image size (the dense path: CuPy over the (N, ...) array) and of
varied sizes (the kernel), uint8 and float32 in.

Tolerances: the statistics are float64 sums taken in another order than NumPy's, so float32
outputs may differ in their last bit (rtol 1e-4, atol 1e-5), float16 outputs by one float16 step
(rtol and atol 1e-3) and integer outputs by one level where a rounding tie moves."""

import numpy as np
import pytest
from gpu_pipelines import run_pipeline

import stoker.fn as fn
import stoker.types as types
from stoker.errors import StokerError
from stoker.operators import gpu_registry

pytestmark = pytest.mark.gpu

MODULE = "stoker.operators.image.gpu_normalize"
N = 5

CASES = {
    "default": {},
    "given_mean_stddev": dict(mean=100.0, stddev=50.0),
    "per_channel": dict(axis_names="HW"),
    "axes_ddof_epsilon": dict(axes=[0, 1], ddof=1, epsilon=2.0),
    "per_pixel": dict(axis_names="C"),
    "given_mean_computed_stddev": dict(mean=100.0, axes=[0, 1], ddof=1),
    "given_stddev_per_column": dict(stddev=30.0, axis_names="W"),
    "scale_shift": dict(axis_names="HW", scale=2.5, shift=1.0),
    "batch_per_channel": dict(batch=True, axis_names="HW"),
    "batch_all_axes": dict(batch=True, scale=3.0),
    "batch_given_mean": dict(batch=True, mean=128.0, axis_names="HW"),
    "uint8_out": dict(axis_names="HW", dtype=types.UINT8, scale=64.0, shift=128.0),
    "int16_out": dict(dtype=types.INT16, scale=1000.0),
    "float16_out": dict(dtype=types.FLOAT16),
    "float_out": dict(dtype=types.FLOAT, shift=0.5),
}



def _run(images, build, gpu, layout="HWC"):
    return run_pipeline(build, [images], gpu, layout)[0][0]


def _assert_close(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        if w.dtype.kind in "iu":
            diff = np.abs(g.astype(np.int64) - w.astype(np.int64))
            assert diff.max(initial=0) <= 1 and diff.mean() < 0.01
        elif w.dtype == np.float16:
            np.testing.assert_allclose(g.astype(np.float32), w.astype(np.float32), rtol=1e-3, atol=1e-3)
        else:
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


def _compare(images, build, layout="HWC", expect_fallback=False):
    """Run ``build`` on GPU and CPU and compare; checks whether the host fallback ran."""
    before = gpu_registry.FALLBACKS["normalize"]
    got = _run(images, build, True, layout)
    if expect_fallback:
        assert gpu_registry.FALLBACKS["normalize"] > before, "expected the host fallback"
    else:
        assert gpu_registry.FALLBACKS["normalize"] == before, "the host fallback ran instead of the GPU path"
    _assert_close(got, _run(images, build, False, layout))


def _images(make_images, same_size, in_type):
    images = make_images(N, 24, 25) if same_size else make_images(N, 12, 60)
    if in_type == "f32":
        images = [im.astype(np.float32) / 255.0 for im in images]
    return images


@pytest.mark.parametrize("in_type", ["u8", "f32"])
@pytest.mark.parametrize("same_size", [True, False], ids=["dense", "ragged"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_gpu_normalize_matches_cpu(case, same_size, in_type, make_images):
    kwargs = dict(CASES[case])
    if in_type == "f32":  # float images lie in [0, 1]: given statistics on the same scale
        kwargs.update({k: kwargs[k] / 255.0 for k in ("mean", "stddev") if k in kwargs})
    _compare(_images(make_images, same_size, in_type), lambda x: fn.normalize(x, **kwargs))


@pytest.mark.parametrize("same_size", [True, False], ids=["dense", "ragged"])
def test_per_sample_argument_inputs(same_size, make_images, rng):
    """mean and stddev as per-sample tensors (per channel) and as per-sample scalars."""
    images = _images(make_images, same_size, "u8")
    means = [rng.uniform(60, 160, (1, 1, 3)).astype(np.float32) for _ in images]
    stds = [rng.uniform(20, 70, (1, 1, 3)).astype(np.float32) for _ in images]
    scalars = [np.float32(v) for v in rng.uniform(60, 160, len(images))]

    def arg(values):
        return fn.external_source(source=[values], cycle=True)

    _compare(images, lambda x: fn.normalize(x, mean=arg(means), stddev=arg(stds)))
    _compare(images, lambda x: fn.normalize(x, mean=arg(means), ddof=1))  # stddev about the given means
    _compare(images, lambda x: fn.normalize(x, stddev=arg(stds), epsilon=4.0))
    _compare(images, lambda x: fn.normalize(x, mean=arg(scalars), axis_names="HW", dtype=types.UINT8,
                                            scale=40.0, shift=128.0))
    _compare(images, lambda x: fn.normalize(x, mean=arg(means), batch=True, axis_names="HW"))


@pytest.mark.parametrize("axis_names", ["HW", "C", "W"])
def test_channel_first_and_grayscale(axis_names, make_images):
    """Kept axes before the reduced ones (CHW) and 2D samples: the kernel's table indexing."""
    chw = [np.ascontiguousarray(im.transpose(2, 0, 1)) for im in make_images(N, 12, 60)]
    _compare(chw, lambda x: fn.normalize(x, axis_names=axis_names), layout="CHW")
    if axis_names != "C":
        gray = [im[..., 0].copy() for im in make_images(N, 12, 60)]
        _compare(gray, lambda x: fn.normalize(x, axis_names=axis_names, dtype=types.UINT8, scale=50.0,
                                              shift=128.0), layout="HW")


SPEECH_CASES = {
    "over_time": dict(axes=[1]),
    "all_axes": dict(),
    "over_time_ddof_epsilon": dict(axes=[1], ddof=1, epsilon=1e-3, scale=2.0, shift=0.5),
    "over_time_given_stddev": dict(axes=[1], stddev=12.0),
    "over_time_float16_out": dict(axes=[1], dtype=types.FLOAT16),
}


@pytest.mark.parametrize("case", sorted(SPEECH_CASES))
def test_speech_front_end_shapes(case, rng):
    """The speech front end's normalize: mel spectrograms (64, T_i) in dB, T_i different per
    utterance, each sample's own statistics over time (axes=(1,)) or over everything, in one
    ragged_stats launch for the batch (normalize_stats.py); lengths past a block's 256 threads."""
    mels = [rng.normal(-40.0, 12.0, (64, int(t))).astype(np.float32) for t in (1, 37, 256, 257, 1999, 640)]
    kwargs = SPEECH_CASES[case]
    _compare(mels, lambda x: fn.normalize(x, **kwargs), layout="ft")


@pytest.mark.parametrize("axes", [[1], [0, 1]], ids=["over_time", "all_axes"])
def test_float16_input_ragged_statistics(axes, rng):
    """float16 samples: the statistics kernel's half-precision loads."""
    mels = [rng.normal(-40.0, 12.0, (64, int(t))).astype(np.float16) for t in (5, 300, 900)]
    _compare(mels, lambda x: fn.normalize(x, axes=axes), layout="ft")


@pytest.mark.parametrize("same_size", [True, False], ids=["dense", "ragged"])
def test_input_in_one_flat_buffer(same_size, make_images):
    """A GPU operator's output (one buffer for the batch) as the input."""
    images = _images(make_images, same_size, "u8")
    _compare(images, lambda x: fn.normalize(fn.brightness(x, brightness=1.0), axis_names="HW"))


def test_constant_samples_give_shift(make_images):
    """A computed standard deviation of zero maps the sample to ``shift``, as on the CPU."""
    images = [np.full((20, 30, 3), 7, np.uint8), np.full((11, 9, 3), 200, np.uint8)] + make_images(2, 12, 40)
    _compare(images, lambda x: fn.normalize(x, shift=0.25))
    _compare(images, lambda x: fn.normalize(x, axis_names="HW", shift=0.25, dtype=types.UINT8))


@pytest.mark.parametrize("same_size", [True, False], ids=["dense", "ragged"])
def test_dense_and_ragged_batches_map_in_one_kernel_launch(same_size, make_images, monkeypatch):
    """A dense batch (one size: a resized batch) maps by normalize.cu as a ragged one does, not by
    CuPy's float64 steps (dense_map), with the CPU's values."""
    import importlib

    mod = importlib.import_module(MODULE)
    maps, cupy_maps = [], []
    real_map, real_dense = mod._map, mod.dense_map
    monkeypatch.setattr(mod, "_map", lambda *a: maps.append(1) or real_map(*a))
    monkeypatch.setattr(mod, "dense_map", lambda *a: cupy_maps.append(1) or real_dense(*a))
    _compare(_images(make_images, same_size, "u8"), lambda x: fn.normalize(x, axis_names="HW"))
    _compare(_images(make_images, same_size, "u8"), lambda x: fn.normalize(x, mean=128.0, stddev=50.0))
    assert len(maps) >= 2 and not cupy_maps  # (each comparison runs the pipeline at least once)


def test_int64_output_takes_the_host_fallback_with_the_same_result(make_images):
    _compare(make_images(N, 12, 60), lambda x: fn.normalize(x, dtype=types.INT64, scale=1000.0),
             expect_fallback=True)


def test_errors_name_the_argument_as_on_the_cpu(make_images):
    images = make_images(3, 12, 60)
    means = [np.array([1.0, 2.0], np.float32)] * 3
    with pytest.raises(StokerError, match="normalize: argument 'mean'"):
        _run(images, lambda x: fn.normalize(x, mean=fn.external_source(source=[means], cycle=True),
                                            axis_names="HW"), True)
    with pytest.raises(StokerError, match="batch=True"):
        _run(images, lambda x: fn.normalize(x, batch=True, axis_names="H"), True)
