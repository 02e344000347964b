"""The CPU arithmetic of batches of small samples (one NumPy step) gives the per-sample values."""

import numpy as np
import pytest

from stoker.operators.base import BatchContext, Operator
from stoker.operators.schema import get_operator
from stoker.tensors import TensorListCPU

EXPRS = ["add", "sub", "mul", "div", "fdiv", "mod", "lt", "geq", "min", "pow"]
DTYPES = [(np.int32, np.int32), (np.uint8, np.float32), (np.int64, np.int16), (np.float64, np.float32)]
# (bitwise expressions take integers only)
CASES = [(e, d) for e in EXPRS for d in DTYPES] + [("bitand", DTYPES[0]), ("bitxor", DTYPES[2])]


def _op(expr, rhs=None):
    cls = get_operator("_arithmetic")
    static, _ = cls.schema.bind({"expr": expr, "rhs": rhs}, lambda v: False)
    return cls(static, "cpu")


@pytest.mark.parametrize("expr,dtypes", CASES)
@pytest.mark.parametrize("shape", [(), (3,)])
def test_small_sample_batches_match_sample_by_sample(expr, dtypes, shape):
    rng = np.random.default_rng(1)
    sources = [f"s{i}" for i in range(9)]
    a = TensorListCPU([rng.integers(-20, 20, shape).astype(dtypes[0]) for _ in range(9)], "", sources)
    b = TensorListCPU([rng.integers(1, 9, shape).astype(dtypes[1]) for _ in range(9)])
    op, batch = _op(expr), BatchContext(batch_size=9)
    with np.errstate(all="ignore"):
        got = op.run_cpu(batch, [a, b], {})[0]
        want = Operator.run_cpu(op, batch, [a, b], {})[0]
    assert got.source_info() == a.source_info()
    for g, w in zip(got.samples(), want.samples()):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g, w)


def test_constant_operand_and_large_samples_keep_their_results():
    rng = np.random.default_rng(2)
    small = TensorListCPU([np.float32(v) for v in rng.uniform(0, 1, 5)])
    big = TensorListCPU([rng.integers(0, 255, (10, 10), np.uint8) for _ in range(3)])  # per sample
    for x, op in ((small, _op("mul", 2.5)), (big, _op("add", 3))):
        batch = BatchContext(batch_size=len(x))
        got, want = op.run_cpu(batch, [x], {})[0], Operator.run_cpu(op, batch, [x], {})[0]
        for g, w in zip(got.samples(), want.samples()):
            assert g.dtype == w.dtype
            np.testing.assert_array_equal(g, w)
