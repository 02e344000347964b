"""GPU placements without a pixel kernel (issue 16) on the null device (tests/null_device.py: CuPy's
host half on NumPy, so copies, views and uploads give real values): ``shapes``, ``get_property``,
``permute_batch``, ``per_frame``, ``copy``, ``constant``, ``random.uniform`` / ``normal`` /
``coin_flip`` and ``_subscript`` (whose window copy is emulated in NumPy, as in
test_gpu_window_copy_plans.py). Each gives the CPU operator's samples, layouts and sources, on the
device, and none goes through the host fallback."""

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import null_device  # noqa: E402
import test_gpu_window_copy_plans as window_plans  # noqa: E402

from stoker.operators import gpu_registry  # noqa: E402
from stoker.operators.base import BatchContext  # noqa: E402
from stoker.operators.schema import get_operator  # noqa: E402

N = 5


@pytest.fixture
def device(monkeypatch):
    """The null device, with the window copy emulated; checks that nothing fell back to the host."""
    with null_device.installed() as cp:
        for item in (1, 2, 4, 8):
            monkeypatch.setitem(null_device.EMULATED, f"window_copy_{item}", window_plans._window_copy(item))
        before = dict(gpu_registry.FALLBACKS)
        yield cp
        assert dict(gpu_registry.FALLBACKS) == before, "the host fallback ran"


def _images(n=N, ragged=True, dtype=np.uint8, seed=0):
    rng = np.random.default_rng(seed)
    hw = rng.integers(2, 9, (n, 2)) if ragged else np.full((n, 2), 6)
    return [rng.integers(0, 250, (int(h), int(w), 3)).astype(dtype) for h, w in hw]


def _run(build, images, gpu: bool, layout="HWC", iterations=1):
    """Per iteration, the outputs of ``build(x)`` (x: an external source of ``images``, moved to
    the GPU when ``gpu``) as (host samples, layout, sources); GPU outputs must be device batches."""
    import stoker.fn as fn
    from stoker import pipeline_def

    @pipeline_def(batch_size=len(images), num_threads=1, device_id=0, seed=11, exec_async=False,
                  exec_pipelined=False, prefetch_queue_depth=1)
    def pipe():
        x = fn.external_source(source=[images], cycle=True, layout=layout)
        out = build(x.gpu() if gpu else x)
        return out if isinstance(out, tuple) else (out,)

    p = pipe()
    p.build()
    runs = []
    for _ in range(iterations):
        outs = []
        for out in p.run():
            assert (type(out).__name__ == "TensorListGPU") == gpu
            host = out.as_cpu() if gpu else out
            outs.append(([np.asarray(s) for s in host.samples()], out.layout(), list(host.source_info())))
        runs.append(outs)
    p.close()
    return runs


def _same_as_cpu(build, images, layout="HWC", iterations=1, sources=True):
    got, want = _run(build, images, True, layout, iterations), _run(build, images, False, layout, iterations)
    for g_run, w_run in zip(got, want):
        for (g, g_layout, g_src), (w, w_layout, w_src) in zip(g_run, w_run):
            assert g_layout == w_layout
            assert len(g) == len(w)
            if sources:
                assert g_src == w_src
            for a, b in zip(g, w):
                assert a.shape == b.shape and a.dtype == b.dtype, (a.shape, b.shape, a.dtype, b.dtype)
                np.testing.assert_array_equal(a, b)
    return got


def _op(name, **kw):
    cls = get_operator(name)
    static, _ = cls.schema.bind(kw, lambda v: False)
    return cls(static, "gpu")


def _device_batch(samples, layout="HWC", form="flat", sources=None):
    """``samples`` as a GPU batch: one dense array, one flat buffer, or a list of arrays; sources
    ``img{i}.jpg`` unless given."""
    from stoker.tensors_gpu import TensorListGPU

    x, _ = null_device.device_batch(samples, layout, dense=form == "dense")
    sources = sources or [f"img{i}.jpg" for i in range(len(samples))]
    if form == "list":
        return TensorListGPU([s.copy() for s in x.samples()], layout, sources)
    return TensorListGPU(x, layout, sources)


# --- shapes, get_property -------------------------------------------------------------------------

