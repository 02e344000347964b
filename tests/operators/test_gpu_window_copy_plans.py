"""The GPU window copy (pad, slice, transpose) builds its kernel table from arrays (issue 16).

``gpu_slice.window_table`` builds for the whole batch at once the table ``window_rows`` builds
from per-sample views and windows (the code before issue 16, kept as the reference rule); here
both are compared exactly over random shapes, strided views, windows and fill values. Then the
kernel itself is emulated in NumPy (a line-by-line translation of ``kernels/window_copy.cu``)
on the null device (tests/null_device.py), so the GPU pad, slice and transpose run end to end
here and their outputs are compared with the CPU operators'. Last, a ragged transpose's host
calls do not grow with the batch.
"""

import ctypes
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import null_device  # noqa: E402

from stoker.operators.base import BatchContext  # noqa: E402
from stoker.operators.image import gpu_slice  # noqa: E402
from stoker.operators.schema import get_operator  # noqa: E402
from stoker.tensors import TensorListCPU  # noqa: E402


def _op(name, device="gpu", **kw):
    cls = get_operator(name)
    static, _ = cls.schema.bind(kw, lambda v: False)
    return cls(static, device)


def _raw(ptr: int, count: int, item: int) -> np.ndarray:
    """``count`` elements of ``item`` bytes at address ``ptr`` as a writable NumPy view."""
    buf = (ctypes.c_char * (count * item)).from_address(int(ptr))
    return np.frombuffer(buf, np.dtype(f"u{item}"))


def _window_copy(item: int):
    """``window_copy_<item>`` of kernels/window_copy.cu in NumPy, every output element at once."""

    def run(args):
        tab = np.asarray(args[0]).reshape(-1, 32)
        fills = np.asarray(args[1])
        for t in tab.tolist():
            count, nd, fdim = t[2], t[3], t[5]
            if count == 0:
                continue
            rem = np.arange(count, dtype=np.int64)
            src = np.zeros(count, np.int64)
            ch = np.zeros(count, np.int64)
            inside = np.ones(count, bool)
            for d in range(5, 5 - nd, -1):  # innermost dim first: mixed-radix digits
                c = rem % t[6 + d]
                rem //= t[6 + d]
                if d == fdim:
                    ch = c
                i = c + t[24 + d]
                inside &= (i >= 0) & (i < t[12 + d])
                src += i * t[18 + d]
            dst = _raw(t[1], count, item)
            if inside.any():
                lo, hi = int(src[inside].min()), int(src[inside].max())
                dst[inside] = _raw(t[0] + lo * item, hi - lo + 1, item)[src[inside] - lo]
            dst[~inside] = fills[t[4] + ch[~inside]]

    return run


@pytest.fixture
def device(monkeypatch):
    """The null device with the window copy emulated (other kernels are skipped)."""
    with null_device.installed():
        for item in (1, 2, 4, 8):
            monkeypatch.setitem(null_device.EMULATED, f"window_copy_{item}", _window_copy(item))
        yield


def _flat(images, layout="HWC"):
    """A ragged TensorListGPU in one flat buffer on the null device, and its batch context."""
    from stoker.backend import cuda
    from stoker.tensors_gpu import TensorListGPU

    cp = cuda.cupy()
    sizes = np.array([im.size for im in images], np.int64)
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    buf = cp.asarray(np.concatenate([im.ravel() for im in images]))
    x = TensorListGPU.from_flat(buf, offsets, np.array([im.shape for im in images]).reshape(len(images), -1),
                                layout)
    return x, BatchContext(batch_size=len(images), sources=[f"img{i}.jpg" for i in range(len(images))])


def _images(rng, n, lo=3, hi=30, channels=3, dtype=np.uint8):
    shapes = rng.integers(lo, hi, (n, 2))
    return [rng.integers(0, 200, (int(h), int(w), channels)).astype(dtype) for h, w in shapes]


def _host(out):
    return [np.asarray(s) for s in out.as_cpu().samples()]


def _same(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, w.shape, g.dtype, w.dtype)
        np.testing.assert_array_equal(g, w)


# --- the table: window_table (arrays) equals window_rows (per-sample views) -----------------

