"""gpu_registry's helpers for GPU implementations' host-side tables."""


def test_per_sample_tables_raise_like_the_cpu_path():
    """A GPU implementation's host-side table built with gpu_registry.per_sample fails as the CPU
    path does: an OperatorError naming the operator, the argument and the sample's source."""
    import numpy as np
    import pytest

    from stoker.errors import OperatorError
    from stoker.operators.base import BatchContext
    from stoker.operators.gpu_registry import per_sample
    from stoker.operators.schema import get_operator

    op = get_operator("saturation")({"image_type": None, "saturation": 1.0, "dtype": None}, "gpu", name="sat1")
    batch = BatchContext(batch_size=2, sources=["a.jpg", "b.jpg"])
    tables = per_sample(op, batch, 1, lambda i: op.affine({"saturation": 0.5}, np.dtype(np.uint8)))
    assert len(tables) == 1 and tables[0][0].shape == (3, 3)
    with pytest.raises(OperatorError) as err:
        per_sample(op, batch, 2, lambda i: op.affine({"saturation": [1.0, -1.0][i]}, np.dtype(np.uint8)))
    assert err.value.operator == "sat1" and err.value.source == "b.jpg"
    assert "saturation" in str(err.value) and "b.jpg" in str(err.value)
