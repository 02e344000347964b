"""Mixed decoding (nvImageCodec + CPU threads) against OpenCV's CPU decode.

Tolerance: nvJPEG and libjpeg-turbo differ in IDCT and chroma upsampling, so
pixels agree on average within 2 levels and 99% of them within 12 levels;
formats that go through the CPU path (PNG) are exact.
"""

import time
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import cv2
import numpy as np
import pytest

pytestmark = pytest.mark.gpu


def _op(cpu_share, **args):
    from stoker.operators.base import Operator

    op = SimpleNamespace(args={"output_type": None, **args}, op_seed=7, instance_name="decoders.image",
                         origin="test")
    op.sample_args = lambda arg_inputs, i: op.args
    pytest.importorskip("nvidia.nvimgcodec")
    from stoker.operators.decoders import mixed

    op._mixed_state = mixed.DecoderState(0)
    op._mixed_state.cpu_share, op._mixed_state.share_auto = cpu_share, False
    op._mixed_state.hw_problem = "disabled"  # these tests cover the nvImageCodec path
    assert Operator  # the stub mirrors the attributes the decoder reads
    return op


def _encode(make_images, n=8):
    imgs = make_images(n, 40, 200)
    enc = []
    for k, im in enumerate(imgs):
        bgr = cv2.cvtColor(im, cv2.COLOR_RGB2BGR)
        if k == n - 1:
            ok, buf = cv2.imencode(".png", bgr)
        else:
            params = [cv2.IMWRITE_JPEG_QUALITY, 92]
            if k % 3 == 1:
                params += [cv2.IMWRITE_JPEG_SAMPLING_FACTOR, cv2.IMWRITE_JPEG_SAMPLING_FACTOR_444]
            ok, buf = cv2.imencode(".jpg", bgr, params)
        assert ok
        enc.append(buf.reshape(-1))
    return enc