def _random_views(rng, cp, n, ndim, dtype):
    """Samples of ``ndim`` dims as device views: contiguous, stepped, reversed or cut."""
    views = []
    for _ in range(n):
        base = cp.asarray(rng.integers(0, 100, rng.integers(1, 7, ndim) * 2).astype(dtype))
        key = []
        for e in base.shape:
            kind = rng.integers(0, 4)
            key.append(slice(None) if kind == 0 else slice(None, None, 2) if kind == 1 else
                       slice(None, None, -1) if kind == 2 else slice(1, e))
        views.append(base[tuple(key)] if rng.random() < 0.7 else base)
    return views


def _random_windows(rng, views, dtype, channel_fill):
    windows = []
    for v in views:
        shape, start = [], []
        for e in v.shape:
            kind = rng.integers(0, 3)
            if kind == 0:  # whole axis: it may merge with the one outside it
                shape.append(e)
                start.append(0)
            elif kind == 1:  # inside
                a = int(rng.integers(0, e))
                shape.append(int(rng.integers(1, e - a + 1)))
                start.append(a)
            else:  # leaves the sample on either side
                shape.append(int(rng.integers(1, e + 4)))
                start.append(int(rng.integers(-3, e)))
        padded = any(s < 0 or s + o > e for s, o, e in zip(start, shape, v.shape))
        if rng.random() < 0.05:
            shape[0] = 0  # no output element
        fill = None
        if padded or rng.random() < 0.2:
            if channel_fill and v.shape[-1] == shape[-1]:
                fill = np.arange(v.shape[-1]).astype(dtype).reshape((1,) * (v.ndim - 1) + (-1,))
            else:
                fill = np.asarray(7, dtype)
        windows.append((shape, start, fill))
    return windows


