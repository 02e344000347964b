"""GPU lookup_table, one_hot and element_extract (stoker/operators/tensor/gpu_lookup.py) against
the CPU operators: the same pipelines on both devices over dense and ragged batches of several
key types, and each GPU path called directly on the three ways a device batch is stored (one dense
array, one buffer with gaps between the samples, a list of arrays). All three operators only move
or compare values, so every result must equal the CPU's to the bit (tolerance: none)."""

import numpy as np
import pytest
from gpu_pipelines import compare_exact, load_gpu_module, run_pipeline

import stoker.fn as fn
import stoker.types as types
from stoker import pipeline_def
from stoker.errors import StokerError
from stoker.operators import gpu_registry

pytestmark = pytest.mark.gpu

MODULE = "stoker.operators.tensor.gpu_lookup"


@pytest.fixture(autouse=True, scope="module")
def _gpu_lookup():
    load_gpu_module(MODULE)


def _keys(rng, dtype, shapes, lo=-3, hi=12):
    """Integer keys (and labels) of ``dtype`` in [lo, hi), some outside every table."""
    info = np.iinfo(dtype)
    return [rng.integers(max(lo, info.min), min(hi, info.max), s).astype(dtype) for s in shapes]


RAGGED = [(4, 5), (7, 3), (1, 9), (6, 6)]
DENSE = [(5, 4)] * 4


# --- pipelines on both devices ---------------------------------------------------------------

LOOKUPS = {
    "float default": lambda t: dict(keys=[0, 1, 2, 5, 9], values=[0.5, -1.0, 2.25, 7.0, 1e6], default_value=-1.5),
    "uint8 saturates": lambda t: dict(keys=[1, 3, 4], values=[300.7, -2.5, 17.5], default_value=7, dtype=t.UINT8),
    "int64": lambda t: dict(keys=[0, 2, 10], values=[-5, 1e12, 3], dtype=t.INT64),
    "float16": lambda t: dict(keys=[1, 2], values=[0.1, 65504], default_value=-0.3, dtype=t.FLOAT16),
    "bool": lambda t: dict(keys=[2, 3], values=[1, 0], default_value=5, dtype=t.BOOL),
    "deprecated output_dtype": lambda t: dict(keys=[3], values=[9.5], output_dtype=t.INT16),
    "no keys": lambda t: dict(default_value=4.0),
    "widest table": lambda t: dict(keys=[65535, 0], values=[2.0, 1.0]),
}


@pytest.mark.parametrize("key_type", [np.uint8, np.int16, np.int32, np.uint16, np.int64], ids=str)
@pytest.mark.parametrize("shapes", [RAGGED, DENSE], ids=["ragged", "dense"])
@pytest.mark.parametrize("case", sorted(LOOKUPS))
def test_lookup_table_matches_cpu(case, shapes, key_type, rng):
    keys = _keys(rng, key_type, shapes)
    kw = LOOKUPS[case](types)
    compare_exact(lambda x: fn.lookup_table(x, **kw), keys, "lookup_table", "HW")


def test_lookup_table_extreme_keys_and_empty_samples():
    """64-bit keys past the table (2**63 + 1 turns negative when read as a signed index) and
    samples without elements."""
    big = [np.array([[0, 2, 2**63 + 1], [2**64 - 1, 1, 5]], np.uint64), np.zeros((0, 3), np.uint64),
           np.array([[3, 2**40, 1]], np.uint64)]
    signed = [np.array([-2**63, -1, 0, 2, 2**62], np.int64), np.zeros(0, np.int64)]
    compare_exact(lambda x: fn.lookup_table(x, keys=[0, 1, 2], values=[1, 2, 3], default_value=-1), big,
                  "lookup_table", "HW")
    compare_exact(lambda x: fn.lookup_table(x, keys=[0, 1, 2], values=[1, 2, 3], default_value=-1), signed,
                  "lookup_table", "W")


def test_lookup_table_on_a_batch_in_one_buffer(make_images):
    """Keys from a GPU operator that writes the batch into one buffer (brightness): one launch over it."""
    images = make_images(4, 10, 30)
    kw = dict(keys=list(range(0, 256, 3)), values=[float(v) / 3 for v in range(0, 256, 3)], default_value=-1.0)
    compare_exact(lambda x: fn.lookup_table(fn.brightness(x, brightness=1.0), **kw), images, "lookup_table")


