"""gaussian_blur's whole-batch kernel tables (what the GPU blur uploads, issue 16) against the
per-sample ones, bit for bit: ``gaussian_kernels`` against ``gaussian_kernel(*kernel_params(...))``
and ``GaussianBlur.batch_kernels`` against ``kernels(sample_args(...))`` over random per-sample
sigmas and windows; bad per-sample arguments still fail naming the operator and the sample, on
the GPU path too (run on the null device)."""

import os
import sys

import numpy as np
import pytest

from stoker.errors import OperatorError
from stoker.operators.filters.gaussian_blur import gaussian_kernel, gaussian_kernels, kernel_params
from stoker.operators.schema import _REGISTRY

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
import null_device  # noqa: E402


def _op(arg_inputs=(), **static):
    """An instance with ``static`` arguments and per-sample ones named in ``arg_inputs``."""
    cls = _REGISTRY["gaussian_blur"]
    tensor = object()
    args, _ = cls.schema.bind({**static, **{k: tensor for k in arg_inputs}}, lambda v: v is tensor)
    return cls(args, "gpu", op_seed=1)


def _assert_rows_equal(taps, lengths, index, want):
    assert len(index) == len(want)
    for j, k in zip(index.tolist(), want):
        got = taps[j, :lengths[j]]
        assert got.dtype == k.dtype == np.float32
        np.testing.assert_array_equal(got, k)  # to the bit
        assert not taps[j, lengths[j]:].any()


@pytest.mark.parametrize("seed", range(5))
def test_gaussian_kernels_equal_the_per_pair_kernels(seed):
    rng = np.random.default_rng(seed)
    m = 300
    sigmas = [rng.uniform(0.05, 12.0, m), rng.uniform(0.5, 1.5, m), np.round(rng.uniform(0, 4, m), 1)][seed % 3]
    windows = rng.choice([0, 0, 1, 3, 5, 7, 9, 15, 31, 61], m)
    sigmas[(windows == 0) & (sigmas == 0)] = 0.7
    sigmas[rng.random(m) < 0.2] = 0.0  # window only: sigma from the window
    windows[sigmas == 0] = np.maximum(windows[sigmas == 0], 3)
    sigmas[:3] = sigmas[3]  # repeated pairs
    windows[:3] = windows[3]
    taps, lengths, index = gaussian_kernels(sigmas, windows)
    want = [gaussian_kernel(*kernel_params(float(s), int(w))) for s, w in zip(sigmas, windows)]
    _assert_rows_equal(taps, lengths, index, want)


def test_gaussian_kernels_of_one_pair_make_one_row():
    """A batch whose samples all blur alike (a constant sigma) computes its kernel once."""
    taps, lengths, index = gaussian_kernels(np.full(64, 1.5), np.zeros(64))
    assert taps.shape[0] == 1 and lengths.tolist() == [11] and not index.any()
    _assert_rows_equal(taps, lengths, index, [gaussian_kernel(*kernel_params(1.5, 0))] * 64)


@pytest.mark.filterwarnings("ignore:.*encountered in divide:RuntimeWarning")  # a tiny sigma's 0 / 0, on both
def test_gaussian_kernels_edge_values():
    """NaN sigma with a window is the identity kernel (gaussian_kernel's ``sigma > 0`` fails), an
    infinite one a box; sigma from a one-tap window."""
    sigmas = np.array([np.nan, np.inf, 0.0, 1e-300, 1e3, 0.5])
    windows = np.array([5, 7, 1, 3, 9, 0])
    taps, lengths, index = gaussian_kernels(sigmas, windows)
    _assert_rows_equal(taps, lengths, index, [gaussian_kernel(*kernel_params(float(s), int(w)))
                                              for s, w in zip(sigmas, windows)])


def _per_sample(op, arg_inputs, n):
    return [k for i in range(n) for k in op.kernels(op.sample_args(arg_inputs, i), 2)]


