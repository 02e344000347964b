"""The whole-batch planning of GPU water, sphere and jitter (issue 16) against the per-sample
rules, exactly: ``water_waves_batch`` / ``sphere_constants_batch`` against ``water_waves`` /
``sphere_constants`` over random shapes and arguments; jitter's shifts against a plain-Python
Philox4x64-10 (the stream the GPU kernel computes on the device), the CPU operator's use of them,
and the keys the GPU planner passes the kernel (on the null device); ``mask`` read for the whole
batch as the CPU reads it per sample, and a bad one still failing with the sample named."""

import os
import sys

import numpy as np
import pytest

import stoker.fn as fn
from stoker import pipeline_def
from stoker.errors import OperatorError
from stoker.operators.filters import element_rng
from stoker.operators.image.distortions import (
    jitter_offsets,
    sphere_constants,
    sphere_constants_batch,
    water_waves,
    water_waves_batch,
)

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
import null_device  # noqa: E402

M64 = (1 << 64) - 1
M32 = (1 << 32) - 1


def philox4x64_10(counter, key):
    """Philox4x64-10 in Python integers (Salmon et al., 2011), as tests/operators/filters/
    test_element_rng.py checks it against Random123's known answers."""
    c, (k0, k1) = list(counter), key
    for r in range(10):
        if r:
            k0, k1 = (k0 + 0x9E3779B97F4A7C15) & M64, (k1 + 0xBB67AE8584CAA73B) & M64
        p0, p1 = 0xD2E7470EE14C6C93 * c[0], 0xCA5A826395121157 * c[2]
        c = [(p1 >> 64) ^ c[1] ^ k0, p1 & M64, (p0 >> 64) ^ c[3] ^ k1, p0 & M64]
    return c


