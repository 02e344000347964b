"""Fixtures of the GPU tests (those marked ``gpu``, beside their operators' CPU tests): CuPy, a CUDA
stream and a BatchContext on it, a seeded generator and photo-like images of random sizes. Loaded for
the whole tree by ``pytest_plugins`` in tests/conftest.py; a test module's own fixture of the same
name (as tests/operators/tensor/test_gpu_cast_arithmetic_flat.py's ``cp``) still wins."""

import numpy as np
import pytest


@pytest.fixture
def cp():
    return pytest.importorskip("cupy")


@pytest.fixture
def batch_ctx(cp):
    from stoker.operators.base import BatchContext

    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        yield BatchContext(batch_size=0, stream=stream, device_id=0)
    stream.synchronize()


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def random_images(rng, n, hmin=20, hmax=90, c=3):
    """Photo-like (smooth plus noise) uint8 HWC images of random sizes."""
    out = []
    for _ in range(n):
        h, w = rng.integers(hmin, hmax, 2)
        yy, xx = np.mgrid[0:h, 0:w]
        base = np.stack([(np.sin(xx / (5 + k) + yy / (7 + k)) + 1) * 100 for k in range(c)], -1)
        out.append(np.clip(base + rng.normal(0, 20, (h, w, c)), 0, 255).astype(np.uint8))
    return out


@pytest.fixture
def make_images(rng):
    """random_images bound to the test's generator: make_images(n, hmin, hmax, c)."""
    return lambda n, hmin=20, hmax=90, c=3: random_images(rng, n, hmin, hmax, c)