def test_lookup_table_float_keys_fail_like_the_cpu_through_the_fallback():
    keys = [np.array([1.0, 2.0], np.float32)]
    before = gpu_registry.FALLBACKS["lookup_table"]
    for gpu in (True, False):
        with pytest.raises(StokerError, match="lookup_table: the input must hold integers, got float32"):
            run_pipeline(lambda x: fn.lookup_table(x, keys=[1], values=[2.0]), [keys], gpu, "W")
    assert gpu_registry.FALLBACKS["lookup_table"] > before


def test_lookup_table_bad_argument_fails_like_the_cpu():
    keys = [np.array([1, 2], np.int32)]
    for gpu in (True, False):
        with pytest.raises(StokerError, match="lookup_table.*'values'"):
            run_pipeline(lambda x: fn.lookup_table(x, keys=[1, 2], values=[1.0]), [keys], gpu, "W")


ONE_HOTS = {
    "default": dict(num_classes=6),
    "axis 0 named": dict(num_classes=5, axis=0, axis_name="K"),
    "axis 1": dict(num_classes=4, axis=1),
    "axis 2 (last, by index)": dict(num_classes=3, axis=2, axis_name="K"),
    "uint8 wrapped on": dict(num_classes=7, dtype=types.UINT8, on_value=300.7, off_value=3.9),
    "int16 negative off": dict(num_classes=9, dtype=types.INT16, on_value=2.5, off_value=-3.9),
    "float16": dict(num_classes=6, dtype=types.FLOAT16, on_value=0.1, off_value=-0.25),
    "int64 out": dict(num_classes=12, dtype=types.INT64, on_value=-1),
}


@pytest.mark.parametrize("label_type", [np.int32, np.uint8, np.int64, np.uint16], ids=str)
@pytest.mark.parametrize("shapes", [RAGGED, DENSE], ids=["ragged", "dense"])
@pytest.mark.parametrize("case", sorted(ONE_HOTS))
def test_one_hot_matches_cpu(case, shapes, label_type, rng):
    labels = _keys(rng, label_type, shapes, -2, 10)
    compare_exact(lambda x: fn.one_hot(x, **ONE_HOTS[case]), labels, "one_hot", "HW")


def test_one_hot_of_float_labels():
    """Float labels count by their int64 cast on the CPU: truncated (-0.5 is class 0); NaN,
    infinities and values past int64 are no class (the cast gives INT64_MIN on x86, where these
    tests run; elsewhere NaN may cast to 0 on the CPU)."""
    labels = [np.array([[0.0, 2.9, -0.5, np.nan], [np.inf, -np.inf, 1e30, 5.999]], np.float32),
              np.array([[1.5, -1.0, 3.0, 4.0], [2.0, 0.25, -2.5, 6.0]], np.float32)]
    with np.errstate(invalid="ignore"):
        compare_exact(lambda x: fn.one_hot(x, num_classes=6), labels, "one_hot", "HW")
        compare_exact(lambda x: fn.one_hot(x, num_classes=6, axis=0), [a.astype(np.float64) for a in labels],
                      "one_hot", "HW")
        compare_exact(lambda x: fn.one_hot(x, num_classes=6, axis=1), [a.astype(np.float16) for a in labels],
                      "one_hot", "HW")


def test_one_hot_of_scalars_and_one_element_samples():
    """0-d samples and one-element samples both give a 1D output of num_classes values."""
    compare_exact(lambda x: fn.one_hot(x, num_classes=5), [np.int64(3), np.int64(9), np.int64(0)], "one_hot", "")
    ones = [np.array([4], np.uint8), np.array([0], np.uint8), np.array([7], np.uint8)]
    compare_exact(lambda x: fn.one_hot(x, num_classes=5, axis=0), ones, "one_hot", "")
    compare_exact(lambda x: fn.one_hot(x, num_classes=5), [np.array([[2]], np.int32), np.array([[1]], np.int32)],
                  "one_hot", "HW")


def test_one_hot_extreme_labels_and_empty_samples():
    labels = [np.array([2**63 + 2, 1, 2**64 - 1, 3], np.uint64), np.zeros(0, np.uint64),
              np.array([0, 4, 4], np.uint64)]
    compare_exact(lambda x: fn.one_hot(x, num_classes=5), labels, "one_hot", "W")
    compare_exact(lambda x: fn.one_hot(x, num_classes=5, axis=0, axis_name="K"), labels, "one_hot", "W")