@pytest.mark.parametrize("ragged", [False, True], ids=["dense", "ragged"])
@pytest.mark.parametrize("dtype", [None, "INT32", "FLOAT"])
def test_shapes_of_a_gpu_batch(device, ragged, dtype):
    import stoker.fn as fn
    import stoker.types as types

    kw = {} if dtype is None else {"dtype": getattr(types, dtype)}
    (((got, _, _),),) = _same_as_cpu(lambda x: fn.shapes(x, **kw), _images(ragged=ragged))
    assert got[0].dtype == (np.int64 if dtype is None else np.dtype(types.to_numpy_type(kw["dtype"])))


def test_shapes_of_a_list_backed_batch_is_one_dense_upload(device):
    images = _images()
    (out,) = gpu_registry.lookup("shapes")(_op("shapes"), BatchContext(N), [_device_batch(images, form="list")], {})
    assert out.dense() is not None and out.dense().shape == (N, 3)
    np.testing.assert_array_equal(out.dense(), [im.shape for im in images])


@pytest.mark.parametrize("key", ["layout", "source_info"])
def test_get_property_of_a_gpu_batch(device, key):
    import stoker.fn as fn

    images = _images()
    x = _device_batch(images, sources=[f"/data/{'x' * i}.jpg" for i in range(N)])  # of varied lengths
    (out,) = gpu_registry.lookup("get_property")(_op("get_property", key=key), BatchContext(N), [x], {})
    want = [b"HWC"] * N if key == "layout" else [s.encode() for s in x.source_info()]
    assert [bytes(np.asarray(s)) for s in out.as_cpu().samples()] == want
    assert all(np.asarray(s).dtype == np.uint8 and np.asarray(s).ndim == 1 for s in out.as_cpu().samples())
    _same_as_cpu(lambda x: fn.get_property(x, key=key), images, sources=False)


# --- permute_batch ------------------------------------------------------------------------------

@pytest.mark.parametrize("ragged", [False, True], ids=["dense", "ragged"])
def test_permute_batch_reorders_and_repeats(device, ragged):
    import stoker.fn as fn

    images = _images(ragged=ragged)
    _same_as_cpu(lambda x: fn.permute_batch(x, indices=[4, 0, 0, 2, 1]), images)
    _same_as_cpu(lambda x: fn.permute_batch(x, indices=fn.batch_permutation()), images, iterations=2)


@pytest.mark.parametrize("form", ["dense", "flat", "list"])
def test_permute_batch_sample_order_and_sources(device, form):
    images = _images(ragged=form != "dense")
    x = _device_batch(images, form=form)
    idx = [3, 3, 1, 0, 4]
    (out,) = gpu_registry.lookup("permute_batch")(_op("permute_batch", indices=idx), BatchContext(N), [x], {})
    assert out.source_info() == [f"img{i}.jpg" for i in idx]
    for s, i in zip(out.as_cpu().samples(), idx):
        np.testing.assert_array_equal(s, images[i])
    if form == "flat":  # views of the input's buffer: no copy, and not offered for writing in place
        assert out.memory_ids() == x.memory_ids() and not out.fresh


def test_permute_batch_refuses_what_the_cpu_refuses(device):
    from stoker.errors import OperatorError

    x = _device_batch(_images())
    run = gpu_registry.lookup("permute_batch")
    with pytest.raises(OperatorError, match="out of range"):
        run(_op("permute_batch", indices=[0, 1, 2, 3, 5]), BatchContext(N), [x], {})
    with pytest.raises(OperatorError, match="has 2 entries"):
        run(_op("permute_batch", indices=[0, 1]), BatchContext(N), [x], {})


# --- per_frame, copy ------------------------------------------------------------------------------

@pytest.mark.parametrize("layout,replace,want", [("FHW", False, "FHW"), ("", False, "F*"), ("CHW", True, "FHW")])
def test_per_frame_relabels_without_touching_the_data(device, layout, replace, want):
    x = _device_batch([im[..., 0] for im in _images()], layout=layout)
    (out,) = gpu_registry.lookup("per_frame")(_op("per_frame", replace=replace), BatchContext(N), [x], {})
    assert out.layout() == want
    assert out.memory_ids() == x.memory_ids()
    for a, b in zip(out.as_cpu().samples(), x.as_cpu().samples()):
        np.testing.assert_array_equal(a, b)


