"""GPU arithmetic (stoker/operators/math/gpu_arithmetic.py) against the CPU operator: the same
expressions on the same batches give the same types and values, over whole buffers (inputs laid
out alike) and per sample (inputs that broadcast against each other)."""

import numpy as np
import pytest
from gpu_pipelines import run_pipeline

import stoker.fn as fn
import stoker.math as smath
from stoker.operators import gpu_registry

pytestmark = pytest.mark.gpu


EXPRESSIONS = {
    "mul_int": lambda x, y: x * 2,
    "fdiv_float": lambda x, y: x / 255.0,
    "sub_tensors": lambda x, y: x - y,
    "add_float": lambda x, y: x + 1.5,
    "neg": lambda x, y: -x,
    "sqrt": lambda x, y: smath.sqrt(x),
    "less": lambda x, y: x < 128,
    "clamp": lambda x, y: smath.clamp(x, 10, 200),
    "floordiv": lambda x, y: x // 3,
    "mod": lambda x, y: x % 7,
    "per_channel": lambda x, y: x * fn.constant(fdata=[0.5, 1.0, 2.0]),
}
FLOAT_RESULTS = {"fdiv_float", "add_float", "sqrt", "per_channel"}


def _run(expr, xs, ys, gpu):
    return run_pipeline(EXPRESSIONS[expr], [xs, ys], gpu)[0][0]


@pytest.mark.parametrize("expr", sorted(EXPRESSIONS))
def test_gpu_arithmetic_matches_cpu(expr, make_images, rng):
    xs = make_images(5)
    ys = [rng.integers(0, 256, x.shape, dtype=np.uint8) for x in xs]
    before = gpu_registry.FALLBACKS["_arithmetic"]
    got = _run(expr, xs, ys, gpu=True)
    assert gpu_registry.FALLBACKS["_arithmetic"] == before, "the host fallback ran instead"
    want = _run(expr, xs, ys, gpu=False)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        if expr in FLOAT_RESULTS:
            np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)
        else:
            np.testing.assert_array_equal(g, w)