def test_one_hot_on_a_batch_in_one_buffer(make_images):
    """Labels in one buffer (a GPU operator's output): one launch with the new axis last, per
    sample with it in front."""
    images = make_images(3, 4, 9)
    compare_exact(lambda x: fn.one_hot(fn.brightness(x, brightness=1.0), num_classes=256), images, "one_hot")
    compare_exact(lambda x: fn.one_hot(fn.brightness(x, brightness=1.0), num_classes=200, axis=1), images,
                  "one_hot")


def test_one_hot_axis_out_of_range_fails_like_the_cpu_through_the_fallback():
    labels = [np.array([1, 2], np.int32), np.array([0], np.int32)]  # the second sample is a scalar
    before = gpu_registry.FALLBACKS["one_hot"]
    for gpu in (True, False):
        with pytest.raises(StokerError, match="one_hot: argument 'axis': 1 is out of range for 0D samples"):
            run_pipeline(lambda x: fn.one_hot(x, num_classes=3, axis=1), [labels], gpu, "W")
    assert gpu_registry.FALLBACKS["one_hot"] > before


def test_one_hot_bad_argument_fails_like_the_cpu():
    for gpu in (True, False):
        with pytest.raises(StokerError, match="one_hot.*'num_classes'"):
            run_pipeline(lambda x: fn.one_hot(x), [[np.array([1], np.int32)]], gpu, "W")


def _run_outputs(build, batch, gpu: bool, layout: str):
    """Every output of ``build`` (several, for element_extract): (host samples, layout) each."""

    @pipeline_def(batch_size=len(batch), num_threads=1, device_id=0, seed=1)
    def pipe():
        x = fn.external_source(source=[batch], cycle=True, layout=layout)
        return build(x.gpu() if gpu else x)

    p = pipe()
    p.build()
    outs = p.run()
    p.close()
    return [([np.asarray(a) for a in (o.as_cpu() if gpu else o).samples()], o.layout()) for o in outs]


def _compare_outputs(build, batch, name, layout):
    before = gpu_registry.FALLBACKS[name]
    got = _run_outputs(build, batch, True, layout)
    assert gpu_registry.FALLBACKS[name] == before, "the host fallback ran instead of the GPU path"
    want = _run_outputs(build, batch, False, layout)
    assert len(got) == len(want)
    for (g, g_lay), (w, w_lay) in zip(got, want):
        assert g_lay == w_lay and len(g) == len(w)
        for a, b in zip(g, w):
            assert a.shape == b.shape and a.dtype == b.dtype
            np.testing.assert_array_equal(a, b)
    return got


@pytest.mark.parametrize("same_size", [True, False], ids=["dense", "ragged"])
def test_element_extract_matches_cpu(same_size, make_images):
    frames = [3, 3, 3] if same_size else [3, 5, 4]
    sides = [12, 12, 12] if same_size else [12, 29, 17]  # (frames of one clip share a size)
    clips = [np.stack([make_images(1, s, s + 1)[0] for _ in range(f)]) for f, s in zip(frames, sides)]
    got = _compare_outputs(lambda x: tuple(fn.element_extract(x, element_map=[2, 0, 2])), clips,
                           "element_extract", "FHWC")
    assert len(got) == 3 and got[0][1] == "HWC"


def test_element_extract_of_a_batch_in_one_buffer_and_1d_samples(make_images):
    volumes = [np.stack([make_images(1, s, s + 1)[0] for _ in range(f)]) for f, s in ((2, 10), (4, 19), (3, 14))]
    _compare_outputs(lambda x: tuple(fn.element_extract(fn.brightness(x, brightness=1.0), element_map=[1, 0])),
                     volumes, "element_extract", "DHWC")
    vectors = [np.arange(5, dtype=np.int16), np.arange(3, dtype=np.int16) * 7]
    _compare_outputs(lambda x: fn.element_extract(x, element_map=[2]), vectors, "element_extract", "F")


def test_element_extract_out_of_range_fails_like_the_cpu_through_the_fallback():
    clips = [np.zeros((4, 2, 3), np.uint8), np.zeros((2, 2, 3), np.uint8)]
    before = gpu_registry.FALLBACKS["element_extract"]
    for gpu in (True, False):
        with pytest.raises(StokerError, match="element_map': index 3 is out of range for 2 elements"):
            _run_outputs(lambda x: fn.element_extract(x, element_map=[0, 3])[0], clips, gpu, "FHW")
    assert gpu_registry.FALLBACKS["element_extract"] > before


