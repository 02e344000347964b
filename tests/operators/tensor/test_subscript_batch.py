"""Indexing batches of small samples (one NumPy step) gives the per-sample results."""

import numpy as np
import pytest

from stoker.operators.base import BatchContext, Operator
from stoker.operators.schema import get_operator
from stoker.tensors import TensorListCPU

SPECS = [
    (("index", 1),),
    (("index", -1),),
    (("slice", 0, 2, None),),
    (("ellipsis",), ("index", 0)),
    (("newaxis",), ("slice", None, None, -1)),
    (("index", 0), ("index", 2)),
]


@pytest.mark.parametrize("spec", SPECS)
def test_static_indices_of_small_samples(spec):
    rng = np.random.default_rng(3)
    shape = (2, 3) if len(spec) == 2 and spec[1][0] == "index" and spec[0][0] == "index" else (3,)
    x = TensorListCPU([rng.integers(0, 100, shape).astype(np.int32) for _ in range(7)], "", list("abcdefg"))
    cls = get_operator("_subscript")
    static, _ = cls.schema.bind({"spec": spec}, lambda v: False)
    op, batch = cls(static, "cpu"), BatchContext(batch_size=7)
    got = op.run_cpu(batch, [x], {})[0]
    want = Operator.run_cpu(op, batch, [x], {})[0]
    assert got.source_info() == list("abcdefg")
    for g, w in zip(got.samples(), want.samples()):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)


def test_an_index_out_of_range_still_names_the_sample():
    x = TensorListCPU([np.arange(3, dtype=np.int32)] * 4, "", ["a.jpg", "b.jpg", "c.jpg", "d.jpg"])
    cls = get_operator("_subscript")
    static, _ = cls.schema.bind({"spec": (("index", 5),)}, lambda v: False)
    op = cls(static, "cpu")
    with pytest.raises(Exception, match="index out of range") as info:
        op.run_cpu(BatchContext(batch_size=4, sources=x.source_info()), [x], {})
    assert "a.jpg" in str(info.value)


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64, np.float32, np.bool_])
def test_per_sample_indices_pick_rows_as_sample_by_sample(index_dtype):
    """``table[sign]`` with a per-sample index (auto_aug's signed magnitudes), one NumPy gather."""

    rng = np.random.default_rng(4)
    table = rng.uniform(-1, 1, (2, 3)).astype(np.float32)
    x = TensorListCPU([table] * 6, "", [f"f{i}" for i in range(6)])
    signs = [np.array(v, index_dtype) for v in rng.integers(0, 2, 6)]
    cls = get_operator("_subscript")
    static, _ = cls.schema.bind({"spec": (("index", "i0"),)}, lambda v: False)
    op, batch = cls(static, "cpu"), BatchContext(batch_size=6)
    got = op.run_cpu(batch, [x], {"i0": signs})[0]
    want = Operator.run_cpu(op, batch, [x], {"i0": signs})[0]
    assert got.source_info() == x.source_info()
    for g, w in zip(got.samples(), want.samples()):
        assert g.shape == w.shape == (3,)
        np.testing.assert_array_equal(g, w)