def test_per_frame_refuses_what_the_cpu_refuses(device):
    x = _device_batch([im[..., 0] for im in _images()], layout="CHW")
    with pytest.raises(ValueError, match="does not start with 'F'"):
        gpu_registry.lookup("per_frame")(_op("per_frame"), BatchContext(N), [x], {})


@pytest.mark.parametrize("form", ["dense", "flat", "list"])
def test_copy_is_a_device_copy(device, form):
    import stoker.fn as fn

    images = _images(ragged=form != "dense")
    x = _device_batch(images, form=form)
    (out,) = gpu_registry.lookup("copy")(_op("copy"), BatchContext(N), [x], {})
    assert out.fresh and not out.memory_ids() & x.memory_ids()
    assert out.layout() == "HWC" and out.source_info() == x.source_info()
    for a, b in zip(out.as_cpu().samples(), images):
        np.testing.assert_array_equal(a, b)
    _same_as_cpu(lambda x: fn.copy(x), images)


# --- constant -----------------------------------------------------------------------------------

def test_gpu_constant_is_uploaded_once_and_never_written_in_place(device, monkeypatch):
    import stoker.fn as fn
    import stoker.types as types
    from stoker.operators.tensor import gpu_metadata

    uploads = []
    real = gpu_metadata.upload_table
    monkeypatch.setattr(gpu_metadata, "upload_table", lambda t, b: uploads.append(t.shape) or real(t, b))

    def build(x):
        c = fn.constant(fdata=[1.5, 2.0, -3.0, 0.5], shape=(4,), dtype=types.FLOAT, device="gpu", layout="C")
        return c * 2.0, fn.shapes(x)  # (the product may write into a donated input: not the constant)

    runs = _run(build, _images(), True, iterations=3)
    for (prod, layout, _), _ in runs:
        assert layout == "C"
        for s in prod:
            np.testing.assert_array_equal(s, [3.0, 4.0, -6.0, 1.0])
    assert uploads.count((N, 4)) == 1  # the constant's one upload (shapes uploads its own each batch)


def test_gpu_constant_serves_smaller_batches_from_its_upload(device):
    op = _op("constant", idata=[1, 2], layout="X")
    run = gpu_registry.lookup("constant")
    (big,) = run(op, BatchContext(4, device_id=0), [], {})
    (small,) = run(op, BatchContext(2, device_id=0), [], {})
    assert small.memory_ids() == big.memory_ids() and not small.fresh and not big.fresh
    assert small.layout() == "X" and len(small) == 2 and small.as_cpu().samples()[1].tolist() == [1, 2]


# --- random -------------------------------------------------------------------------------------

RANDOM = {  # (fn, types, x, device) -> the generator under test, placed on `device`
    "uniform": lambda fn, types, x, d: fn.random.uniform(range=(-2, 5), device=d),
    "uniform_int": lambda fn, types, x, d: fn.random.uniform(range=(0, 10), shape=(2, 3), dtype=types.INT32,
                                                             device=d),
    "uniform_values": lambda fn, types, x, d: fn.random.uniform(values=[1.0, 7.0, 9.0], shape=(4,), device=d),
    "normal": lambda fn, types, x, d: fn.random.normal(mean=3.0, stddev=2.0, shape=(5,), device=d),
    "normal_arg": lambda fn, types, x, d: fn.random.normal(stddev=fn.random.uniform(range=(1, 2)), device=d),
    "coin_flip": lambda fn, types, x, d: fn.random.coin_flip(probability=0.3, shape=(7,), device=d),
    "coin_flip_like": lambda fn, types, x, d: fn.random.coin_flip(x, dtype=types.UINT8),
    "normal_like": lambda fn, types, x, d: fn.random.normal(x),
}


