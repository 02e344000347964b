"""The NumPy model of libjpeg-turbo's JPEG round trip (jpeg_distortion_model, which the GPU kernel
transcribes) against the CPU operator's codec (cv2.imencode / cv2.imdecode): the same pixels, bit for
bit, over image sizes that exercise every edge rule (1x1, 1xN, Nx1, odd, not multiples of 8 or 16,
chroma planes of 1 and 2 columns) and the qualities where the table scaling changes rule.

Measured once over more than the tests run (session of 2026-11-26): every one of the 1,024 photos of
/tmp/rfdata, 12 qualities each, a random crop of 1..300 px per side each time (12,288 images), plus
1,152 synthetic images (noise, 0/255 noise, constants, checkerboards; 24 sizes from 1x1 to 375x500):
0 mismatching pixels.
"""

import glob

import cv2
import host_cuda
import numpy as np
import pytest

from stoker.operators.filters import jpeg_distortion_model as model
from stoker.operators.filters.jpeg_compression_distortion import jpeg_round_trip

QUALITIES = [1, 2, 10, 25, 49, 50, 51, 75, 90, 95, 99, 100]
SIZES = [(1, 1), (1, 2), (2, 1), (1, 23), (23, 1), (2, 2), (3, 4), (4, 5), (5, 5), (7, 9), (8, 8),
         (16, 16), (17, 33), (31, 18), (40, 3)]


def _assert_model_is_codec(img, quality):
    got = model.round_trip(img, quality)
    want = jpeg_round_trip(img, quality)
    assert got.shape == want.shape and got.dtype == want.dtype
    d = got != want
    assert not d.any(), f"{int(d.any(-1).sum())} pixels differ at quality {quality}, shape {img.shape}"


def test_quant_tables():
    assert np.array_equal(model.quant_tables(50), np.array([model.STD_LUMA, model.STD_CHROMA]))
    assert (model.quant_tables(100) == 1).all() and (model.quant_tables(1) == 255).all()
    assert model.quant_tables(75)[0, 0] == 8 and model.quant_tables(10)[0, 0] == 80  # (16*50+50)//100
    assert model.quality_scale(0) == model.quality_scale(1) == 5000 and model.quality_scale(101) == 0


def test_reciprocal_quantization_is_rounded_division():
    """libjpeg-turbo multiplies by a reciprocal; over every 16-bit input and every baseline
    divisor (8 q, q = 1..255), in SIMD (16-bit) and plain (32-bit) builds, that is rounded
    division, which the model and the kernel compute."""
    x = np.arange(-32767, 32768, dtype=np.int64)
    for q in range(1, 256):
        want = model.quantize(x, np.int64(8 * q))
        assert np.array_equal(model.reciprocal_quantize(x, 8 * q, 16), want), q
        assert np.array_equal(model.reciprocal_quantize(x, 8 * q, 32), want), q


@pytest.mark.parametrize("quality", QUALITIES)
def test_model_matches_codec_on_edge_sizes(quality, images):
    rng = np.random.default_rng(quality)
    smooth = images["rgb"]
    for h, w in SIZES:
        _assert_model_is_codec(np.ascontiguousarray(smooth[3:3 + h, 5:5 + w]), quality)
        _assert_model_is_codec(rng.integers(0, 256, (h, w, 3), dtype=np.uint8), quality)
    _assert_model_is_codec(smooth, quality)
    _assert_model_is_codec(images["noise"], quality)


@pytest.mark.parametrize("quality", [1, 50, 100])
def test_model_matches_codec_on_extremes(quality):
    """0/255 noise and a checkerboard: the largest DCT terms and IDCT overshoots."""
    rng = np.random.default_rng(5)
    _assert_model_is_codec((rng.integers(0, 2, (37, 29, 3)) * 255).astype(np.uint8), quality)
    yy, xx = np.mgrid[0:21, 0:35]
    board = (((yy + xx) & 1) * 255).astype(np.uint8)
    _assert_model_is_codec(np.stack([board, 255 - board, board], -1), quality)


def test_model_matches_codec_on_photos():
    """Crops of real photos, when the sample data set is on this machine."""
    files = sorted(glob.glob("/tmp/rfdata/*/*.jpg"))[::100]
    if not files:
        pytest.skip("no sample photos in /tmp/rfdata")
    rng = np.random.default_rng(3)
    for i, f in enumerate(files):
        img = cv2.cvtColor(cv2.imread(f), cv2.COLOR_BGR2RGB)
        h, w = (int(rng.integers(1, min(s, 120) + 1)) for s in img.shape[:2])
        _assert_model_is_codec(np.ascontiguousarray(img[:h, -w:]), QUALITIES[i % len(QUALITIES)])


def test_empty_image_passes_through():
    img = np.zeros((0, 5, 3), np.uint8)
    assert model.round_trip(img, 50).shape == (0, 5, 3)


