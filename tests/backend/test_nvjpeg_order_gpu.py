"""The hardware JPEG engines against earlier work on the caller's stream.

nvJPEG's hardware backend writes a batched call's output when the call is made, not when the
stream reaches it. HardwareDecoder.run waits on the host first, so a decode into memory that
earlier queued work still reads must leave that work's result alone."""

import cv2
import numpy as np
import pytest

pytestmark = pytest.mark.gpu

_SPIN = r"""
extern "C" __global__ void spin(long long cycles) {
    long long t0 = clock64();
    while (clock64() - t0 < cycles) {}
}
"""


def _decoder():
    from stoker.backend.nvjpeg import HardwareDecoder, NvjpegUnavailable

    try:
        return HardwareDecoder(0)
    except (NvjpegUnavailable, OSError) as e:
        pytest.skip(f"no nvJPEG hardware decoder here: {e}")


def _photo(rng, h, w):
    yy, xx = np.mgrid[0:h, 0:w]
    base = np.stack([(np.sin(xx / (9 + k) + yy / (13 + k)) + 1) * 110 for k in range(3)], -1)
    return np.clip(base + rng.normal(0, 6, (h, w, 3)), 0, 255).astype(np.uint8)


@pytest.mark.parametrize("with_event", [False, True])
def test_engines_leave_memory_alone_until_earlier_readers_are_done(with_event, cp, rng):
    decoder = _decoder()
    h, w = 192, 256
    img = _photo(rng, h, w)
    ok, enc = cv2.imencode(".jpg", img[..., ::-1], [cv2.IMWRITE_JPEG_QUALITY, 90])
    assert ok
    out = cp.full(h * w * 3, 7, cp.uint8)
    cp.cuda.Device(0).synchronize()
    spin = cp.RawKernel(_SPIN, "spin")
    stream = cp.cuda.Stream(non_blocking=True)
    cycles = int(cp.cuda.runtime.deviceGetAttribute(cp.cuda.runtime.cudaDevAttrClockRate, 0)) * 1000 // 5
    with stream:
        spin((1,), (1,), (np.int64(cycles),))  # about 200 ms of queued work
        seen = out.astype(cp.int64).sum()  # reads the destination after it, in stream order
        ready = cp.cuda.Event(disable_timing=True)
        ready.record(stream)
    call = decoder.stage([enc.reshape(-1)], [(0, 0, h, w)], fixed_batch=1)
    decoder.run(call, [out.data.ptr], stream, ready=ready if with_event else None)
    with stream:
        decoded = out.reshape(h, w, 3).copy()  # queued after the call: sees the output
    stream.synchronize()
    decoder.close()
    assert int(seen) == 7 * out.size, "the engines wrote before earlier work on the stream had read"
    # (luma: the engines upsample chroma more simply than libjpeg-turbo)
    ref = cv2.imdecode(enc, cv2.IMREAD_COLOR)[..., ::-1]
    assert np.abs(_luma(cp.asnumpy(decoded)) - _luma(ref)).mean() < 1.0


def _luma(a):
    a = a.astype(np.float64)
    return 0.299 * a[..., 0] + 0.587 * a[..., 1] + 0.114 * a[..., 2]
