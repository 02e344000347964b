"""external_source(device="gpu") on the null device (tests/null_device.py, a NumPy stand-in for
CuPy): device arrays reach the GPU stage without a host copy (and without any copy under
no_copy), host arrays are uploaded once per batch, the producer stream is waited for on the
device, and the values equal the CPU path's."""

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

N = 3


def _pipe(**es_args):
    import stoker.fn as fn
    from stoker import pipeline_def

    @pipeline_def(batch_size=N, num_threads=1, device_id=0, seed=1, exec_async=False, exec_pipelined=False,
                  prefetch_queue_depth=1)
    def p():
        return fn.external_source(device="gpu", layout="HWC", **es_args)

    return p()


def _host_batches(k=2):
    rng = np.random.default_rng(3)
    return [rng.integers(0, 256, (N, 4, 5, 3), dtype=np.uint8) for _ in range(k)]


def _values(out):
    return [np.asarray(s) for s in out.as_cpu().samples()]


def test_a_device_batch_is_used_without_a_host_copy_under_no_copy(null_cupy, monkeypatch):
    from stoker.operators import transfer

    uploads = []
    monkeypatch.setattr(transfer, "upload_batch", lambda *a: uploads.append(a) or None)
    dev = [b.view(null_cupy.ndarray) for b in _host_batches()]
    pipe = _pipe(source=dev, no_copy=True)
    for want in dev:
        (out,) = pipe.run()
        assert type(out).__name__ == "TensorListGPU" and out.layout() == "HWC"
        assert out.dense() is want or np.shares_memory(out.dense(), want)  # the caller's memory
    assert uploads == []
    pipe.close()


def test_a_device_batch_is_copied_on_the_device_by_default(null_cupy):
    dev = [b.view(null_cupy.ndarray) for b in _host_batches()]
    pipe = _pipe(source=dev)
    (out,) = pipe.run()
    assert not np.shares_memory(out.dense(), dev[0])
    for s, w in zip(_values(out), dev[0]):
        np.testing.assert_array_equal(s, np.asarray(w))
    pipe.close()


def test_host_batches_are_uploaded_once_per_batch(null_cupy, monkeypatch):
    from stoker.operators import transfer

    calls = []
    real = transfer.upload_batch
    monkeypatch.setattr(transfer, "upload_batch", lambda host, ctx: calls.append(len(host)) or real(host, ctx))
    host = _host_batches()
    pipe = _pipe(source=host)
    for want in host:
        (out,) = pipe.run()
        for s, w in zip(_values(out), want):
            np.testing.assert_array_equal(s, w)
    assert calls == [N, N]
    pipe.close()


def test_per_sample_device_arrays_and_feed_input_with_a_stream(null_cupy, monkeypatch):
    import stoker.fn as fn
    from stoker import pipeline_def

    waited = []
    monkeypatch.setattr(null_cupy.cuda.runtime, "eventRecord",
                        staticmethod(lambda ev, stream: waited.append(stream)), raising=False)

    @pipeline_def(batch_size=N, num_threads=1, device_id=0, exec_async=False, exec_pipelined=False,
                  prefetch_queue_depth=1)
    def p():
        return fn.external_source(name="x", device="gpu")

    pipe = p()
    samples = [np.full((2, 2), i, np.float32).view(null_cupy.ndarray) for i in range(N)]
    pipe.feed_input("x", samples, cuda_stream=1234)
    (out,) = pipe.run()
    assert waited == [1234]
    assert [float(v[0, 0]) for v in _values(out)] == [0.0, 1.0, 2.0]
    pipe.close()


def test_device_outputs_equal_the_cpu_path(null_cupy):
    import stoker.fn as fn
    from stoker import pipeline_def

    host = _host_batches(3)

    @pipeline_def(batch_size=N, num_threads=1, device_id=0, exec_async=False, exec_pipelined=False,
                  prefetch_queue_depth=1)
    def p(device):
        return fn.external_source(source=host, device=device, layout="HWC")

    gpu, cpu = p("gpu"), p("cpu")
    for _ in range(3):
        (g,), (c,) = gpu.run(), cpu.run()
        for a, b in zip(_values(g), c.samples()):
            np.testing.assert_array_equal(a, np.asarray(b))
    gpu.close()
    cpu.close()


def test_a_device_external_source_needs_a_gpu_pipeline():
    import stoker.fn as fn
    from stoker import pipeline_def
    from stoker.errors import PipelineBuildError

    @pipeline_def(batch_size=1, num_threads=1, device_id=None)
    def p():
        return fn.external_source(source=[[np.zeros(2)]], device="gpu")

    with pytest.raises(PipelineBuildError, match="device_id=None"):
        p().build()