# --- the CUDA kernel, compiled for the host ---------------------------------------------------
# No GPU here: kernels/jpeg_distortion.cu is compiled as C++ with CUDA's few keywords defined away,
# each thread block run by 64 host threads (a barrier for __syncthreads), one launch's blocks one
# after another. That checks the transcription (its integer steps, the table gpu_jpeg_distortion
# plans, the pointer arithmetic of frames and scratch) against the model and the codec; what only
# a GPU can check (NVRTC, launch limits, streams) is left to tests/operators/filters/test_jpeg_distortion_gpu.py.

HOST_SHIM = host_cuda.prelude("long long") + r"""
using std::max;
using std::min;
#include "jpeg_distortion.cu"

extern "C" void run(const long long *tab, int n, long long mcus, long long pixels) {
  launch(mcus, 1, 64, [&] { jpeg_mcu(tab, n); });
  launch((pixels + 255) / 256, 1, 256, [&] { jpeg_upsample_rgb(tab, n, pixels); });
}
"""


@pytest.fixture(scope="module")
def host_kernel(tmp_path_factory):
    lib = host_cuda.build(tmp_path_factory.mktemp("jpeg_kernel"), HOST_SHIM, "jpegkernel")
    if lib is None:
        pytest.skip("no g++ to compile the kernel for the host")
    return lib.run


def _run_host_kernel(run, samples, qualities):
    """What gpu_jpeg_distortion computes for ``samples`` (HWC or FHWC uint8), through the host
    build of the kernel: the same plan and table, host pointers instead of device ones."""
    import ctypes

    from stoker.operators.filters import gpu_jpeg_distortion as gpu

    plan = gpu.plan_images(np.array([s.shape for s in samples]), np.asarray(qualities))
    outs = [np.full_like(s, 77) for s in samples]
    scratch = np.zeros(max(plan["scratch"], 1), np.uint8)
    m = plan["sample"].size
    tab = plan["tab"]
    rows = tab[:m * gpu.TAB_COLS].reshape(m, gpu.TAB_COLS)
    rows[:, gpu.SRC] += np.array([s.ctypes.data for s in samples], np.int64)[plan["sample"]]
    rows[:, gpu.DST] += np.array([o.ctypes.data for o in outs], np.int64)[plan["sample"]]
    rows[:, gpu.SCRATCH] += scratch.ctypes.data
    if m:
        tab = np.ascontiguousarray(tab)
        run(tab.ctypes.data_as(ctypes.c_void_p), ctypes.c_int(m), ctypes.c_longlong(plan["mcus"]),
            ctypes.c_longlong(plan["pixels"]))
    return outs


def test_host_built_kernel_matches_codec(host_kernel, images):
    rng = np.random.default_rng(9)
    smooth = images["rgb"]
    samples = [np.ascontiguousarray(smooth[:h, :w]) for h, w in SIZES] + [images["noise"]]
    samples += [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for h, w in [(1, 1), (3, 5), (19, 37)]]
    samples.append(np.zeros((0, 4, 3), np.uint8))
    qualities = [QUALITIES[i % len(QUALITIES)] for i in range(len(samples))]
    got = _run_host_kernel(host_kernel, samples, qualities)
    for s, q, g in zip(samples, qualities, got):
        want = jpeg_round_trip(s, q) if s.size else s
        assert np.array_equal(g, want), (s.shape, q)


def test_host_built_kernel_frames(host_kernel, images):
    """FHWC samples: every frame an image of its own (one of them empty)."""
    video = np.stack([images["rgb"][:21, :30], images["rgb"][5:26, 7:37], images["noise"][:21, :30]])
    samples = [video, np.zeros((0, 5, 6, 3), np.uint8), video[:1, :1, :3]]
    got = _run_host_kernel(host_kernel, samples, [30, 75, 100])
    assert np.array_equal(got[0], np.stack([jpeg_round_trip(np.ascontiguousarray(f), 30) for f in video]))
    assert got[1].shape == (0, 5, 6, 3)
    assert np.array_equal(got[2][0], jpeg_round_trip(np.ascontiguousarray(video[0, :1, :3]), 100))


def test_gpu_checks_name_the_cpu_operators_faults():
    """gpu_jpeg_distortion's batch checks: the first failing sample and the CPU's message."""
    from stoker.operators.filters.gpu_jpeg_distortion import first_failure

    u8 = np.uint8
    assert first_failure(np.array([[4, 5, 3], [0, 2, 3]]), u8, "HWC") is None
    assert first_failure(np.array([[2, 4, 5, 3]]), u8, "FHWC") is None
    assert first_failure(np.zeros((0, 3)), np.float32, "HWC") is None
    assert first_failure(np.array([[4, 5, 3], [4, 5, 1]]), u8, "HWC") == (
        1, "expects 3 channels in the last dimension, got shape (4, 5, 1)")
    assert first_failure(np.array([[4, 5, 3]]), np.float32, "HWC") == (
        0, "expects uint8 HWC or FHWC RGB input, got float32 of shape (4, 5, 3)")
    assert first_failure(np.array([[4, 3]]), u8, "WC") == (
        0, "expects uint8 HWC or FHWC RGB input, got uint8 of shape (4, 3)")
    assert first_failure(np.array([[3, 4, 5]]), u8, "CHW")[1].startswith("expects a channel-last layout")
