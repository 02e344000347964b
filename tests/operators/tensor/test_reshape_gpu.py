"""GPU reshape against the CPU: the same samples, without the host path."""

import numpy as np
import pytest
from gpu_pipelines import compare_exact

import stoker.fn as fn

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("build", [
    lambda x: fn.reshape(x, shape=[-1, 3]),
    lambda x: fn.reshape(x, src_dims=[2, 0, 1]),
    lambda x: fn.reshape(x, shape=fn.random.uniform(values=[3], dtype=np.int32, shape=(1,)) * 0 - 1),
], ids=["shape", "src_dims", "per_sample"])
@pytest.mark.parametrize("ragged", [False, True], ids=["dense", "ragged"])
def test_reshape_matches_cpu(build, ragged, make_images, rng):
    batch = make_images(6) if ragged else [np.ascontiguousarray(rng.integers(0, 255, (20, 30, 3), np.uint8))] * 6
    compare_exact(build, batch, "reshape")