def _ref(buf):
    return cv2.cvtColor(cv2.imdecode(buf, cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)


def _run(op, kind, enc, batch_ctx):
    from stoker.operators.decoders.mixed import mixed_decode
    from stoker.tensors import TensorListCPU

    with ThreadPoolExecutor(4) as pool:
        batch_ctx.pool = pool
        batch_ctx.sources = [f"s{i}" for i in range(len(enc))]
        out = mixed_decode(op, kind, batch_ctx, [TensorListCPU(enc)], {})[0]
        batch_ctx.stream.synchronize()
        return [np.asarray(s.get()) for s in out.samples()], out


@pytest.mark.parametrize("share", [0.0, 0.5])
def test_full_decode_close_to_opencv(share, batch_ctx, make_images):
    enc = _encode(make_images)
    got, tl = _run(_op(share), "image", enc, batch_ctx)
    assert tl.layout() == "HWC" and tl.source_info() == [f"s{i}" for i in range(len(enc))]
    for k, (g, buf) in enumerate(zip(got, enc)):
        want = _ref(buf)
        assert g.shape == want.shape and g.dtype == np.uint8
        d = np.abs(g.astype(int) - want)
        if k == len(enc) - 1:  # PNG: CPU path, exact
            assert d.max() == 0
        else:
            assert d.mean() < 2 and np.percentile(d, 99) <= 12


def test_random_crop_roi_matches_full_decode_cropped(batch_ctx, make_images):
    from stoker.operators.base import SampleContext
    from stoker.operators.random.crop_window import sample_crop_window

    enc = _encode(make_images)
    op = _op(0.0)
    got, _ = _run(op, "image_random_crop", enc, batch_ctx)
    for i, (g, buf) in enumerate(zip(got, enc)):
        full = _ref(buf)
        rng = SampleContext(i, 0, op.op_seed, f"s{i}").rng
        y, x, h, w = sample_crop_window(rng, full.shape[0], full.shape[1])
        want = full[y:y + h, x:x + w]
        assert g.shape == want.shape
        assert np.abs(g.astype(int) - want).mean() < 2.5


def test_corrupt_sample_names_its_source(batch_ctx, make_images):
    from stoker.errors import OperatorError

    enc = _encode(make_images, 3)
    enc[1] = np.frombuffer(b"\xff\xd8\xff\xe0 definitely not a jpeg", np.uint8)
    with pytest.raises(OperatorError, match="s1"):
        _run(_op(0.0), "image", enc, batch_ctx)


# --- the hardware JPEG engines (nvJPEG through ctypes) -------------------------------------------

def _hw_op(**args):
    op = _op(0.0, **args)
    st = op._mixed_state
    st.hw_problem = None  # enable it whatever STOKER_NVJPEG_HW says
    if st.hardware() is None:
        pytest.skip(f"no nvJPEG hardware decoder here: {st.hw_problem}")
    return op


def _smooth_images(rng, n):
    """Photo-like images with mild noise (hardware and CPU chroma upsampling differ most on noise)."""
    out = []
    for _ in range(n):
        h, w = rng.integers(60, 240, 2)
        yy, xx = np.mgrid[0:h, 0:w]
        base = np.stack([(np.sin(xx / (9 + 3 * k) + yy / (13 + k)) + 1) * 110 for k in range(3)], -1)
        out.append(np.clip(base + rng.normal(0, 3, (h, w, 3)), 0, 255).astype(np.uint8))
    return out


def _jpeg(im, progressive=False):
    params = [cv2.IMWRITE_JPEG_QUALITY, 90]
    if progressive:
        params += [cv2.IMWRITE_JPEG_PROGRESSIVE, 1]
    ok, buf = cv2.imencode(".jpg", cv2.cvtColor(im, cv2.COLOR_RGB2BGR), params)
    assert ok
    return buf.reshape(-1)


def test_hardware_batch_mixes_engines_and_cpu_in_one_flat_buffer(batch_ctx, rng):
    imgs = _smooth_images(rng, 6)
    enc = [_jpeg(im) for im in imgs[:4]] + [_jpeg(imgs[4], progressive=True)]
    ok, png = cv2.imencode(".png", cv2.cvtColor(imgs[5], cv2.COLOR_RGB2BGR))
    enc.append(png.reshape(-1))
    op = _hw_op()
    got, tl = _run(op, "image", enc, batch_ctx)
    assert tl._flat is not None  # one buffer, no per-sample arrays made by the decoder
    assert tl.source_info() == [f"s{i}" for i in range(6)]
    for k, (g, buf) in enumerate(zip(got, enc)):
        want = _ref(buf)
        assert g.shape == want.shape
        d = np.abs(g.astype(int) - want)
        if k == 5:
            assert d.max() == 0  # PNG: decoded on the CPU and copied into its slot
        else:
            # The engines upsample chroma more simply than libjpeg-turbo: luma agrees closely, colour
            # less on these strongly coloured gradients (0.57 levels mean on the benchmark set).
            assert np.abs(_luma(g) - _luma(want)).mean() < 1.0, k
            assert d.mean() < 4.0, (k, d.mean())


def test_hardware_random_crop_matches_cpu_window(batch_ctx, rng):
    """Random-crop windows from the engines, grayscale JPEGs included: the engines take those too
    and write RGB with three equal channels, as OpenCV's colour decode does."""
    from stoker.operators.base import SampleContext
    from stoker.operators.random.crop_window import sample_crop_window

    imgs = _smooth_images(rng, 8)
    gray = {2, 5}
    enc = [_jpeg(im) if k not in gray else cv2.imencode(".jpg", cv2.cvtColor(im, cv2.COLOR_RGB2GRAY))[1].reshape(-1)
           for k, im in enumerate(imgs)]
    op = _hw_op()
    got, _ = _run(op, "image_random_crop", enc, batch_ctx)
    assert op._mixed_state.stats.timing["hw_images"] == 8  # none left to the CPU
    for i, (g, buf) in enumerate(zip(got, enc)):
        full = _ref(buf)
        y, x, h, w = sample_crop_window(SampleContext(i, 0, op.op_seed, f"s{i}").rng, full.shape[0], full.shape[1])
        want = full[y:y + h, x:x + w]
        assert g.shape == want.shape
        assert np.abs(_luma(g) - _luma(want)).mean() < 1.0 and np.abs(g.astype(int) - want).mean() < 4.0
        if i in gray:  # no chroma to upsample: the same IDCT output as libjpeg-turbo's, near enough
            assert np.array_equal(g[..., 0], g[..., 1]) and np.array_equal(g[..., 0], g[..., 2])
            assert np.abs(g.astype(int) - want).max() <= 2


@pytest.mark.parametrize("kind", ["image", "image_random_crop"])
def test_one_lane_on_a_stream_of_its_own_gives_the_same_pixels(kind, batch_ctx, rng, stoker_settings):
    """STOKER_NVJPEG_STREAM=own: the engines' call goes on a stream of its own, after an event on
    the pipeline's stream; the GPU stage waits for its end. Same images as on the pipeline's
    stream (the default, STOKER_NVJPEG_STREAM=pipeline)."""
    imgs = _smooth_images(rng, 9)
    enc = [_jpeg(im, progressive=(k == 4)) for k, im in enumerate(imgs)]
    stoker_settings(nvjpeg_stream="pipeline")
    on_pipeline = _hw_op()
    got_pipeline, _ = _run(on_pipeline, kind, enc, batch_ctx)
    assert on_pipeline._mixed_state.lane.stream is None
    stoker_settings(nvjpeg_stream="own")
    op = _hw_op()
    assert op._mixed_state.lane.stream is not None
    for _ in range(2):
        got_own, tl = _run(op, kind, enc, batch_ctx)
        assert tl._flat is not None
        for a, b in zip(got_pipeline, got_own):
            assert a.shape == b.shape and np.array_equal(a, b)


def test_engines_call_without_padding_on_a_fresh_thread(cp, rng):
    """A call of exactly ``fixed_batch`` images (every image of the batch eligible, so no padding)
    from a thread that has made no CUDA call yet: nvJPEG answered status 5 there until the
    decoder bound the device's context to the calling thread itself."""
    import threading

    from stoker.backend.nvjpeg import HardwareDecoder, NvjpegUnavailable

    try:
        decoder = HardwareDecoder(0)
    except (NvjpegUnavailable, OSError) as e:
        pytest.skip(f"no nvJPEG hardware decoder here: {e}")
    imgs = _smooth_images(rng, 4)
    enc = [_jpeg(im) for im in imgs]
    windows = np.array([(0, 0, im.shape[0], im.shape[1]) for im in imgs])
    sizes = windows[:, 2] * windows[:, 3] * 3
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    out = cp.empty(int(sizes.sum()), cp.uint8)  # allocated here: the thread makes no CuPy call
    stream = cp.cuda.Stream(non_blocking=True)
    result: dict = {}

    def work():
        try:
            decoder.decode_into(enc, windows, out.data.ptr + offsets, stream, fixed_batch=len(enc))
        except Exception as e:  # noqa: BLE001 - reported by the assertion below
            result["error"] = e

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    decoder.close()
    assert "error" not in result, result.get("error")
    stream.synchronize()
    host = cp.asnumpy(out)
    for (_, _, h, w), off, buf in zip(windows, offsets, enc):
        got = host[off:off + h * w * 3].reshape(h, w, 3)
        assert np.abs(_luma(got) - _luma(_ref(buf))).mean() < 1.0


def _luma(a):
    a = a.astype(np.float64)
    return 0.299 * a[..., 0] + 0.587 * a[..., 1] + 0.114 * a[..., 2]


def test_hardware_path_names_a_corrupt_sample(batch_ctx, rng):
    from stoker.errors import OperatorError

    enc = [_jpeg(im) for im in _smooth_images(rng, 3)]
    enc[1] = np.frombuffer(b"\xff\xd8\xff\xe0 definitely not a jpeg", np.uint8)
    with pytest.raises(OperatorError, match="s1"):
        _run(_hw_op(), "image", enc, batch_ctx)


@pytest.mark.parametrize("kind", ["image", "image_random_crop"])
def test_cpu_share_in_helper_processes_equals_libjpeg_turbo(kind, batch_ctx, rng):
    """STOKER_CPU_DECODE_PROCESSES: half of the batch's engine-eligible JPEGs (the cheapest on the
    host) decodes in helper processes; those samples equal libjpeg-turbo's window exactly, the rest come from the
    engines, and the batch is still one flat buffer."""
    from stoker.operators.base import SampleContext
    from stoker.operators.decoders import turbo
    from stoker.operators.decoders.mixed.plan import cheapest_on_the_host
    from stoker.operators.random.crop_window import sample_crop_window

    if not turbo.available():
        pytest.skip("no TurboJPEG 3 library")
    imgs = _smooth_images(rng, 12)
    # a JPEG the engines cannot take (progressive) goes to the helpers as well; a grayscale one is
    # the engines' like any baseline JPEG
    ok, gray = cv2.imencode(".jpg", cv2.cvtColor(imgs[11], cv2.COLOR_RGB2GRAY))
    enc = [_jpeg(im) for im in imgs[:10]] + [_jpeg(imgs[10], progressive=True), gray.reshape(-1)]
    op = _hw_op()
    st = op._mixed_state
    st.cpu_share, st.share_auto, st.procs_count, st.procs_threads = 0.5, False, 2, 2
    try:
        _run(op, kind, enc, batch_ctx)  # starts the helpers; this batch decodes on the pool
        while not st.procs.ready():
            time.sleep(0.02)
        for _ in range(3):  # batches after the first reuse the shared slots
            got, tl = _run(op, kind, enc, batch_ctx)
        assert st.procs is not None and st.procs.alive() and tl._flat is not None
        fulls = [_ref(buf) for buf in enc]
        wins = [(0, 0, *full.shape[:2]) for full in fulls]
        if kind == "image_random_crop":
            wins = [sample_crop_window(SampleContext(i, 0, op.op_seed, f"s{i}").rng, *full.shape[:2])
                    for i, full in enumerate(fulls)]
        sizes = np.array([full.shape[:2] for full in fulls])
        eligible = list(range(10)) + [11]
        on_helpers = set(cheapest_on_the_host(eligible, wins, sizes, int(round(len(eligible) * 0.5)))) | {10}
        for i, (g, buf, full, win) in enumerate(zip(got, enc, fulls, wins)):
            if i in on_helpers:  # the helpers' share and the progressive JPEG: libjpeg-turbo, bit for bit
                np.testing.assert_array_equal(g, turbo.decode_window(buf, win))
            else:
                y, x, h, w = win
                want = full[y:y + h, x:x + w]
                assert g.shape == want.shape and np.abs(_luma(g) - _luma(want)).mean() < 1.0
    finally:
        st.close()
    assert st.procs is None


def test_cpu_share_in_helper_processes_reports_a_bad_sample_under_skip(batch_ctx, rng):
    from stoker.operators.decoders import turbo

    if not turbo.available():
        pytest.skip("no TurboJPEG 3 library")
    enc = [_jpeg(im) for im in _smooth_images(rng, 6)]
    bad = enc[5].copy()  # a bogus Huffman table after the frame header: still engine-eligible
    dht = bytes(bad).index(b"\xff\xc4")
    bad[dht + 5:dht + 21] = 0xFF
    enc[5] = bad
    op = _hw_op()
    st = op._mixed_state
    # share 1: every image, the bad one included, decodes in the helper
    st.cpu_share, st.share_auto, st.procs_count, st.procs_threads = 1.0, False, 1, 2
    try:
        _run(op, "image", enc[:5], batch_ctx)  # starts the helpers
        while not st.procs.ready():
            time.sleep(0.02)
        batch_ctx.on_error = "skip"
        _run(op, "image", enc, batch_ctx)
    except Exception:  # noqa: BLE001 - what matters is where the failure was recorded
        pass
    finally:
        st.close()
    assert 5 in batch_ctx.failures and "s5" in str(batch_ctx.failures[5])
