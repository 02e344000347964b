"""``.gpu()`` and ``.cpu()``: pinned, asynchronous uploads; dense and ragged batches round-trip."""

import numpy as np
import pytest

import stoker.fn as fn
from stoker import pipeline_def

pytestmark = pytest.mark.gpu


def test_upload_dense_and_ragged(batch_ctx, rng, cp):
    from stoker.operators.transfer import upload_batch
    from stoker.tensors import TensorListCPU

    dense = TensorListCPU([rng.normal(size=(4, 5)).astype(np.float32) for _ in range(3)], "HW", ["x", "y", "z"])
    g = upload_batch(dense, batch_ctx)
    assert g.dense() is not None and g.dense().shape == (3, 4, 5)
    batch_ctx.stream.synchronize()
    np.testing.assert_array_equal(g.as_cpu().as_array(), dense.as_array())
    assert g.source_info() == ["x", "y", "z"]
    ragged = TensorListCPU([rng.integers(0, 9, (k, 3), dtype=np.int32) for k in (1, 5, 2)])
    r = upload_batch(ragged, batch_ctx)
    batch_ctx.stream.synchronize()
    for a, b in zip(r.as_cpu().samples(), ragged.samples()):
        np.testing.assert_array_equal(a, b)


def test_pipeline_gpu_then_cpu_round_trip(rng):
    batches = [[rng.integers(0, 255, (int(rng.integers(1, 9)), 3), dtype=np.uint8) for _ in range(4)]
               for _ in range(5)]

    @pipeline_def(batch_size=4, num_threads=2, device_id=0, prefetch_queue_depth=2)
    def pipe():
        x = fn.external_source(source=batches, cycle=False)
        g = x.gpu()
        return g, g.cpu()

    p = pipe()
    p.build()
    held = []
    for b in batches:
        g, c = p.run()
        held.append((b, g))
        for got, want in zip(c.samples(), b):
            np.testing.assert_array_equal(got, want)
    # Outputs held by the user stay valid while later iterations run (no recycled memory).
    for b, g in held:
        for got, want in zip(g.as_cpu().samples(), b):
            np.testing.assert_array_equal(got, want)
