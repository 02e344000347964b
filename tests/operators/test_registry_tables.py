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


def test_tables_uploaded_together_keep_their_values_types_and_shapes_in_one_copy(monkeypatch):
    """gpu_registry.upload_tables: several tables go up in one copy (each CUDA call lets go of the
    interpreter lock), and each comes back as its own view, aligned as a table of its own."""
    import os
    import sys

    import numpy as np

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
    import null_device

    from stoker.operators.base import BatchContext
    from stoker.operators.gpu_registry import upload_tables

    with null_device.installed() as cp:
        copies = []
        real = cp.cuda.runtime.memcpyAsync
        monkeypatch.setattr(cp.cuda.runtime, "memcpyAsync", lambda *a: copies.append(a[2]) or real(*a))
        batch = BatchContext(batch_size=3, device_id=0)
        tables = [np.arange(30, dtype=np.int64).reshape(3, 10), np.linspace(0, 1, 7, dtype=np.float32),
                  np.array([1, 2, 3], np.uint8), np.zeros((0, 4), np.float64)]
        got = upload_tables(batch, *tables)
        assert len(copies) == 1
        for g, t in zip(got, tables, strict=True):
            assert g.dtype == t.dtype and g.shape == t.shape
            np.testing.assert_array_equal(g.get(), t)
            assert (g.data.ptr - got[0].data.ptr) % 256 == 0 or g.size == 0
        one = upload_tables(batch, tables[0])  # one table: a plain upload
        assert len(copies) == 2 and one[0].shape == (3, 10)