@pytest.mark.parametrize("seed", range(4))
def test_batch_kernels_equal_the_per_sample_kernels(seed):
    rng = np.random.default_rng(100 + seed)
    n = int(rng.integers(1, 40))
    cases = [
        (dict(window_size=5), {"sigma": [np.float32(v) for v in rng.uniform(0.5, 1.5, n)]}),
        ({}, {"sigma": [rng.uniform(0.3, 4.0, 2).astype(np.float32) for _ in range(n)]}),
        ({}, {"sigma": [rng.uniform(0.3, 4.0, int(rng.integers(1, 3))) for _ in range(n)]}),  # 1 or 2 values
        (dict(sigma=1.0), {"window_size": [np.int32(rng.choice([1, 3, 7, 11])) for _ in range(n)]}),
        ({}, {"sigma": [np.float32(rng.choice([0.0, 1.3])) for _ in range(n)],
              "window_size": [np.array(rng.choice([3, 5, 9], 2), np.int32) for _ in range(n)]}),
        (dict(sigma=[1.5, 0.8]), {}),
        (dict(window_size=[3, 9]), {}),
    ]
    for static, arg_inputs in cases:
        op = _op(arg_inputs, **static)
        taps, lengths, index = op.batch_kernels(arg_inputs, n, 2)
        assert index.shape == (n, 2)
        _assert_rows_equal(taps, lengths, index.reshape(-1), _per_sample(op, arg_inputs, n))


BAD = [
    ({"sigma": -1.0}, "must not be negative"),
    ({"window_size": 4}, "odd"),
    ({"window_size": 3.5}, "whole numbers"),
    ({"sigma": np.array([1.0, 2.0, 3.0])}, "1 or 2 values"),
    ({"sigma": np.array([1.0, 0.0])}, "non-zero"),
    ({"sigma": np.nan}, "NaN"),
]


@pytest.mark.parametrize("bad,match", BAD, ids=[m for _, m in BAD])
def test_batch_kernels_refuse_what_the_per_sample_rule_refuses(bad, match):
    """Every argument kernels() refuses, batch_kernels refuses too (plan_batch then names the
    sample with kernels()'s own error)."""
    n = 5
    (name, value), = bad.items()
    good = np.float32(1.0) if name == "sigma" else np.int32(3)
    arg_inputs = {name: [good] * n}
    arg_inputs[name][3] = value
    op = _op(arg_inputs, **({} if name == "sigma" else {"sigma": 0.0}))
    with pytest.raises(ValueError):
        op.batch_kernels(arg_inputs, n, 2)
    with pytest.raises(Exception, match=match):
        op.kernels(op.sample_args(arg_inputs, 3), 2)
    op.batch_kernels({name: [good] * n}, n, 2)  # the same batch without the bad sample passes


def _gpu_blur(sigmas, images):
    import stoker.fn as fn
    from stoker import pipeline_def

    @pipeline_def(batch_size=len(images), num_threads=1, device_id=0, seed=3, exec_async=False,
                  exec_pipelined=False, prefetch_queue_depth=1)
    def pipe():
        x = fn.external_source(source=[images], cycle=True, layout="HWC").gpu()
        return fn.gaussian_blur(x, sigma=fn.external_source(source=[sigmas], cycle=True))

    p = pipe()
    p.build()
    try:
        return p.run()
    finally:
        p.close()


@pytest.mark.parametrize("bad,match", [(np.array([-2.0], np.float32), "'sigma' must not be negative"),
                                       (np.array([1.0, 2.0, 3.0], np.float32), "1 or 2 values")])
def test_gpu_path_names_the_failing_sample(bad, match):
    """On the GPU path (null device): a bad sigma in sample 2 fails with the CPU's message, the
    operator's name and the sample."""
    from stoker.operators import gpu_registry

    rng = np.random.default_rng(0)
    images = [rng.integers(0, 256, (20 + i, 30, 3), np.uint8) for i in range(4)]
    sigmas = [np.ones(1, np.float32)] * 4
    with null_device.installed():
        before = gpu_registry.FALLBACKS["gaussian_blur"]
        null_device.LAUNCHES.clear()
        _gpu_blur(sigmas, images)
        assert [k for k, _, _ in null_device.LAUNCHES] == ["blur_rows_u8", "blur_columns_u8"]
        assert gpu_registry.FALLBACKS["gaussian_blur"] == before
        sigmas[2] = bad
        with pytest.raises(OperatorError, match=match) as e:
            _gpu_blur(sigmas, images)
    assert e.value.operator == "gaussian_blur" and e.value.sample_index == 2
