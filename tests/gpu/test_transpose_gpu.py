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
