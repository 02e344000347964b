"""Fast mode (setting reduced_size_decode): JPEGs decoded at a reduced size where a resize follows.

The outputs must keep the exact path's shapes and stay close to its pixels (PSNR bound below),
off must change nothing, and the mode must stay out of the way where no shrinking resize follows
or where the smallest scale would go below the resize's target. Bad files behave as without it.
"""

import os

import cv2
import numpy as np
import pytest
from decoder_helpers import as_u8, run_stoker

from stoker import fn, pipeline_def, settings
from stoker.errors import OperatorError
from stoker.operators.decoders import turbo
from stoker.pipeline import chain_processes, reduced_decode

pytestmark = pytest.mark.skipif(not turbo.available(), reason="no TurboJPEG 3 library (pip install turbojpeg)")

# Lowest PSNR (dB) of a fast-mode output against the exact path's allowed here. On the benchmark's
# sample photos the worst image measured 43 dB (docs/performance.md); these generated ones have
# sharper detail, so the bound leaves room.
MIN_PSNR = 35.0


def photo(h: int, w: int, seed: int = 0) -> np.ndarray:
    """A photo-like RGB image with detail at several scales (waves, blobs, edges, noise)."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    base = np.stack([np.sin(x / (9 + 4 * k) + k) * np.cos(y / (13 - 3 * k)) * 70 + 128 for k in range(3)], -1)
    blobs = cv2.resize(rng.uniform(-50, 50, (h // 16 + 2, w // 16 + 2, 3)), (w, h), interpolation=cv2.INTER_CUBIC)
    img = base + blobs + rng.normal(0, 4, (h, w, 3))
    img[h // 3:h // 3 + h // 5, w // 4:w // 2] += 60  # a sharp-edged block
    return np.clip(img, 0, 255).astype(np.uint8)


def jpeg(img: np.ndarray, quality: int = 90) -> bytes:
    ok, enc = cv2.imencode(".jpg", np.ascontiguousarray(img[..., ::-1]), [cv2.IMWRITE_JPEG_QUALITY, quality])
    assert ok
    return enc.tobytes()


SIZES = [(240, 320), (301, 257), (480, 360), (200, 520)]
DATAS = [as_u8(jpeg(photo(h, w, seed=i))) for i, (h, w) in enumerate(SIZES)]


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return float("inf") if mse == 0 else 10 * np.log10(255.0 ** 2 / mse)


def run(build, fast: bool | None, datas=DATAS, **kw):
    """The pipeline's first output, with fast mode on, off, or left at its default (None)."""
    if fast is None:
        return run_stoker(datas, build, num_threads=2, **kw)[0]
    with settings.override(reduced_size_decode=fast):
        return run_stoker(datas, build, num_threads=2, **kw)[0]


def val(x, fn, types):
    return fn.resize(fn.decoders.image(x, output_type=types.RGB), resize_shorter=96)


def train(x, fn, types):
    imgs = fn.decoders.image_random_crop(x, output_type=types.RGB, random_area=[0.3, 1.0])
    return fn.crop_mirror_normalize(fn.resize(imgs, resize_x=64, resize_y=64), dtype=types.UINT8,
                                    mirror=fn.random.coin_flip())


def bgr_sizes(x, fn, types):
    return fn.resize(fn.decoders.image(x, output_type=types.BGR), size=[70, 90], interp_type=types.INTERP_CUBIC)


@pytest.mark.parametrize("build", [val, train, bgr_sizes], ids=["resize_shorter", "random_crop", "bgr_size_cubic"])
def test_shapes_equal_and_pixels_close_to_the_exact_path(build):
    exact, fast = run(build, False), run(build, True)
    assert [a.shape for a in fast] == [a.shape for a in exact]
    values = [psnr(a, b) for a, b in zip(exact, fast)]
    assert min(values) > MIN_PSNR, values
    assert any(v != float("inf") for v in values)  # it did decode at a reduced size


def test_random_crop_windows_scale_with_the_image():
    """The random window is drawn in the full image's coordinates: fast mode shows the same region.
    (A region off by a few pixels would already fall far below the bound on this detail.)"""
    def crop(x, fn, types):
        imgs = fn.decoders.image_random_crop(x, random_area=[0.1, 0.3], random_aspect_ratio=[0.5, 2.0])
        return fn.resize(imgs, resize_x=32, resize_y=32)

    for seed in (1, 2, 3):
        exact, fast = run(crop, False, seed=seed), run(crop, True, seed=seed)
        assert all(psnr(a, b) > MIN_PSNR for a, b in zip(exact, fast))


def test_off_by_default_and_identical_to_the_exact_path():
    assert settings.get().reduced_size_decode is False
    with settings.override(fuse=False):  # the unfused executor: each operator on its own
        unfused = run(train, None)
    for out in (run(train, None), run(train, False)):
        assert all(np.array_equal(a, b) for a, b in zip(unfused, out))


@pytest.mark.parametrize("case", ["crop_only", "enlarging", "below_target", "gray_jpeg", "png"])
def test_not_applied_where_it_would_not_shrink(case):
    datas = DATAS
    if case == "crop_only":
        def build(x, fn, types):
            return fn.crop(fn.decoders.image(x), crop=(100, 100))
    elif case == "enlarging":
        def build(x, fn, types):
            return fn.resize(fn.decoders.image(x), resize_shorter=600)
    elif case == "below_target":  # it shrinks, but 7/8 of the 240 x 320 image is below the target
        datas = DATAS[:1]

        def build(x, fn, types):
            return fn.resize(fn.decoders.image(x), size=[220, 160])
    else:
        img = photo(240, 320)
        datas = [as_u8(cv2.imencode(".jpg", img[..., 0])[1] if case == "gray_jpeg" else cv2.imencode(".png", img)[1])]

        def build(x, fn, types):
            return fn.resize(fn.decoders.image(x), resize_shorter=60)
    exact, fast = run(build, False, datas), run(build, True, datas)
    assert all(np.array_equal(a, b) for a, b in zip(exact, fast))


