"""GPU transpose (stoker/operators/tensor/gpu_transpose.py) against the CPU operator: the same
arrays and layouts, for a batch of one shape (permuted as one array) and of varied shapes."""

import importlib

import numpy as np
import pytest

import stoker.fn as fn
from stoker import pipeline_def
from stoker.operators import gpu_registry

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True, scope="module")
def _transpose_kernel():
    """The module is pending (written without a GPU): load it whatever STOKER_GPU_PENDING says."""
    importlib.import_module("stoker.operators.tensor.gpu_transpose")
    gpu_registry.load_gpu_impls()


def _run(images, gpu, perm):
    @pipeline_def(batch_size=len(images), num_threads=1, device_id=0, seed=1)
    def pipe():
        x = fn.external_source(source=[images], cycle=True, layout="HWC")
        return fn.transpose(x.gpu() if gpu else x, perm=perm)

    p = pipe()
    p.build()
    (out,) = p.run()
    layout = out.layout()
    got = [np.asarray(a) for a in (out.as_cpu() if gpu else out).samples()]
    p.close()
    return got, layout


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
