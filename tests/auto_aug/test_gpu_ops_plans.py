"""The host half of auto_aug's GPU kernels (stoker/auto_aug/gpu_ops.py), without a GPU.

- The tables the device computes from per-channel histograms (kernels/auto_aug.cu, aa_tables),
  written again here in NumPy step by step as the kernel computes them (first and last nonzero
  bins, an inclusive scan, sums of v * hist[v]; the same float32 / float64 operations), equal the
  CPU operators' results on random and edge-case images (rounding ties included).
- Plans: the sample table's columns, the parameters' device pointers and types, and which batches
  go to the host fallback.
- On the null device (tests/null_device.py): the six ops launch their kernels (no host fallback),
  and their host work does not grow with the batch (calls counted as in
  tests/operators/test_gpu_host_cost.py).

The kernels' pixels are compared with the CPU on a GPU: tests/auto_aug/test_auto_aug_gpu.py.
"""

import ctypes
import os
import sys

import cv2
import numpy as np
import pytest

from stoker.auto_aug import _ops
from stoker.operators.tensor.basic import convert

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "operators"))
import null_device  # noqa: E402

F32 = np.float32


# --- the device's table arithmetic, step by step ---------------------------------------------------

def histograms(img):
    """(C, 256) int64 per-channel histograms of an HWC (or HW) uint8 image."""
    flat = img.reshape(-1, img.shape[-1] if img.ndim == 3 else 1)
    return np.stack([np.bincount(flat[:, c], minlength=256) for c in range(flat.shape[1])])


def device_equalize(hist):
    """aa_tables' equalize_table for one channel."""
    nz = np.flatnonzero(hist)
    i0, total, base = int(nz[0]), int(hist.sum()), int(hist[nz[0]])
    if base == total:
        return np.full(256, i0, np.uint8)
    cum = np.cumsum(hist)
    scale = F32(255) / F32(total - base)
    out = np.zeros(256, np.uint8)
    for v in range(i0 + 1, 256):
        out[v] = min(max(int(np.rint(F32(cum[v] - base) * scale)), 0), 255)
    return out


def device_auto_contrast(hist):
    """aa_tables' auto_contrast_table for one channel."""
    nz = np.flatnonzero(hist)
    lo, hi = int(nz[0]), int(nz[-1])
    spread = F32(hi - lo)
    out = np.empty(256, np.uint8)
    for v in range(256):
        scale, shifted = (F32(255) / spread, (v - lo) & 255) if spread > 0 else (F32(1), v)
        out[v] = convert(np.array([F32(shifted) * scale]), np.uint8)[0]
    return out


def device_contrast(hist3, pixels, factor):
    """aa_tables' contrast_table (3 channels, one table)."""
    sums = [int((np.arange(256, dtype=np.uint64) * hist3[c].astype(np.uint64)).sum()) for c in range(3)]
    acc = None
    for c in range(3):
        mean = F32(np.float64(sums[c]) / np.float64(pixels))
        w = np.float64(F32(mean * _ops.LUMA[c]))
        acc = w if acc is None else acc + w
    center = F32(acc)
    factor = F32(factor)
    out = np.empty(256, np.uint8)
    for v in range(256):
        out[v] = convert(np.array([center + (F32(v) - center) * factor]), np.uint8)[0]
    return out


def _run_cpu(cls, img, *param):
    return cls({}, "cpu").run_sample([img, *param], {}, None)