def test_smallest_scale_that_keeps_the_target():
    assert reduced_decode._eighths(400, 400, 224, 224) == 5  # 250 >= 224; 4/8 would give 200
    assert reduced_decode._eighths(448, 1000, 224, 224) == 4
    assert reduced_decode._eighths(2000, 1800, 224, 224) == 1
    assert reduced_decode._eighths(400, 250, 224, 224) is None  # 7/8 of 250 is below 224
    assert reduced_decode._eighths(100, 100, 224, 224) is None  # enlarging


def test_plan_needs_a_resize_that_alone_reads_the_decoder():
    @pipeline_def(batch_size=2, num_threads=1, device_id=None)
    def two_readers():
        x = fn.external_source(source=lambda: DATAS[:2], batch=True)
        imgs = fn.decoders.image(x)
        return fn.resize(imgs, resize_shorter=50), imgs  # the decoded images are an output too

    with settings.override(reduced_size_decode=True):
        pipe = two_readers()
        pipe.build()
        small, full = pipe.run()
    steps = [s for s in pipe._executor._cpu_steps if hasattr(s, "reduced")]
    assert steps and all(s.reduced is None for s in steps)
    assert np.asarray(full.at(0)).shape[:2] == SIZES[0]


def _dataset(root, corrupt: bytes | None):
    cls = root / "cls"
    cls.mkdir(parents=True)
    for i, data in enumerate(DATAS):
        (cls / f"good{i}.jpg").write_bytes(data.tobytes())
    if corrupt is not None:
        (cls / "bad.jpg").write_bytes(corrupt)
    return root


def _file_pipe(root, on_error):
    @pipeline_def(batch_size=len(DATAS), num_threads=2, device_id=None, seed=3, on_error=on_error)
    def p():
        jpegs, _ = fn.readers.file(file_root=str(root), name="r")
        imgs = fn.resize(fn.decoders.image(jpegs), resize_shorter=96)
        return imgs, fn.get_property(jpegs, key="source_info")

    pipe = p()
    pipe.build()
    return pipe


def _by_name(pipe):
    imgs, sources = pipe.run()
    names = [os.path.basename(bytes(np.asarray(sources.at(i))).decode()) for i in range(len(sources))]
    return {name: np.asarray(imgs.at(i)) for i, name in enumerate(names)}


@pytest.mark.parametrize("corrupt", ["truncated", "garbage"])
def test_skip_drops_the_corrupt_file_and_keeps_the_fast_results(corrupt, tmp_path):
    whole = DATAS[2].tobytes()
    bad = whole[:len(whole) // 2] if corrupt == "truncated" else whole[:600] + bytes(range(256)) * 8
    with settings.override(reduced_size_decode=True):
        clean = _by_name(_file_pipe(_dataset(tmp_path / "clean", None), "skip"))
        pipe = _file_pipe(_dataset(tmp_path / "data", bad), "skip")
        try:
            got = _by_name(pipe)
            report = [r for r in pipe.error_report() if r["iteration"] == 0]
        finally:
            pipe.close()
    assert sorted(got) == sorted(clean)  # the bad file skipped, the batch refilled with good ones
    assert all(np.array_equal(got[k], clean[k]) for k in got)
    assert [os.path.basename(r["source"]) for r in report] == ["bad.jpg"]
    assert report[0]["operator"] == "decoders.image" and report[0]["action"] == "skipped"


def test_raise_names_the_corrupt_file(tmp_path):
    whole = DATAS[1].tobytes()
    with settings.override(reduced_size_decode=True):
        pipe = _file_pipe(_dataset(tmp_path / "data", whole[:len(whole) // 2]), "raise")
        try:
            with pytest.raises(OperatorError) as info:
                for _ in range(2):
                    pipe.run()
        finally:
            pipe.close()
    assert "bad.jpg" in info.value.source and "bad.jpg" in str(info.value)


def test_worker_processes_compute_the_same_pair():
    """chain_processes runs fused chains in helper processes: it takes the fast pair the same way."""
    from stoker.operators.base import SampleContext
    from stoker.operators.decoders.image import ImageDecoderRandomCrop
    from stoker.operators.image.resize import Resize

    def make(cls, **kw):
        static, _ = cls.schema.bind(kw, lambda v: False)
        return cls(static, "cpu", op_seed=11)

    dec, rsz = make(ImageDecoderRandomCrop), make(Resize, resize_x=48.0, resize_y=40.0)
    rargs = dict(rsz.args, __layout="HWC")
    plan = reduced_decode.ReducedDecode(random_crop=True)
    for i, data in enumerate(DATAS):
        contexts = [(i, 0, 11, ""), (i, 0, 11, "")]
        worker = chain_processes._run_chain([dec, rsz], [0], (data,), [dec.args, rargs], contexts, plan)
        pair = reduced_decode.run_pair(plan, dec, rsz, data, dec.args, SampleContext(*contexts[0]), rargs)
        exact = rsz.run_sample((dec.run_sample((data,), dec.args, SampleContext(*contexts[0])),), rargs, None)
        assert pair is not None and np.array_equal(worker, pair[1])
        assert worker.shape == exact.shape and psnr(worker, exact) > MIN_PSNR