@pytest.mark.parametrize("case", sorted(RANDOM))
def test_gpu_random_values_equal_the_cpu_forms(device, case):
    """The same values as the CPU operator (same seed, iteration and samples), on the device; a
    GPU input (shape_like) gives each sample its shape."""
    import stoker.fn as fn
    import stoker.types as types

    runs = _same_as_cpu(lambda x: RANDOM[case](fn, types, x, x.device), _images(), iterations=2, sources=False)
    first, second = (np.concatenate([s.ravel() for s in run[0][0]]) for run in runs)
    assert not np.array_equal(first, second) or case.startswith("coin")  # a new draw each iteration


# --- _subscript -----------------------------------------------------------------------------------

SUBSCRIPTS = {
    "last_axis_index": lambda fn, types, x: x[..., 0],
    "slices_and_step": lambda fn, types, x: x[1:3, :, ::2],
    "reversed": lambda fn, types, x: x[::-1],
    "negative_step_and_index": lambda fn, types, x: x[:, ::-2, 1],
    "negative_index": lambda fn, types, x: x[-1],
    "new_axis": lambda fn, types, x: x[None, 2:, ..., None],
    "scalar": lambda fn, types, x: x[1, 2, 0],
    "reversed_window": lambda fn, types, x: x[5:1:-1, ..., -1:],
    "empty": lambda fn, types, x: x[:, 100:],
    "per_sample_index": lambda fn, types, x: x[fn.cast(fn.random.uniform(range=(0, 3)), dtype=types.INT32)],
    "per_sample_slice": lambda fn, types, x: x[:, fn.cast(fn.random.uniform(range=(-3, 2)), dtype=types.INT32)::-1, 0],
}


def _sub_images(ragged, dtype=np.uint8):
    rng = np.random.default_rng(5)
    hw = rng.integers(4, 10, (N, 2)) if ragged else np.full((N, 2), 7)
    return [rng.integers(0, 250, (int(h), int(w), 3)).astype(dtype) for h, w in hw]


@pytest.mark.parametrize("ragged", [False, True], ids=["dense", "ragged"])
@pytest.mark.parametrize("case", sorted(SUBSCRIPTS))
def test_gpu_subscript_equals_cpu(device, case, ragged):
    import stoker.fn as fn
    import stoker.types as types

    _same_as_cpu(lambda x: SUBSCRIPTS[case](fn, types, x), _sub_images(ragged))


@pytest.mark.parametrize("dtype", [np.uint8, np.int16, np.float32, np.float64])
def test_gpu_subscript_of_a_ragged_batch_is_one_window_copy(device, dtype):
    import stoker.fn as fn

    null_device.LAUNCHES.clear()
    _same_as_cpu(lambda x: x[::-1, 1:, 2], _sub_images(True, dtype))
    assert [name for name, _, _ in null_device.LAUNCHES].count(f"window_copy_{np.dtype(dtype).itemsize}") == 1
    del fn


def test_subscript_plan_is_numpy_view(device):
    """The pointers, shapes and strides planned for the whole batch are those of NumPy's view of
    each sample, for strided samples (a list of views) and random subscripts."""
    from stoker.operators.image.gpu_slice import sample_placement
    from stoker.operators.tensor.gpu_subscript import plan_views, sample_key, spec_columns
    from stoker.tensors_gpu import TensorListGPU

    rng = np.random.default_rng(9)
    hosts = [rng.integers(0, 9, (int(a), int(b), 4)).astype(np.int32) for a, b in rng.integers(3, 9, (N, 2))]
    views = [device.asarray(h)[::-1, 1::2] for h in hosts]
    x = TensorListGPU(views, "HWC")
    for _ in range(40):
        spec, args = _random_spec(rng)
        columns = spec_columns(spec, args, N)
        plan = plan_views(columns, *sample_placement(x))
        wants = []
        for i, v in enumerate(views):
            try:
                wants.append(np.asarray(v)[sample_key(columns, i)])
            except (IndexError, ValueError):
                assert len(plan) == 2 and plan[0] == i, (spec, plan)  # the first sample NumPy refuses
                break
        else:
            assert len(plan) == 3, (spec, plan)
            ptrs, shapes, strides = plan
            for i, want in enumerate(wants):
                assert tuple(shapes[i]) == want.shape
                moving = np.asarray(want.shape) > 1  # (NumPy's strides of extent-1 axes are arbitrary)
                assert tuple(strides[i][moving]) == tuple(np.asarray(want.strides)[moving])
                if want.size:
                    assert ptrs[i] == want.__array_interface__["data"][0]


