"""external_source(device="gpu") on a real GPU against the CPU path: CuPy arrays, torch CUDA
tensors and host arrays give the same batches as device='cpu' with .gpu(); no_copy reads the
caller's memory; a producer stream given as cuda_stream is waited for. Also debug mode on the GPU."""

import numpy as np
import pytest

import stoker.fn as fn
from stoker import pipeline_def

pytestmark = pytest.mark.gpu
N = 4


def _host(k=3, ragged=False):
    rng = np.random.default_rng(5)
    if ragged:
        return [[rng.integers(0, 256, (4 + i, 6, 3), dtype=np.uint8) for i in range(N)] for _ in range(k)]
    return [rng.integers(0, 256, (N, 8, 6, 3), dtype=np.uint8) for _ in range(k)]


def _pipe(source, device, **kw):
    @pipeline_def(batch_size=N, num_threads=2, device_id=0, seed=3)
    def p():
        x = fn.external_source(source=source, device=device, layout="HWC", **kw)
        x = x if device == "gpu" else x.gpu()
        return x, fn.flip(x, horizontal=1)

    return p()


def _compare(gpu_source, host, **kw):
    gpu, cpu = _pipe(gpu_source, "gpu", **kw), _pipe(host, "cpu")
    for _ in range(len(host)):
        for a, b in zip(gpu.run(), cpu.run()):
            for s, t in zip(a.as_cpu().samples(), b.as_cpu().samples()):
                np.testing.assert_array_equal(np.asarray(s), np.asarray(t))
    gpu.close()
    cpu.close()


def test_cupy_batches_match_the_cpu_path():
    import cupy as cp

    host = _host()
    _compare([cp.asarray(b) for b in host], host)
    _compare([cp.asarray(b) for b in host], host, no_copy=True)


def test_ragged_cupy_samples_match_the_cpu_path():
    import cupy as cp

    host = _host(ragged=True)
    _compare([[cp.asarray(s) for s in b] for b in host], host)


def test_torch_cuda_tensors_match_the_cpu_path():
    torch = pytest.importorskip("torch")
    host = _host()
    _compare([torch.from_numpy(b).cuda() for b in host], host)


def test_host_arrays_match_the_cpu_path():
    host = _host()
    _compare(host, host)


def test_no_copy_reads_the_callers_memory_and_copy_does_not():
    import cupy as cp

    batch = cp.asarray(_host(1)[0])
    shared, copied = _pipe([batch], "gpu", no_copy=True), _pipe([batch], "gpu")
    (a, _), (b, _) = shared.run(), copied.run()
    assert a.as_tensor().data_ptr() == batch.data.ptr
    assert b.as_tensor().data_ptr() != batch.data.ptr
    shared.close()
    copied.close()


def test_feed_input_waits_for_the_producer_stream():
    import cupy as cp

    @pipeline_def(batch_size=N, num_threads=1, device_id=0)
    def p():
        return fn.external_source(name="x", device="gpu")

    pipe = p()
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        x = cp.arange(N * 1000, dtype=cp.float32).reshape(N, 1000)
        for _ in range(20):  # keep the producer stream busy
            x = x * 1.0
    pipe.feed_input("x", x, cuda_stream=stream)
    (out,) = pipe.run()
    np.testing.assert_array_equal(out.as_cpu().as_array(), np.arange(N * 1000, dtype=np.float32).reshape(N, 1000))
    pipe.close()


def test_debug_mode_on_the_gpu_matches_graph_mode():
    host = _host()

    @pipeline_def(batch_size=N, num_threads=2, device_id=0, seed=9)
    def p():
        x = fn.external_source(source=host, layout="HWC").gpu()
        x = fn.random_resized_crop(x, size=(4, 4))
        return fn.flip(x, horizontal=fn.random.coin_flip()) * 2

    graph, debug = p(), p(debug=True)
    for _ in range(3):
        (a,), (b,) = graph.run(), debug.run()
        np.testing.assert_array_equal(a.as_cpu().as_array(), b.as_cpu().as_array())
    graph.close()
    debug.close()
