"""GPU placements without a pixel kernel (issue 16: stoker/operators/tensor/gpu_metadata.py,
gpu_subscript.py, stoker/operators/random/gpu_random.py) against the CPU operators on a real
device: ``shapes``, ``get_property``, ``permute_batch``, ``per_frame``, ``copy``, ``constant``,
``_subscript`` and the random generators give the CPU's samples and layouts, for dense and ragged
batches, without the host fallback."""

import numpy as np
import pytest
from gpu_pipelines import run_pipeline

import stoker.fn as fn
import stoker.types as types
from stoker.operators import gpu_registry

pytestmark = pytest.mark.gpu


def _batch(make_images, ragged: bool, dtype=np.uint8):
    images = make_images(6, 8, 40) if ragged else make_images(6, 24, 25)
    return [im.astype(dtype) for im in images]


def _same(build, images, name, iterations=1):
    """``build`` on the GPU and on the CPU: the same samples (to the bit) and layouts, and
    operator ``name`` did not go through the host fallback."""
    before = gpu_registry.FALLBACKS[name]
    got = run_pipeline(build, [images], True, iterations=iterations)
    assert gpu_registry.FALLBACKS[name] == before, "the host fallback ran"
    want = run_pipeline(build, [images], False, iterations=iterations)
    for (g, g_layout), (w, w_layout) in zip(got, want):
        assert g_layout == w_layout and len(g) == len(w)
        for a, b in zip(g, w):
            assert a.shape == b.shape and a.dtype == b.dtype
            np.testing.assert_array_equal(a, b)
    return got


CASES = {
    "shapes": ("shapes", lambda x: fn.shapes(x)),
    "shapes_int32": ("shapes", lambda x: fn.shapes(x, dtype=types.INT32)),
    "layout": ("get_property", lambda x: fn.get_property(x, key="layout")),
    "permute_static": ("permute_batch", lambda x: fn.permute_batch(x, indices=[5, 0, 0, 3, 2, 1])),
    "permute_random": ("permute_batch", lambda x: fn.permute_batch(x, indices=fn.batch_permutation())),
    "per_frame": ("per_frame", lambda x: fn.per_frame(x, replace=True)),
    "copy": ("copy", lambda x: fn.copy(x)),
    "last_axis": ("_subscript", lambda x: x[..., 0]),
    "slices": ("_subscript", lambda x: x[1:7, :, ::2]),
    "negative_steps": ("_subscript", lambda x: x[::-1, -2::-3, 1]),
    "new_axis": ("_subscript", lambda x: x[None, 2:5, ..., None]),
    "scalar": ("_subscript", lambda x: x[-1, 3, 2]),
    "empty": ("_subscript", lambda x: x[:, 100:]),
    "per_sample_index": ("_subscript",
                         lambda x: x[fn.cast(fn.random.uniform(range=(0, 6)), dtype=types.INT32), :, 0]),
    "per_sample_slice": ("_subscript",
                         lambda x: x[:, fn.cast(fn.random.uniform(range=(-6, 6)), dtype=types.INT32)::-1]),
}


@pytest.mark.parametrize("ragged", [False, True], ids=["dense", "ragged"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_gpu_operator_equals_cpu(case, ragged, make_images):
    name, build = CASES[case]
    _same(build, _batch(make_images, ragged), name, iterations=2)


@pytest.mark.parametrize("dtype", [np.uint8, np.int16, np.float32, np.float64])
def test_gpu_subscript_every_element_size(dtype, make_images):
    _same(lambda x: x[::-2, 1:-1, ::-1], _batch(make_images, True, dtype), "_subscript")


def test_gpu_get_property_source_info_on_the_device():
    """The samples' sources as bytes on the device (through a GPU copy), equal to the CPU's."""
    from stoker import pipeline_def

    files = [np.full((3, 3, 1), i, np.uint8) for i in range(4)]

    @pipeline_def(batch_size=4, num_threads=1, device_id=0)
    def pipe(gpu):
        x = fn.external_source(source=[files], cycle=True, layout="HWC")
        return fn.get_property(fn.copy(x.gpu()) if gpu else x, key="source_info")

    outs = []
    for gpu in (True, False):
        p = pipe(gpu)
        p.build()
        (out,) = p.run()
        if gpu:
            assert type(out).__name__ == "TensorListGPU"
            out = out.as_cpu()
        outs.append([bytes(np.asarray(s)) for s in out.samples()])
        p.close()
    assert outs[0] == outs[1]


RANDOM = {
    "uniform": lambda d: fn.random.uniform(range=(-2, 5), shape=(3,), device=d),
    "uniform_int": lambda d: fn.random.uniform(range=(0, 10), dtype=types.INT32, device=d),
    "normal": lambda d: fn.random.normal(mean=1.0, stddev=fn.random.uniform(range=(1, 2)), device=d),
    "coin_flip": lambda d: fn.random.coin_flip(probability=0.4, shape=(16,), device=d),
}


@pytest.mark.parametrize("case", sorted(RANDOM))
def test_gpu_random_values_equal_across_devices(case, make_images):
    images = _batch(make_images, False)
    got = run_pipeline(lambda x: RANDOM[case]("gpu"), [images], True, iterations=3)
    want = run_pipeline(lambda x: RANDOM[case]("cpu"), [images], True, iterations=3)
    for (g, _), (w, _) in zip(got, want):
        for a, b in zip(g, w):
            assert a.dtype == b.dtype
            np.testing.assert_array_equal(a, b)


def test_gpu_random_shaped_like_a_gpu_input(make_images):
    images = _batch(make_images, True)
    _same(lambda x: fn.random.coin_flip(x, dtype=types.UINT8), images, "random.coin_flip", iterations=2)


def test_gpu_constant_is_not_corrupted_by_an_in_place_operator(make_images):
    """A constant on the GPU followed by operators that may write into their input (arithmetic,
    which takes a donated input's buffer, after a cast; brightness): every iteration sees the
    constant's values, as the CPU pipeline does."""
    images = _batch(make_images, False)

    def build(x):
        c = fn.constant(idata=[10, 20, 30], shape=(1, 1, 3), dtype=types.UINT8, device=x.device, layout="HWC")
        return fn.brightness(fn.cast(c, dtype=types.FLOAT) / 255.0 * 2.0, brightness=1.5)

    _same(build, images, "constant", iterations=4)

    def direct(x):
        return fn.constant(fdata=[1.0, 2.0, 3.0], device=x.device) * 2.0 + 1.0

    for samples, _ in _same(direct, images, "constant", iterations=4):
        for s in samples:
            assert s.tolist() == [3.0, 5.0, 7.0]