def _images():
    rng = np.random.default_rng(7)
    out = []
    for k in range(40):
        h, w = rng.integers(1, 60, 2)
        lo, hi = sorted(rng.integers(0, 256, 2))
        img = rng.integers(lo, hi + 1, (h, w, 3)).astype(np.uint8)
        if k % 4 == 1:
            img[..., rng.integers(0, 3)] = rng.integers(0, 256)  # a flat channel
        if k % 4 == 2:
            img = np.where(rng.random((h, w, 3)) < 0.7, lo, hi).astype(np.uint8)  # two values
        out.append(img)
    ties = np.zeros((1, 511, 3), np.uint8)  # 510 pixels above the first value: halves of 255 / 510
    ties[0, 1:] = (np.arange(510)[:, None] // 2 + 1).clip(1, 255)
    out.append(ties)
    out.append(np.repeat(np.arange(256, dtype=np.uint8)[None, :, None], 3, axis=2))
    return out


@pytest.mark.parametrize("k", range(42))
def test_device_tables_equal_the_cpu_operators(k):
    img = _images()[k]
    hist = histograms(img)
    eq = np.stack([device_equalize(h) for h in hist], axis=-1)
    want = _run_cpu(_ops.Equalize, img)
    np.testing.assert_array_equal(np.take_along_axis(eq, img.reshape(-1, 3).astype(np.intp), 0).reshape(img.shape),
                                  want)
    for c in range(3):  # the shared reference helper, too
        np.testing.assert_array_equal(_ops.equalize_table(hist[c])[img[..., c]], cv2.equalizeHist(img[..., c].copy()))
    ac = np.stack([device_auto_contrast(h) for h in hist], axis=-1)
    np.testing.assert_array_equal(np.take_along_axis(ac, img.reshape(-1, 3).astype(np.intp), 0).reshape(img.shape),
                                  _run_cpu(_ops.AutoContrast, img))
    for factor in (F32(0), F32(1), F32(0.1), F32(1.9), F32(-0.7), F32(1 + k / 50)):
        table = device_contrast(hist, img.shape[0] * img.shape[1], factor)
        np.testing.assert_array_equal(table[img], _run_cpu(_ops.Contrast, img, factor))


def test_solarize_tables_equal_the_kernel_formulas():
    v = np.arange(256)
    for t in [np.float32(256), np.float32(0), np.float32(100.5), np.int64(128), np.uint8(3), np.float64(7.25)]:
        want = np.where(v.astype(np.float64) < np.float64(t), v, 255 - v).astype(np.uint8)
        np.testing.assert_array_equal(_ops.solarize_table(t), want)
    for s in [np.uint8(0), np.uint8(110), np.int32(300), np.int64(-1), np.float32(3.7)]:
        shift = int(s) & 255  # integers wrap, floats in [0, 256) truncate
        want = np.where(v < 128, (v + shift) & 255, v).astype(np.uint8)
        np.testing.assert_array_equal(_ops.solarize_add_table(s), want)


def test_one_channel_hwc_keeps_its_shape():
    img = np.random.default_rng(0).integers(0, 256, (5, 7, 1), dtype=np.uint8)
    for cls, param in ((_ops.AutoContrast, ()), (_ops.Equalize, ()), (_ops.Solarize, (np.float32(100),)),
                       (_ops.SolarizeAdd, (np.uint8(9),))):
        assert _run_cpu(cls, img, *param).shape == img.shape


# --- plans on the null device --------------------------------------------------------------------

def _batch(samples, cp):
    from stoker.tensors_gpu import TensorListGPU

    return TensorListGPU([cp.asarray(s) for s in samples], "HWC")


def _ctx():
    from stoker.operators.base import BatchContext

    return BatchContext(batch_size=0, device_id=0)


def test_plan_tables(null_cupy):
    from stoker.auto_aug import gpu_ops

    cp = null_cupy
    shapes = [(3, 4, 3), (5, 2, 1), (1, 1, 4)]
    x = _batch([np.zeros(s, np.uint8) for s in shapes], cp)
    params = _batch([np.full((3, 3), k, np.float32) for k in range(3)], cp)
    itab, out, ptype = gpu_ops.plan(None, _ctx(), [x, params], param_count=9)
    np.testing.assert_array_equal(itab[:, 2], [12, 10, 1])
    np.testing.assert_array_equal(itab[:, 3], [3, 1, 4])
    np.testing.assert_array_equal(itab[:, 4], [0, 768, 1024])
    np.testing.assert_array_equal(itab[:, 6:8], [[3, 4], [5, 2], [1, 1]])
    np.testing.assert_array_equal(itab[:, 0], [s.data.ptr for s in x.samples()])
    np.testing.assert_array_equal(itab[:, 5], [s.data.ptr for s in params.samples()])
    assert ptype == gpu_ops._PTYPES[np.dtype(np.float32)]
    assert [tuple(s) for s in out.shape()] == shapes
    flat, offsets, _ = out.flat_parts()
    np.testing.assert_array_equal(itab[:, 1], flat.data.ptr + offsets)


def test_plan_host_parameters_are_uploaded(null_cupy):
    from stoker.auto_aug import gpu_ops
    from stoker.tensors import TensorListCPU

    x = _batch([np.zeros((2, 2, 3), np.uint8)] * 3, null_cupy)
    itab, _, ptype = gpu_ops.plan(None, _ctx(), [x, TensorListCPU([np.int16(k) for k in (5, 6, 7)])], param_count=1)
    assert ptype == gpu_ops._PTYPES[np.dtype(np.int16)]
    # (null-device memory is host memory: the uploaded values are read at the pointers)
    assert [ctypes.c_int16.from_address(int(p)).value for p in itab[:, 5]] == [5, 6, 7]


@pytest.mark.parametrize("case", ["video", "float16", "size", "empty_extent", "float32", "contrast_grey"])
def test_plan_falls_back(null_cupy, case):
    from stoker.auto_aug import gpu_ops

    cp = null_cupy
    img = np.zeros((4, 5, 3), np.uint8)
    param = [np.float32(1)] * 2
    count, channels = 1, None
    if case == "video":
        img = np.zeros((2, 4, 5, 3), np.uint8)
    elif case == "float16":
        param = [np.float16(1)] * 2
    elif case == "size":
        param = [np.zeros(2, np.float32)] * 2
    elif case == "empty_extent":
        img = np.zeros((0, 5, 3), np.uint8)
    elif case == "float32":
        img = np.zeros((4, 5, 3), np.float32)
    elif case == "contrast_grey":
        img, channels = np.zeros((4, 5, 1), np.uint8), 3
    x = _batch([img, img], cp)
    assert gpu_ops.plan(None, _ctx(), [x, _batch(param, cp)], param_count=count, channels=channels) is None


def test_plan_of_an_empty_batch(null_cupy):
    from stoker.auto_aug import gpu_ops
    from stoker.tensors_gpu import TensorListGPU

    assert gpu_ops.plan(None, _ctx(), [TensorListGPU([], "HWC")]) == []


# --- the pipeline on the null device: kernels, no fallback, host cost flat in the batch ------------

def _invoke(name, param=None):
    from stoker.pipeline.data_node import invoke

    def build(fn, types, x):
        return invoke(name, [x] if param is None else [x, param(fn, types)], {})

    return build


def _scheme(fn, types, x):
    from stoker.auto_aug import augmentations as aa
    from stoker.auto_aug import trivial_augment

    return trivial_augment.apply_trivial_augment(
        [aa.sharpness, aa.contrast, aa.equalize, aa.auto_contrast, aa.solarize, aa.solarize_add], x)


CASES = {
    "equalize": _invoke("_auto_aug.equalize"),
    "auto_contrast": _invoke("_auto_aug.auto_contrast"),
    "contrast": _invoke("_auto_aug.contrast", lambda fn, types: fn.random.uniform(range=(0.1, 1.9))),
    "solarize": _invoke("_auto_aug.solarize", lambda fn, types: fn.random.uniform(range=(0.0, 256.0))),
    "solarize_add": _invoke("_auto_aug.solarize_add",
                            lambda fn, types: fn.random.uniform(values=[0, 5, 50, 110], dtype=types.INT32)),
    "filter": _invoke("_auto_aug.filter", lambda fn, types: fn.random.uniform(range=(-0.2, 0.3), shape=(3, 3))),
}
KERNELS = {"equalize": {"aa_hist", "aa_tables", "aa_lut"}, "auto_contrast": {"aa_hist", "aa_tables", "aa_lut"},
           "contrast": {"aa_hist", "aa_tables", "aa_lut"}, "solarize": {"aa_point"}, "solarize_add": {"aa_point"},
           "filter": {"aa_filter"}}


@pytest.mark.parametrize("name", sorted(KERNELS) + ["scheme"])
def test_null_device_launches_the_kernels(null_cupy, name):
    """Each op (and TrivialAugment over the six, through the per-sample ifs) runs its kernels."""
    import test_gpu_host_cost as cost

    from stoker.operators import gpu_registry

    before = dict(gpu_registry.FALLBACKS)
    null_device.LAUNCHES.clear()
    cost.count_calls(_scheme if name == "scheme" else CASES[name], 24 if name == "scheme" else cost.SMALL, True)
    want = set().union(*KERNELS.values()) if name == "scheme" else KERNELS[name]
    assert want <= {k for k, _, _ in null_device.LAUNCHES}
    assert dict(gpu_registry.FALLBACKS) == before


# (the schemes are left out here: their CPU stage (the per-sample magnitude-bin and sign
# arithmetic of the policies) grows with the batch, which is not these kernels' host work)


@pytest.mark.parametrize("ragged", [False, True], ids=["dense", "ragged"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_host_calls_do_not_grow_with_batch(null_cupy, name, ragged):
    import test_gpu_host_cost as cost

    build = CASES[name]
    own = {n: cost.count_calls(build, n, ragged) - cost.count_calls(None, n, ragged) for n in (cost.SMALL, cost.LARGE)}
    growth = own[cost.LARGE] - own[cost.SMALL]
    assert growth <= cost.SLACK, (
        f"{name}: {own[cost.SMALL]} Python calls at {cost.SMALL} samples, {own[cost.LARGE]} at {cost.LARGE}")