def test_element_extract_bad_argument_fails_like_the_cpu():
    for gpu in (True, False):
        with pytest.raises(StokerError, match="element_extract.*'element_map'"):
            _run_outputs(lambda x: fn.element_extract(x, element_map=[]), [np.zeros((2, 3))], gpu, "FW")


# --- each path on each way of storing a device batch --------------------------------------------

def _stored(cp, samples, how: str, layout: str):
    """``samples`` as a TensorListGPU: "dense" (one (N, ...) array), "flat" (one buffer, a gap of
    junk between samples) or "list" (one array per sample)."""
    from stoker.tensors_gpu import TensorListGPU

    if how == "dense":
        return TensorListGPU(cp.asarray(np.stack(samples)), layout)
    if how == "list":
        return TensorListGPU([cp.asarray(s) for s in samples], layout)
    gap = 3
    sizes = np.array([s.size for s in samples], np.int64)
    offsets = np.concatenate([[0], np.cumsum(sizes + gap)[:-1]]).astype(np.int64)
    buf = np.full(int(sizes.sum()) + gap * len(samples), 9, samples[0].dtype)
    for o, s in zip(offsets, samples):
        buf[o:o + s.size] = s.reshape(-1)
    shapes = np.asarray([s.shape for s in samples], np.int64).reshape(len(samples), -1)
    return TensorListGPU.from_flat(cp.asarray(buf), offsets, shapes, layout)


def _direct(name, kwargs, samples, how, layout, batch_ctx, cp):
    """The GPU function on a batch stored ``how`` and the CPU operator on the same samples: equal."""
    from stoker.operators.base import BatchContext
    from stoker.operators.schema import get_operator
    from stoker.tensors import TensorListCPU

    cls = get_operator(name)
    static, _ = cls.schema.bind(kwargs, lambda v: False)
    before = gpu_registry.FALLBACKS[name]
    got = cls(static, "gpu").run_gpu(batch_ctx, [_stored(cp, samples, how, layout)], {})
    assert gpu_registry.FALLBACKS[name] == before
    want = cls(static, "cpu").run_cpu(BatchContext(batch_size=len(samples)), [TensorListCPU(samples, layout)], {})
    batch_ctx.stream.synchronize()
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.layout() == w.layout() and len(g) == len(w)
        for a, b in zip(g.as_cpu().samples(), w.samples()):
            a, b = np.asarray(a), np.asarray(b)
            assert a.shape == b.shape and a.dtype == b.dtype
            np.testing.assert_array_equal(a, b)
    return got


@pytest.mark.parametrize("how", ["dense", "flat", "list"])
def test_each_storage_of_the_input_batch(how, rng, batch_ctx, cp):
    shapes = DENSE if how == "dense" else RAGGED
    keys = _keys(rng, np.int16, shapes)
    _direct("lookup_table", dict(keys=[0, 2, 4], values=[1.0, 2.0, 3.0], default_value=-1.0), keys, how, "HW",
            batch_ctx, cp)
    for kw in (dict(num_classes=5), dict(num_classes=4, axis=0), dict(num_classes=3, axis=1, axis_name="K")):
        _direct("one_hot", kw, keys, how, "HW", batch_ctx, cp)
    got = _direct("element_extract", dict(element_map=[0, 0]), keys, how, "HW", batch_ctx, cp)
    assert got[0].layout() == "W"


def test_element_extract_returns_views_of_the_input(rng, batch_ctx, cp):
    """No copy: each output sample starts inside the input's memory, at its chosen row."""
    from stoker.operators.schema import get_operator

    cls = get_operator("element_extract")
    static, _ = cls.schema.bind(dict(element_map=[2]), lambda v: False)
    for how, shapes in (("dense", DENSE), ("flat", [(4, 5), (7, 3), (3, 9)]), ("list", [(4, 5), (3, 2)])):
        x = _stored(cp, _keys(rng, np.int32, shapes), how, "HW")
        (out,) = cls(static, "gpu").run_gpu(batch_ctx, [x], {})
        for s_in, s_out in zip(x.samples(), out.samples()):
            assert s_out.data.ptr == s_in.data.ptr + 2 * s_in.strides[0]
