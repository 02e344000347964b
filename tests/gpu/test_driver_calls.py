"""The GIL-held driver calls (stoker.backend.driver_calls) do what CuPy's calls do."""

import threading

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

SRC = r"""
extern "C" __global__ void args_out(double* out, const float* src, int a, float b, long long c, double d,
                                    unsigned char e, long long f, double g, const int* nothing) {
    if (threadIdx.x == 0 && blockIdx.x == 0) {
        out[0] = src[3]; out[1] = a; out[2] = b; out[3] = (double)c; out[4] = d; out[5] = e;
        out[6] = (double)f; out[7] = g; out[8] = nothing == nullptr ? 1.0 : 0.0;
        out[9] = gridDim.x * 1000 + gridDim.y * 100 + blockDim.x * 10 + blockDim.y;
    }
}
"""


def _args(cp, out, src):
    return (out, src, np.int32(-7), np.float32(2.5), np.int64(1 << 40), np.float64(-0.125), np.uint8(200),
            12345, 0.75, None)


def test_driver_path_is_used_on_a_gpu():
    from stoker.backend import driver_calls

    assert driver_calls.available()


def test_kernel_arguments_match_cupys_launch(cp):
    from stoker.backend import driver_calls

    fn = cp.RawModule(code=SRC).get_function("args_out")
    src = cp.arange(8, dtype=cp.float32)
    ours, theirs = cp.zeros(10, cp.float64), cp.zeros(10, cp.float64)
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        driver_calls.Kernel(fn)((3, 2), (32, 2), _args(cp, ours, src))
        fn((3, 2), (32, 2), _args(cp, theirs, src))
    stream.synchronize()
    expected = [3.0, -7.0, 2.5, float(1 << 40), -0.125, 200.0, 12345.0, 0.75, 1.0, 3000 + 200 + 320 + 2]
    np.testing.assert_array_equal(ours.get(), expected)
    np.testing.assert_array_equal(ours.get(), theirs.get())


def test_kernel_on_a_thread_that_never_used_cuda(cp):
    """A fresh thread has no current context for the driver API: the launch makes one current."""
    from stoker.backend import driver_calls

    fn = driver_calls.Kernel(cp.RawModule(code=SRC).get_function("args_out"))
    src = cp.arange(8, dtype=cp.float32)
    out = cp.zeros(10, cp.float64)
    cp.cuda.runtime.deviceSynchronize()
    errors = []

    def run():
        try:
            fn((1,), (32,), _args(cp, out, src), stream=cp.cuda.Stream.null)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    t = threading.Thread(target=run)
    t.start()
    t.join()
    cp.cuda.runtime.deviceSynchronize()
    assert not errors
    assert out.get()[0] == 3.0


def test_copy_record_and_query(cp):
    from stoker.backend import driver_calls

    stream = cp.cuda.Stream(non_blocking=True)
    host = np.frombuffer(cp.cuda.alloc_pinned_memory(4096), np.uint8, 4096)
    host[:] = np.arange(4096) % 251
    dev = cp.zeros(4096, cp.uint8)
    pool = driver_calls.EventPool()
    ev = pool.take()
    driver_calls.copy_to_device(dev.data.ptr + 16, host.ctypes.data, 1000, stream.ptr)
    driver_calls.record(ev, stream)
    stream.synchronize()
    assert driver_calls.event_done(ev)
    pool.give(ev)
    assert pool.take() is ev
    got = dev.get()
    np.testing.assert_array_equal(got[16:1016], host[:1000])
    assert not got[:16].any() and not got[1016:].any()


def test_table_arena_wraps_round_with_pooled_events(cp):
    """Many uploads through a small ring: every table arrives whole, events are recycled."""
    from stoker.backend.cuda import TableArena

    arena = TableArena(size=64 << 10)
    stream = cp.cuda.Stream(non_blocking=True)
    rng = np.random.default_rng(3)
    tables = [rng.integers(0, 1 << 30, size=int(rng.integers(1, 900)), dtype=np.int64) for _ in range(300)]
    outs = [arena.upload(t, stream) for t in tables]
    stream.synchronize()
    for t, o in zip(tables, outs):
        np.testing.assert_array_equal(o.get(), t)
    assert len(arena._live) < 300  # older laps' events were retired


def test_off_switch_goes_through_cupy(cp):
    from stoker import settings
    from stoker.backend import driver_calls

    with settings.override(gil_held_calls=False):
        driver_calls._driver.cache_clear()
        try:
            assert not driver_calls.available()
            fn = cp.RawModule(code=SRC).get_function("args_out")
            src = cp.arange(8, dtype=cp.float32)
            out = cp.zeros(10, cp.float64)
            with cp.cuda.Stream(non_blocking=True) as s:
                driver_calls.Kernel(fn)((1,), (32,), _args(cp, out, src))
            s.synchronize()
            assert out.get()[1] == -7.0
        finally:
            driver_calls._driver.cache_clear()