@pytest.mark.parametrize("dtype", [np.uint8, np.int16, np.float32, np.float64])
@pytest.mark.parametrize("ndim", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("channel_fill", [False, True])
def test_window_table_equals_window_rows(dtype, ndim, channel_fill):
    from stoker.backend import cuda

    rng = np.random.default_rng(ndim * 10 + channel_fill)
    with null_device.installed():
        cp = cuda.cupy()
        for _ in range(5):
            n = int(rng.integers(1, 30))
            views = _random_views(rng, cp, n, ndim, dtype)
            windows = _random_windows(rng, views, dtype, channel_fill)
            want = gpu_slice.window_rows(views, windows, dtype)
            ptrs = np.array([v.data.ptr for v in views], np.int64)
            shapes = np.array([v.shape for v in views], np.int64)
            strides = np.array([v.strides for v in views], np.int64)
            if len({np.size(w[2]) for w in windows if w[2] is not None}) > 1:
                continue  # mixed fill sizes: only the per-sample form takes them
            padded = np.array([w[2] is not None for w in windows])
            k = max((np.size(w[2]) for w in windows if w[2] is not None), default=1)
            fills = np.zeros((n, k), dtype)
            keep = None
            for i, w in enumerate(windows):
                if w[2] is not None:
                    fills[i] = np.broadcast_to(np.asarray(w[2]).reshape(-1), (k,))
                    keep = int(np.argmax(np.shape(w[2]))) if np.size(w[2]) > 1 else keep
            got = gpu_slice.window_table(ptrs, shapes, strides, [w[0] for w in windows], [w[1] for w in windows],
                                         dtype, fills, padded, keep)
            assert (got is None) == (want is None)
            if got is None:
                continue
            np.testing.assert_array_equal(got[0], want[0])
            np.testing.assert_array_equal(got[1], want[1])
            np.testing.assert_array_equal(got[2], want[2])


def test_window_table_refuses_what_window_rows_refuses():
    """More than six dims left after merging, and strides that are not whole elements: None."""
    x = np.zeros((2,) * 7, np.uint8)
    shape, start = [3] * 7, [-1] * 7  # every axis padded on both sides: nothing merges
    assert gpu_slice.window_table([x.ctypes.data], [x.shape], [x.strides], [shape], [start], np.uint8,
                                  np.zeros((1, 1), np.uint8), [True]) is None
    assert gpu_slice.window_table([0], [(4, 4)], [(6, 3)], [(2, 2)], [(0, 0)], np.uint16) is None
    # a sample with no output element is skipped, whatever its strides
    rows, _, sizes = gpu_slice.window_table([0, 8], [(4, 4), (2, 2)], [(6, 3), (4, 2)], [(0, 2), (2, 2)],
                                            [(0, 0), (0, 0)], np.uint16)
    assert sizes.tolist() == [0, 4] and rows[0, 0] == 0 and rows[1, 3] == 1


# --- the operators end to end on the null device, against the CPU ---------------------------

PAD_CASES = {
    "batch_max": (dict(fill_value=3), {}),
    "shape_hw": (dict(fill_value=-1, shape=(25, -1), axis_names="HW"), {}),
    "align": (dict(axes=(0, 1), align=(4, 8)), {}),
    "per_sample_fill": (dict(shape=(28, 28, 3)), {"fill_value": "per_sample"}),
    "per_sample_shape": (dict(axis_names="W", fill_value=9), {"shape": "per_sample_w"}),
    "per_sample_align": (dict(axis_names="HW"), {"align": "per_sample_align"}),
}


def _pad_args(rng, n, how):
    out = {}
    for k, kind in how.items():
        if kind == "per_sample":
            out[k] = [np.asarray(v, np.float32) for v in rng.uniform(-300, 300, n)]
        elif kind == "per_sample_w":
            out[k] = [np.asarray([v], np.int32) for v in rng.integers(-1, 40, n)]
        else:
            out[k] = [np.asarray(v, np.int32) for v in rng.integers(1, 9, (n, 2))]
    return out


@pytest.mark.parametrize("dtype", [np.uint8, np.float32, np.int16])
@pytest.mark.parametrize("case", sorted(PAD_CASES))
def test_gpu_pad_equals_cpu(device, case, dtype):
    rng = np.random.default_rng(len(case))
    kw, how = PAD_CASES[case]
    images = _images(rng, 9, dtype=dtype)
    images[3] = np.zeros((0, 5, 3), dtype)  # an empty sample
    x, batch = _flat(images)
    args = _pad_args(rng, len(images), how)
    (got,) = _op("pad", **kw).run_gpu(batch, [x], args)
    (want,) = _op("pad", "cpu", **kw).run_cpu(batch, [TensorListCPU(images, "HWC")], args)
    _same(_host(got), list(want.samples()))


SLICE_CASES = {
    "rel_args": dict(rel_start=(0.1, 0.2), rel_shape=(0.5, 0.7)),
    "abs_pad": dict(start=(-3, -2), end=(20, 31), out_of_bounds_policy="pad", fill_values=(1, 2, 3)),
    "abs_pad_one_value": dict(start=(5, -4), shape=(30, 12), out_of_bounds_policy="pad", fill_values=(250,)),
    "trim": dict(rel_start=(-0.2, 0.5), rel_end=(0.7, 1.4), out_of_bounds_policy="trim_to_shape"),
    "channels": dict(start=(1,), end=(3,), axis_names="C"),
    "hw_names": dict(rel_start=(0.25, 0.1), rel_end=(0.9, 0.8), axis_names="HW", dtype=np.float32),
    "axes": dict(start=(2,), shape=(9,), axes=(0,), out_of_bounds_policy="pad"),
}


@pytest.mark.parametrize("case", sorted(SLICE_CASES))
def test_gpu_slice_with_arguments_equals_cpu(device, case):
    rng = np.random.default_rng(len(case) + 1)
    images = _images(rng, 11, 4, 40)
    x, batch = _flat(images)
    kw = SLICE_CASES[case]
    (got,) = _op("slice", **kw).run_gpu(batch, [x], {})
    (want,) = _op("slice", "cpu", **kw).run_cpu(batch, [TensorListCPU(images, "HWC")], {})
    _same(_host(got), list(want.samples()))


@pytest.mark.parametrize("normalized", [True, False])
@pytest.mark.parametrize("policy", ["pad", "trim_to_shape"])
def test_gpu_slice_with_anchor_and_shape_inputs_equals_cpu(device, normalized, policy):
    from stoker.backend import cuda
    from stoker.tensors_gpu import TensorListGPU

    rng = np.random.default_rng(3)
    images = _images(rng, 10, 4, 40)
    x, batch = _flat(images)
    n = len(images)
    scale = 1.0 if normalized else 30.0
    anchor = rng.uniform(-0.3, 1.0, (n, 2)).astype(np.float32) * scale
    shape = rng.uniform(0.0, 1.2, (n, 2)).astype(np.float32) * scale
    kw = dict(normalized_anchor=normalized, normalized_shape=normalized, out_of_bounds_policy=policy)
    cp = cuda.cupy()
    # the anchor as a GPU batch (downloaded in one piece), the shape as a CPU one
    box = [TensorListGPU(cp.asarray(anchor)), TensorListCPU(list(shape))]
    (got,) = _op("slice", **kw).run_gpu(batch, [x, *box], {})
    (want,) = _op("slice", "cpu", **kw).run_cpu(batch, [TensorListCPU(images, "HWC"), TensorListCPU(list(anchor)),
                                                       TensorListCPU(list(shape))], {})
    _same(_host(got), list(want.samples()))


def test_gpu_slice_with_per_sample_arguments_equals_cpu(device):
    rng = np.random.default_rng(4)
    images = _images(rng, 12, 4, 40)
    x, batch = _flat(images)
    n = len(images)
    args = {"rel_start": [np.asarray(v, np.float32) for v in rng.uniform(0, 0.5, (n, 2))],
            "shape": [np.asarray(v, np.float32) for v in rng.uniform(1, 30, (n, 2))]}
    kw = dict(out_of_bounds_policy="pad", fill_values=(4, 5, 6))
    (got,) = _op("slice", **kw).run_gpu(batch, [x], args)
    (want,) = _op("slice", "cpu", **kw).run_cpu(batch, [TensorListCPU(images, "HWC")], args)
    _same(_host(got), list(want.samples()))


@pytest.mark.parametrize("perm", [(2, 0, 1), (1, 0, 2), (0, 1, 2), (-1, 0, 1), (1, 2, 0)])
@pytest.mark.parametrize("dtype", [np.uint8, np.float32, np.float64, np.int16])
def test_gpu_transpose_of_a_ragged_batch_equals_cpu(device, perm, dtype):
    rng = np.random.default_rng(5)
    images = _images(rng, 7, dtype=dtype)
    x, batch = _flat(images)
    null_device.LAUNCHES.clear()
    (got,) = _op("transpose", perm=perm).run_gpu(batch, [x], {})
    assert [name for name, _, _ in null_device.LAUNCHES] == [f"window_copy_{np.dtype(dtype).itemsize}"]
    assert got.layout() == "".join("HWC"[p] for p in perm)
    _same(_host(got), [np.ascontiguousarray(np.transpose(im, perm)) for im in images])


def test_gpu_transpose_of_strided_views_and_4d_samples(device):
    from stoker.backend import cuda
    from stoker.tensors_gpu import TensorListGPU

    cp = cuda.cupy()
    rng = np.random.default_rng(6)
    hosts = [rng.integers(0, 255, (int(f), int(h), 7, 3), np.uint8) for f, h in rng.integers(1, 9, (5, 2))]
    views = [h[:, ::-1, 1::2] for h in hosts]
    x = TensorListGPU([cp.asarray(h)[:, ::-1, 1::2] for h in hosts], "FHWC")
    (got,) = _op("transpose", perm=(3, 0, 2, 1)).run_gpu(BatchContext(batch_size=5), [x], {})
    assert got.layout() == "CFWH"
    _same(_host(got), [np.ascontiguousarray(np.transpose(v, (3, 0, 2, 1))) for v in views])


def test_gpu_transpose_with_a_bad_perm_fails_as_before(device):
    rng = np.random.default_rng(7)
    x, batch = _flat(_images(rng, 3))
    for perm in ((0, 1), (0, 1, 3), (-4, 0, 1), (0, 0, 1)):
        with pytest.raises((ValueError, IndexError)):  # the output layout or cp.transpose refuses it
            _op("transpose", perm=perm).run_gpu(batch, [x], {})


def test_ragged_transpose_host_calls_do_not_grow_with_batch():
    """As tests/operators/test_gpu_host_cost.py for the op zoo (kernels skipped, not emulated:
    the emulation itself steps per sample)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import test_gpu_host_cost as cost

    def build(fn, types, x):
        return fn.transpose(x, perm=(2, 0, 1))

    with null_device.installed():
        own = {n: cost.count_calls(build, n, True) - cost.count_calls(None, n, True) for n in (cost.SMALL, cost.LARGE)}
    assert own[cost.LARGE] - own[cost.SMALL] <= cost.SLACK, own
