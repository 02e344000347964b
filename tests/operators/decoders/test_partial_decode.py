"""Partial JPEG decoding (only the crop window, libjpeg-turbo through TurboJPEG 3): the pixels must
equal the full decode's window exactly, for every chroma subsampling, progressive files, windows at
every edge, and RGB or BGR output; without the library the decoders crop the full decode."""

import cv2
import numpy as np
import pytest

from stoker import types
from stoker.backend.nvjpeg import jpeg_frame
from stoker.operators.decoders import cpu, turbo

needs_turbo = pytest.mark.skipif(not turbo.available(), reason="no TurboJPEG 3 library (pip install turbojpeg)")

SAMPLINGS = {"444": cv2.IMWRITE_JPEG_SAMPLING_FACTOR_444, "422": cv2.IMWRITE_JPEG_SAMPLING_FACTOR_422,
             "420": cv2.IMWRITE_JPEG_SAMPLING_FACTOR_420, "411": cv2.IMWRITE_JPEG_SAMPLING_FACTOR_411,
             "440": cv2.IMWRITE_JPEG_SAMPLING_FACTOR_440}


def _jpeg(h, w, sampling, progressive=False, seed=0):
    rng = np.random.default_rng(seed)
    small = rng.integers(0, 256, (max(2, h // 6), max(2, w // 6), 3), np.uint8)
    img = cv2.resize(small, (w, h), interpolation=cv2.INTER_CUBIC)  # colour edges: chroma upsampling matters
    img = cv2.add(img, rng.integers(0, 40, img.shape, np.uint8))
    params = [cv2.IMWRITE_JPEG_QUALITY, 92, cv2.IMWRITE_JPEG_SAMPLING_FACTOR, SAMPLINGS[sampling],
              cv2.IMWRITE_JPEG_PROGRESSIVE, int(progressive)]
    ok, enc = cv2.imencode(".jpg", img, params)
    assert ok
    return enc.reshape(-1)


def _windows(h, w, rng, n=25):
    wins = [(0, 0, h, w), (0, 0, 1, 1), (h - 1, w - 1, 1, 1), (0, w - 17, h, 17), (h // 3, 0, 5, w), (3, 5, 20, 33)]
    for _ in range(n):
        ch, cw = int(rng.integers(1, h + 1)), int(rng.integers(1, w + 1))
        wins.append((int(rng.integers(0, h - ch + 1)), int(rng.integers(0, w - cw + 1)), ch, cw))
    return [win for win in wins if win[0] + win[2] <= h and win[1] + win[3] <= w]


@needs_turbo
@pytest.mark.parametrize("sampling", sorted(SAMPLINGS))
@pytest.mark.parametrize("progressive", [False, True])
def test_window_equals_full_decode(sampling, progressive):
    h, w = 97, 131  # not multiples of any iMCU
    data = _jpeg(h, w, sampling, progressive, seed=len(sampling))
    full = cv2.imdecode(data, cv2.IMREAD_COLOR_RGB)
    for win in _windows(h, w, np.random.default_rng(3)):
        y, x, ch, cw = win
        part = turbo.decode_window(data, win)
        assert part is not None, win
        np.testing.assert_array_equal(part, full[y:y + ch, x:x + cw], err_msg=f"{sampling} {win}")
    y, x, ch, cw = 10, 20, 30, 40
    bgr = turbo.decode_window(data, (y, x, ch, cw), bgr=True)
    np.testing.assert_array_equal(bgr, full[y:y + ch, x:x + cw, ::-1])


@needs_turbo
def test_decode_cpu_uses_it_and_falls_back(monkeypatch):
    data = _jpeg(64, 80, "420", seed=9)
    full = cv2.imdecode(data, cv2.IMREAD_COLOR_RGB)
    win = (7, 9, 30, 41)
    calls = []
    real = turbo.decode_window
    monkeypatch.setattr(turbo, "decode_window", lambda *a, **k: calls.append(a) or real(*a, **k))
    out = cpu.decode_cpu(data, types.RGB, roi_fn=lambda hh, ww: win)
    assert calls and out.flags.c_contiguous
    np.testing.assert_array_equal(out, full[7:37, 9:50])
    f32 = cpu.decode_cpu(data, types.RGB, np.float32, roi=win)
    np.testing.assert_allclose(f32, full[7:37, 9:50] / 255.0, rtol=1e-6)
    monkeypatch.setattr(turbo, "decode_window", lambda *a, **k: None)  # library missing or failing
    np.testing.assert_array_equal(cpu.decode_cpu(data, types.RGB, roi=win), full[7:37, 9:50])


def test_bad_window_is_reported_before_decoding():
    data = _jpeg(40, 50, "444")
    with pytest.raises(cpu.ImageDecodeError, match="does not fit"):
        cpu.decode_cpu(data, types.RGB, roi=(30, 0, 20, 10))


def test_corrupt_data_behaves_as_the_full_decode():
    data = _jpeg(64, 80, "420", seed=2).copy()
    data[len(data) // 2:len(data) // 2 + 40] = 0  # damaged entropy-coded data: libjpeg warns, keeps going
    full = cv2.imdecode(data, cv2.IMREAD_COLOR_RGB)
    out = cpu.decode_cpu(data, types.RGB, roi=(5, 6, 40, 50))
    np.testing.assert_array_equal(out, full[5:45, 6:56])


@needs_turbo
def test_strided_input_buffer():
    data = _jpeg(40, 50, "420", seed=4)
    spread = np.zeros(data.size * 2, np.uint8)
    spread[::2] = data
    strided = spread[::2]
    assert not strided.flags.c_contiguous
    full = cv2.imdecode(data, cv2.IMREAD_COLOR_RGB)
    np.testing.assert_array_equal(turbo.decode_window(strided, (3, 4, 20, 30)), full[3:23, 4:34])


@needs_turbo
def test_threads_each_get_their_own_decompressor():
    from concurrent.futures import ThreadPoolExecutor

    datas = [_jpeg(60 + i, 70 + 2 * i, "420", seed=i) for i in range(6)]
    fulls = [cv2.imdecode(d, cv2.IMREAD_COLOR_RGB) for d in datas]

    def work(i):
        d, f = datas[i % 6], fulls[i % 6]
        win = (i % 5, i % 7, 30, 40)
        return np.array_equal(turbo.decode_window(d, win), f[win[0]:win[0] + 30, win[1]:win[1] + 40])

    with ThreadPoolExecutor(4) as pool:
        assert all(pool.map(work, range(200)))


@needs_turbo
@pytest.mark.parametrize("progressive", [False, True])
def test_grayscale_window_equals_full_decode(progressive):
    """Grayscale (and progressive) files take the whole-rows path: the same pixels."""
    rng = np.random.default_rng(5)
    img = cv2.resize(rng.integers(0, 256, (20, 24), np.uint8), (131, 97), interpolation=cv2.INTER_CUBIC)
    ok, data = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, 90, cv2.IMWRITE_JPEG_PROGRESSIVE, int(progressive)])
    assert ok
    data = data.reshape(-1)
    assert jpeg_frame(data)[0] == (0xC2 if progressive else 0xC0)
    full = cv2.imdecode(data, cv2.IMREAD_COLOR_RGB)
    for y, x, ch, cw in _windows(97, 131, rng):
        np.testing.assert_array_equal(turbo.decode_window(data, (y, x, ch, cw)), full[y:y + ch, x:x + cw])
