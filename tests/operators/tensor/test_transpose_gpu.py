"""GPU transpose (stoker/operators/tensor/gpu_transpose.py) against the CPU operator: the same
arrays and layouts, for a batch of one shape (permuted as one array) and of varied shapes."""

import numpy as np
import pytest
from gpu_pipelines import run_pipeline

import stoker.fn as fn
from stoker.operators import gpu_registry

pytestmark = pytest.mark.gpu


def _run(images, gpu, perm):
    return run_pipeline(lambda x: fn.transpose(x, perm=perm), [images], gpu)[0]


@pytest.mark.parametrize("same_size", [True, False])
@pytest.mark.parametrize("perm", [(2, 0, 1), (1, 0, 2)])
def test_gpu_transpose_matches_cpu(same_size, perm, make_images):
    images = make_images(4, 20, 21) if same_size else make_images(4, 10, 40)
    before = gpu_registry.FALLBACKS["transpose"]
    got, got_layout = _run(images, True, perm)
    assert gpu_registry.FALLBACKS["transpose"] == before, "the host fallback ran instead"
    want, want_layout = _run(images, False, perm)
    assert got_layout == want_layout == "".join("HWC"[p] for p in perm)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("dtype", [np.uint8, np.int16, np.float32, np.float64])
@pytest.mark.parametrize("perm", [(2, 0, 1), (1, 2, 0), (-1, 0, 1)])
def test_gpu_transpose_of_a_ragged_batch_is_one_window_copy(dtype, perm, make_images):
    """A ragged batch goes through one launch of the window copy (kernels/window_copy.cu, its
    input read with the axes permuted), for every element size, equal to the CPU's."""
    images = [im.astype(dtype) for im in make_images(5, 10, 40)]
    before = gpu_registry.FALLBACKS["transpose"]
    (got, _), = run_pipeline(lambda x: fn.transpose(x, perm=perm), [images], True)
    assert gpu_registry.FALLBACKS["transpose"] == before, "the host fallback ran instead"
    (want, _), = run_pipeline(lambda x: fn.transpose(x, perm=perm), [images], False)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)


def test_gpu_transpose_of_strided_views_in_4d(batch_ctx, cp):
    """Samples that are strided device views (a list-backed batch) of four dimensions."""
    from stoker.operators.schema import get_operator
    from stoker.tensors_gpu import TensorListGPU

    rng = np.random.default_rng(3)
    hosts = [rng.integers(0, 255, (int(f), int(h), 9, 3), np.uint8) for f, h in rng.integers(1, 9, (5, 2))]
    x = TensorListGPU([cp.asarray(h)[:, ::-1, 1::2] for h in hosts], "FHWC")
    cls = get_operator("transpose")
    static, _ = cls.schema.bind({"perm": (3, 0, 2, 1)}, lambda v: False)
    (out,) = cls(static, "gpu").run_gpu(batch_ctx, [x], {})
    batch_ctx.stream.synchronize()
    assert out.layout() == "CFWH"
    for g, h in zip(out.samples(), hosts):
        np.testing.assert_array_equal(g.get(), np.ascontiguousarray(np.transpose(h[:, ::-1, 1::2], (3, 0, 2, 1))))