def _random_spec(rng):
    """A random subscript of a 3-d sample: (spec, per-sample argument inputs)."""
    spec, args = [], {}
    axes = int(rng.integers(1, 4))
    for a in range(axes):
        r = rng.random()
        if r < 0.3:
            v = int(rng.integers(-4, 4))
            if rng.random() < 0.5:
                args[f"i{a}"] = [np.int32(rng.integers(-3, 3)) for _ in range(N)]
                v = f"i{a}"
            spec.append(("index", v))
        elif r < 0.4 and a == 0:
            spec.append(("ellipsis",))
        elif r < 0.5:
            spec.append(("newaxis",))
        else:
            parts = [None if rng.random() < 0.3 else int(rng.integers(-8, 8)) for _ in range(2)]
            step = None if rng.random() < 0.3 else int(rng.choice([-3, -2, -1, 1, 2, 3]))
            if rng.random() < 0.3:
                args[f"s{a}"] = [np.int64(rng.integers(-6, 6)) for _ in range(N)]
                parts[0] = f"s{a}"
            spec.append(("slice", *parts, step))
    return spec, args


def test_gpu_subscript_errors_name_the_sample(device):
    from stoker.errors import OperatorError

    images = _sub_images(True)
    x = _device_batch(images)
    first_short = int(np.argmax([im.shape[0] <= 5 for im in images]))
    run = gpu_registry.lookup("_subscript")
    with pytest.raises(OperatorError, match="index out of range") as e:
        run(_op("_subscript", spec=[("index", 5)]), BatchContext(N, sources=x.source_info()), [x], {})
    assert e.value.sample_index == first_short
    with pytest.raises(OperatorError, match="step cannot be zero"):
        run(_op("_subscript", spec=[("slice", None, None, 0)]), BatchContext(N), [x], {})
    with pytest.raises(OperatorError, match="too many indices"):
        run(_op("_subscript", spec=[("index", 0)] * 4), BatchContext(N), [x], {})


# --- host work per batch ------------------------------------------------------------------------

def _calls(run, *args) -> int:
    """Python function calls made by ``run(*args)``."""
    count = [0]

    def profile(frame, event, arg):
        if event == "call":
            count[0] += 1

    sys.setprofile(profile)
    try:
        run(*args)
    finally:
        sys.setprofile(None)
    return count[0]


HOST_COST = {  # name -> (operator arguments, argument inputs for n samples)
    "_subscript": ({"spec": [("slice", None, None, -1), ("index", "i1"), ("slice", 1, None, 2)]},
                   lambda n: {"i1": [np.int32(i % 3) for i in range(n)]}),
    "permute_batch": ({}, lambda n: {"indices": [np.int32(n - 1 - i) for i in range(n)]}),
    "copy": ({}, lambda n: {}),
    "shapes": ({}, lambda n: {}),
    "per_frame": ({"replace": True}, lambda n: {}),
}


@pytest.mark.parametrize("form", ["dense", "flat"])
@pytest.mark.parametrize("name", sorted(HOST_COST))
def test_host_calls_do_not_grow_with_the_batch(name, form):
    """The GPU path plans the batch as arrays: its Python calls are the same for 4 and 64 samples
    (a step per sample would add one or more per sample). On the bare null device: the window copy
    is not emulated (its emulation steps through the samples)."""
    with null_device.installed():
        _check_host_calls(name, form)


def _check_host_calls(name, form):
    kwargs, make_args = HOST_COST[name]
    op = _op(name, **kwargs)
    run = gpu_registry.lookup(name)
    calls = {}
    images = _sub_images(form == "flat")
    for n in (4, 64):
        samples = (images * (n // N + 1))[:n]
        args = make_args(n)
        run(op, BatchContext(n), [_device_batch(samples, form=form)], args)  # (warm-up: kernels loaded once)
        x = _device_batch(samples, form=form)
        calls[n] = _calls(run, op, BatchContext(n), [x], args)
    assert calls[64] - calls[4] <= 8, calls