def reference_jitter(key, n_degree, h, w):
    """Jitter shifts as the kernel computes them, pixel by pixel: word p of the sample's stream
    (word p % 4 of block p // 4, counter (p // 4 + 1, 0, 0, 0)), high half -> x, low half -> y."""
    half = n_degree // 2
    span = 2 * half + 1
    out = np.zeros((2, h, w), np.int64)
    for p in range(h * w):
        word = philox4x64_10([p // 4 + 1, 0, 0, 0], tuple(int(k) for k in key))[p % 4]
        out[0, p // w, p % w] = ((word >> 32) * span >> 32) - half
        out[1, p // w, p % w] = ((word & M32) * span >> 32) - half
    return out


# ---- water and sphere tables ---------------------------------------------------------------------

@pytest.mark.parametrize("seed", range(6))
def test_water_waves_batch_equals_the_per_sample_waves(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 30))
    hs, ws = rng.integers(0, 300, n), rng.integers(0, 300, n)
    params = [float(v) for v in rng.uniform(-20, 20, 2)] + [float(v) for v in rng.uniform(-3, 3, 4)]
    flat, first = water_waves_batch(hs, ws, *params)
    assert flat.dtype == np.float32 and flat.size == int((hs + ws).sum())
    for i, (h, w) in enumerate(zip(hs.tolist(), ws.tolist())):
        dx, dy = water_waves(h, w, *params)
        np.testing.assert_array_equal(flat[first[i]:first[i] + h], dx)  # to the bit
        np.testing.assert_array_equal(flat[first[i] + h:first[i] + h + w], dy)


def test_sphere_constants_batch_equals_the_per_sample_constants():
    rng = np.random.default_rng(7)
    hs = np.concatenate([[0, 1, 1, 2, 3, 0], rng.integers(0, 5000, 200)])
    ws = np.concatenate([[0, 1, 2, 1, 0, 7], rng.integers(0, 5000, 200)])
    table = sphere_constants_batch(hs, ws)
    assert table.dtype == np.float32 and table.shape == (len(hs), 3)
    want = np.array([sphere_constants(h, w) for h, w in zip(hs.tolist(), ws.tolist())], np.float32)
    np.testing.assert_array_equal(table, want)


# ---- jitter ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("n_degree", [1, 2, 3, 5, 40, 601, 2**31 - 1])
def test_jitter_shifts_are_the_element_generators_words(n_degree):
    key = element_rng.batch_keys(11, 4, [2])[0]
    h, w = 5, 7
    got = jitter_offsets(key, n_degree, h, w)
    assert got.dtype == np.int64 and got.shape == (2, h, w)
    np.testing.assert_array_equal(got, reference_jitter(key, n_degree, h, w))
    assert np.abs(got).max() <= n_degree // 2


def test_jitter_shifts_cover_the_neighbourhood_uniformly():
    key = element_rng.batch_keys(1, 0, [0])[0]
    d = jitter_offsets(key, 4, 200, 300)
    for plane in d:
        counts = np.bincount(plane.ravel() + 2, minlength=5)
        assert counts.size == 5 and np.abs(counts / plane.size - 0.2).max() < 0.01
    assert abs(np.corrcoef(d[0].ravel(), d[1].ravel())[0, 1]) < 0.01  # x and y independent
    assert not jitter_offsets(key, 0, 3, 4).any() and not jitter_offsets(key, 1, 3, 4).any()


def test_below32_and_the_shared_device_code():
    """below32 is floor(v * span / 2^32) for spans up to 2^32; the kernel source includes the
    shared Philox header and is compiled with kernel_options (the header's folder, its digest)."""
    v = np.array([0, 1, 2**31, M32], np.uint64)
    assert element_rng.below32(v, 5).tolist() == [(int(x) * 5) >> 32 for x in v.tolist()] == [0, 0, 2, 4]
    assert element_rng.below32(v, 2**32).tolist() == v.tolist()
    with pytest.raises(ValueError):
        element_rng.below32(v, 2**32 + 1)
    opts = element_rng.kernel_options()
    kernel_dir = next(o[2:] for o in opts if o.startswith("-I"))
    header = os.path.join(kernel_dir, element_rng.HEADER)
    assert os.path.isfile(header) and any(o.startswith("-DSTOKER_PHILOX_HEADER=0x") for o in opts)
    with open(os.path.join(kernel_dir, "distortions.cu")) as f:
        assert f'#include "{element_rng.HEADER}"' in f.read()
    with open(header) as f:
        assert "philox4x64_10" in f.read()


def test_jitter_refuses_degrees_beyond_int32():
    from stoker.errors import PipelineBuildError

    with pytest.raises(PipelineBuildError, match="nDegree"):
        _run(lambda x: fn.jitter(x, nDegree=2**31), [np.zeros((4, 4, 1), np.uint8)])


def _run(build, images, gpu=False, iterations=1, masks=None):
    """Outputs of ``build`` over ``images`` (HWC), per iteration; ``masks`` an argument input."""

    @pipeline_def(batch_size=len(images), num_threads=1, device_id=0 if gpu else None, seed=5,
                  exec_async=False, exec_pipelined=False, prefetch_queue_depth=1)
    def pipe():
        x = fn.external_source(source=[images], cycle=True, layout="HWC")
        m = fn.external_source(source=[masks], cycle=True) if masks is not None else None
        return build(x.gpu() if gpu else x) if m is None else build(x.gpu() if gpu else x, m)

    p = pipe()
    p.build()
    try:
        return [p.run()[0] for _ in range(iterations)]
    finally:
        p.close()


def test_cpu_jitter_applies_the_samples_shifts(monkeypatch):
    """The CPU operator's output pixel (x, y) is the input pixel shifted by jitter_offsets of the
    sample's key (nearest neighbour, fill_value outside)."""
    keys = []
    real = element_rng.sample_key
    monkeypatch.setattr(element_rng, "sample_key", lambda rng: keys.append(real(rng)) or keys[-1])
    rng = np.random.default_rng(3)
    images = [rng.integers(0, 250, (int(h), int(w), 3), np.uint8) for h, w in ((9, 13), (12, 7))]
    (out,) = _run(lambda x: fn.jitter(x, nDegree=5, fill_value=255.0), images)
    assert len(keys) == 2
    for i, img in enumerate(images):
        h, w = img.shape[:2]
        d = jitter_offsets(keys[i], 5, h, w)
        yy, xx = np.mgrid[0:h, 0:w]
        sx, sy = xx + d[0], yy + d[1]
        inside = (sx >= 0) & (sx < w) & (sy >= 0) & (sy < h)
        want = np.full_like(img, 255)
        want[inside] = img[sy[inside], sx[inside]]
        np.testing.assert_array_equal(out.at(i), want)


def test_gpu_jitter_passes_the_cpus_keys(monkeypatch):
    """On the null device: the keys the GPU planner puts in the kernel's table are the keys the
    CPU operator takes from each sample's stream, iteration after iteration; only the mask-0
    sample is copied; nothing per pixel is uploaded."""
    from stoker.operators.image import gpu_distortions

    keys = []
    real = element_rng.sample_key
    monkeypatch.setattr(element_rng, "sample_key", lambda rng: keys.append(real(rng)) or keys[-1])
    rng = np.random.default_rng(4)
    images = [rng.integers(0, 256, (int(h), int(w), 3), np.uint8) for h, w in ((9, 13), (12, 7), (5, 5))]
    masks = [np.int32(1), np.int32(0), np.int32(1)]
    _run(lambda x, m: fn.jitter(x, nDegree=3, mask=m), images, iterations=2, masks=masks)
    assert len(keys) == 4  # the mask-0 sample draws nothing

    tables = []
    real_upload = gpu_distortions.upload_table
    monkeypatch.setattr(gpu_distortions, "upload_table", lambda t, b: tables.append(np.array(t)) or real_upload(t, b))
    with null_device.installed():
        null_device.LAUNCHES.clear()
        _run(lambda x, m: fn.jitter(x, nDegree=3, mask=m), images, gpu=True, iterations=2, masks=masks)
        assert [k for k, _, _ in null_device.LAUNCHES] == ["distort_nn_1"] * 2
    itabs = [t for t in tables if t.dtype == np.int64]
    assert len(itabs) == 2 and all(t.shape == (3, 10) for t in itabs)
    for it, want in zip(itabs, (keys[:2], keys[2:])):
        assert it[:, 6].tolist() == [1, 0, 1]
        assert it[[0, 2], 8:10].astype(np.uint64).tolist() == [k.tolist() for k in want]
    assert all(t.size <= 1 for t in tables if t.dtype == np.float32)  # no per-pixel table


# ---- mask ------------------------------------------------------------------------------------------

def _op(name, **static):
    from stoker.operators.schema import _REGISTRY

    cls = _REGISTRY[name]
    tensor = object()
    args, _ = cls.schema.bind({**static, "mask": tensor}, lambda v: v is tensor)
    return cls(args, "gpu", op_seed=1)


@pytest.mark.parametrize("values", [
    [np.int32(1), np.int32(0), np.int32(5), np.int32(-1)],
    [np.bool_(True), np.bool_(False)],
    [np.array([1.0], np.float32), np.array([0.0], np.float32), np.array([-0.0], np.float32)],
    [np.int64(0), np.array([1], np.int64), np.array(0, np.uint8)],  # shapes () and (1,) mixed
])
def test_sample_masks_read_the_mask_as_the_cpu_does(values):
    from stoker.operators.base import BatchContext
    from stoker.operators.image.gpu_distortions import sample_masks

    op = _op("sphere")
    arg_inputs = {"mask": values}
    got = sample_masks(op, BatchContext(len(values)), arg_inputs, len(values))
    want = [bool(int(op.sample_args(arg_inputs, i).get("mask", 1))) for i in range(len(values))]
    assert got.tolist() == want


@pytest.mark.parametrize("op_name", ["water", "sphere", "jitter"])
@pytest.mark.parametrize("bad,match", [(np.float32(0.5), "whole numbers"),
                                       (np.float32(np.nan), "whole numbers"),
                                       (np.array([1, 0], np.int32), "one value per sample")])
def test_a_bad_mask_names_the_operator_and_the_sample(op_name, bad, match):
    """On the GPU path (null device), as on the CPU: sample 1's bad mask fails naming both."""
    images = [np.zeros((6, 8, 3), np.uint8)] * 3
    good = np.ones(1, bad.dtype) if np.ndim(bad) else type(bad)(1)
    masks = [good, bad, good]
    build = getattr(fn, op_name)
    for gpu in (False, True):
        with null_device.installed() if gpu else _nothing():
            with pytest.raises(OperatorError, match=match) as e:
                _run(lambda x, m: build(x, mask=m), images, gpu=gpu, masks=masks)
        assert e.value.operator == op_name and e.value.sample_index == 1


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_gpu_water_and_sphere_tables(monkeypatch):
    """On the null device: the float table the kernel gets is the batch helpers' (waves laid
    sample after sample, sphere constants three per sample) and mode follows mask and size."""
    from stoker.operators.image import gpu_distortions

    tables = []
    real_upload = gpu_distortions.upload_table
    monkeypatch.setattr(gpu_distortions, "upload_table", lambda t, b: tables.append(np.array(t)) or real_upload(t, b))
    rng = np.random.default_rng(5)
    images = [rng.integers(0, 256, s, np.uint8) for s in ((9, 13, 3), (0, 4, 3), (12, 7, 3), (3, 5, 3))]
    masks = [np.int32(1), np.int32(1), np.int32(0), np.int32(1)]
    hs, ws = np.array([9, 0, 12, 3]), np.array([13, 4, 7, 5])
    with null_device.installed():
        _run(lambda x, m: fn.water(x, ampl_x=3.0, freq_y=0.3, mask=m), images, gpu=True, masks=masks)
        _run(lambda x, m: fn.sphere(x, mask=m), images, gpu=True, masks=masks)
    (wi, wf), (si, sf) = [(tables[k], tables[k + 1]) for k in (0, 2)]
    for itab in (wi, si):
        assert itab[:, 6].tolist() == [1, 0, 0, 1] and itab[:, 3:6].tolist() == [list(s) for s in
                                                                             (x.shape for x in images)]
    waves, first = water_waves_batch(hs, ws, 3.0, 10.0, 2 * np.pi / 128, 0.3, 0.0, 0.0)
    np.testing.assert_array_equal(wf, waves)
    assert wi[:, 7].tolist() == first.tolist()
    np.testing.assert_array_equal(sf, sphere_constants_batch(hs, ws).reshape(-1))
    assert si[:, 7].tolist() == [0, 3, 6, 9]
