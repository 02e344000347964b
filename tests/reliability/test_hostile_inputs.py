"""The hostile-input corpus (issue 17) through fn.readers.file + fn.decoders.image on the CPU.

Under on_error="raise" every hostile file stops the run with an OperatorError that names the
decoder, the file and the reason; under "skip" all of them are dropped in one pass and every
good file (one of each format, some under a wrong extension) is kept. Then the pieces: the
``strict`` argument (corrupt JPEG scan data and PNG CRCs, same pixels on good data, the header
junk libjpeg tolerates, the fallback without TurboJPEG), ``max_aspect_ratio``, and the bounded
cost of thin and oversized inputs through decode + resize.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import cv2
import hostile_corpus as hc
import numpy as np
import pytest
from reliability_images import jpeg_bytes, photo

import stoker.fn as fn
from stoker import pipeline_def, types
from stoker.errors import OperatorError, PipelineBuildError
from stoker.operators.decoders import cpu, turbo
from stoker.operators.decoders.cpu import ImageDecodeError, decode_cpu

pytestmark = pytest.mark.timeout(120)
needs_turbo = pytest.mark.skipif(not turbo.available(), reason="no TurboJPEG 3 library (pip install turbojpeg)")


def _pipe(root, on_error, batch, **dec):
    @pipeline_def(batch_size=batch, num_threads=2, device_id=None, seed=0, on_error=on_error)
    def p():
        files, _ = fn.readers.file(file_root=str(root), name="Reader")
        return fn.decoders.image(files, device="cpu", **dec), fn.get_property(files, key="source_info")

    pipe = p()
    pipe.build()
    return pipe


def _names(sources) -> list[str]:
    return [os.path.basename(bytes(np.asarray(sources.at(i))).decode()) for i in range(len(sources))]


@pytest.mark.parametrize("case", sorted(hc.BAD))
def test_raise_names_decoder_file_and_reason(case, tmp_path):
    hc.write(tmp_path / "data" / "cls", [case], good=False)
    (tmp_path / "data" / "cls" / "zz_good.jpg").write_bytes(jpeg_bytes(photo()))
    pipe = _pipe(tmp_path / "data", "raise", batch=2)
    try:
        with pytest.raises(OperatorError) as info:
            pipe.run()
        err = info.value
        assert err.operator == "decoders.image"
        assert case in err.source and case in str(err)
        for fragment in hc.BAD[case].reason:
            assert fragment in str(err), f"{fragment!r} missing from: {err}"
    finally:
        pipe.close()


def test_skip_drops_every_hostile_file_and_keeps_every_good_one(tmp_path):
    files = hc.write(tmp_path / "data" / "cls")
    good = sorted(hc.good_files())
    pipe = _pipe(tmp_path / "data", "skip", batch=len(good))
    try:
        for _epoch in range(2):  # one full batch per pass over the folder: every good file once
            images, sources = pipe.run()
            assert sorted(_names(sources)) == good
            for i in range(len(images)):
                img = np.asarray(images.at(i))
                assert img.dtype == np.uint8 and img.shape == (40, 48, 3)
        # the first pass's bad files, each once (the second batch's refills finished the first pass)
        report = [r for r in pipe.error_report() if r["epoch"] == 0]
        assert sorted(os.path.basename(r["source"]) for r in report) == sorted(hc.BAD)
        assert all(r["operator"] == "decoders.image" and r["action"] == "skipped" for r in report)
        assert len(files) == len(good) + len(hc.BAD)
    finally:
        pipe.close()


# --- strict ------------------------------------------------------------------------------------

@pytest.mark.parametrize("maker", [hc.jpeg_corrupt_scan, hc.jpeg_scan_cut_short, hc.png_bad_crc])
def test_strict_false_decodes_what_strict_refuses(maker):
    """The damage is real (the lenient decode differs from the clean file's) and only strict sees it."""
    data = maker()
    with pytest.raises(ImageDecodeError, match="corrupt"):
        decode_cpu(data, strict=True)
    out = decode_cpu(data, strict=False)
    assert out.ndim == 3 and out.shape[2] == 3


def test_corrupt_scan_really_damages_the_pixels():
    clean = bytearray(hc.jpeg_corrupt_scan())
    start = hc._scan_start(bytes(clean))
    mid = (start + len(clean) - 2) // 2
    original = jpeg_bytes(photo(160, 200, seed=5))
    assert bytes(clean[:mid]) == original[:mid]  # the same file up to the damage
    diff = np.abs(decode_cpu(bytes(clean)).astype(int) - decode_cpu(original).astype(int))
    assert diff.mean() > 5  # garbage pixels, which strict=False hands over silently


@needs_turbo
@pytest.mark.parametrize("output_type", [types.RGB, types.BGR, types.GRAY])
@pytest.mark.parametrize("variant", ["420", "422", "444", "progressive", "gray", "odd_size", "restart"])
def test_strict_pixels_equal_the_lenient_decode(variant, output_type):
    """Strict JPEG decoding goes through TurboJPEG; a good file's pixels stay OpenCV's, bit for bit."""
    rng = np.random.default_rng(len(variant))
    h, w = (97, 131) if variant == "odd_size" else (64, 80)
    small = rng.integers(0, 256, (h // 6, w // 6, 3), np.uint8)
    img = cv2.add(cv2.resize(small, (w, h), interpolation=cv2.INTER_CUBIC), rng.integers(0, 30, (h, w, 3), np.uint8))
    sampling = {"422": cv2.IMWRITE_JPEG_SAMPLING_FACTOR_422, "444": cv2.IMWRITE_JPEG_SAMPLING_FACTOR_444}.get(
        variant, cv2.IMWRITE_JPEG_SAMPLING_FACTOR_420)
    params = [cv2.IMWRITE_JPEG_QUALITY, 90, cv2.IMWRITE_JPEG_SAMPLING_FACTOR, sampling,
              cv2.IMWRITE_JPEG_PROGRESSIVE, int(variant == "progressive"),
              cv2.IMWRITE_JPEG_RST_INTERVAL, 3 if variant == "restart" else 0]
    ok, enc = cv2.imencode(".jpg", img[:, :, 0] if variant == "gray" else img, params)
    assert ok
    strict = decode_cpu(enc, output_type, strict=True)
    np.testing.assert_array_equal(strict, decode_cpu(enc, output_type, strict=False))
    flag = {types.RGB: cv2.IMREAD_COLOR_RGB, types.BGR: cv2.IMREAD_COLOR_BGR, types.GRAY: cv2.IMREAD_GRAYSCALE}
    np.testing.assert_array_equal(strict.reshape(-1), cv2.imdecode(enc, flag[output_type]).reshape(-1))


@needs_turbo
def test_strict_goes_through_turbojpeg(monkeypatch):
    calls = []
    real = turbo.decode_full
    monkeypatch.setattr(turbo, "decode_full", lambda *a, **k: calls.append(a[1]) or real(*a, **k))
    decode_cpu(jpeg_bytes(photo()), strict=True)
    decode_cpu(jpeg_bytes(photo()), strict=False)
    assert calls == ["rgb"]


@needs_turbo
def test_a_corrupt_file_leaves_the_thread_decoder_usable():
    """A decode stopped by a warning leaves libjpeg mid-stream; the next file must not inherit it."""
    good = jpeg_bytes(photo(30, 40, seed=2))
    for bad in (hc.jpeg_with_header_junk(), hc.jpeg_corrupt_scan(), jpeg_bytes(photo())[:300]):
        try:
            decode_cpu(bad, strict=True)
        except ImageDecodeError:
            pass
        np.testing.assert_array_equal(decode_cpu(good, strict=True), decode_cpu(good, strict=False))
        assert turbo.decode_window(np.frombuffer(good, np.uint8), (2, 3, 10, 12)) is not None


def test_header_junk_is_tolerated_under_strict():
    data = hc.jpeg_with_header_junk()
    ref = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR_RGB)
    np.testing.assert_array_equal(decode_cpu(data, strict=True), ref)


def test_strict_without_turbojpeg_still_refuses_truncation(monkeypatch):
    """Without the library only the JPEG's end marker can be checked (documented): truncation is
    refused, damage inside the scan is not."""
    monkeypatch.setattr(turbo, "available", lambda: False)
    monkeypatch.setattr(turbo, "decode_full", lambda *a, **k: None)
    data = jpeg_bytes(photo(64, 64, seed=3))
    with pytest.raises(ImageDecodeError, match="end-of-image marker"):
        decode_cpu(data[:len(data) // 2], strict=True)
    assert decode_cpu(hc.jpeg_corrupt_scan(), strict=True).shape == (160, 200, 3)
    assert decode_cpu(data, strict=True).shape == (64, 64, 3)


@pytest.mark.parametrize("on_error", ["raise", "skip"])
def test_strict_argument_of_the_operator(on_error, tmp_path):
    bad = ["jpeg_corrupt_scan.jpg", "png_bad_crc.png"]
    hc.write(tmp_path / "data" / "cls", bad, good=False)
    (tmp_path / "data" / "cls" / "zz_good.jpg").write_bytes(jpeg_bytes(photo()))
    pipe = _pipe(tmp_path / "data", on_error, batch=1 if on_error == "skip" else 3)  # strict by default
    try:
        if on_error == "raise":
            with pytest.raises(OperatorError, match="strict=False") as info:
                pipe.run()
            assert info.value.source.endswith("jpeg_corrupt_scan.jpg")
        else:
            _, sources = pipe.run()
            assert _names(sources) == ["zz_good.jpg"]
            assert sorted(os.path.basename(r["source"]) for r in pipe.error_report() if r["epoch"] == 0) == bad
    finally:
        pipe.close()
    pipe = _pipe(tmp_path / "data", on_error, batch=3, strict=False)  # DALI's behaviour: decoded
    try:
        _, sources = pipe.run()
        assert _names(sources) == bad + ["zz_good.jpg"]
        assert pipe.error_report() == []
    finally:
        pipe.close()


def test_every_decoder_takes_strict_and_max_aspect_ratio():
    """The four decoders (also as device='mixed': the schema is shared) accept the stoker-only args."""
    from stoker.operators.decoders.image import (
        ImageDecoder,
        ImageDecoderCrop,
        ImageDecoderRandomCrop,
        ImageDecoderSlice,
    )

    for cls in (ImageDecoder, ImageDecoderCrop, ImageDecoderRandomCrop, ImageDecoderSlice):
        names = {a.name for a in cls.schema.args}
        assert {"strict", "max_aspect_ratio", "max_pixels"} <= names, cls.schema.name
    with pytest.raises(PipelineBuildError, match="max_aspect_ratio"):
        _pipe(Path("/nonexistent"), "raise", batch=1, max_aspect_ratio=0.5)


# --- sizes ---------------------------------------------------------------------------------------

def test_max_aspect_ratio_limit_and_off_switch():
    thin = hc.thin_png(2, 3000)  # ratio 1500
    with pytest.raises(ImageDecodeError, match="max_aspect_ratio=1000"):
        decode_cpu(thin)
    assert decode_cpu(thin, max_aspect_ratio=0).shape == (2, 3000, 3)
    assert decode_cpu(thin, max_aspect_ratio=1500).shape == (2, 3000, 3)


@pytest.mark.parametrize("maker", [hc.bmp_claiming, hc.tiff_claiming, hc.pnm_claiming, hc.png_claiming,
                                   hc.webp_claiming, hc.jp2_claiming, hc.jpeg_claiming])
def test_header_checks_come_before_any_decoding(maker, monkeypatch):
    """Refused from the header alone: neither OpenCV nor Pillow is asked."""
    def boom(*a, **k):
        raise AssertionError("decoded a refused image")

    monkeypatch.setattr(cpu, "_decode_native", boom)
    with pytest.raises(ImageDecodeError, match="max_pixels"):
        decode_cpu(maker(20000, 20000))
    with pytest.raises(ImageDecodeError, match="max_aspect_ratio"):
        decode_cpu(maker(3, 9000))


@pytest.mark.parametrize("maker", [hc.bmp_claiming, hc.tiff_claiming, hc.pnm_claiming, hc.webp_claiming,
                                   hc.jp2_claiming])
def test_peek_reads_a_bomb_header_without_pillows_bomb_error(maker):
    """peek_image_shape only reads the header: a huge claim is an answer, not a DecompressionBombError
    (which is no ImageFormatError and killed the run)."""
    from stoker.operators.decoders.formats import claimed_size, read_info

    info = read_info(maker(hc.BOMB, hc.BOMB))
    assert (info.height, info.width) == (hc.BOMB, hc.BOMB)
    size = claimed_size(maker(hc.BOMB, hc.BOMB))
    assert (size.height, size.width) == (hc.BOMB, hc.BOMB)


@pytest.mark.parametrize("strict", [False, True])
def test_png_chunk_lengths_are_checked_before_opencv(strict, monkeypatch):
    """OpenCV's PNG reader allocates what a chunk claims (4 GB and 4 s for this 2 KB file)."""
    def boom(*a, **k):
        raise AssertionError("OpenCV was given the file")

    monkeypatch.setattr(cpu, "_imdecode", boom)
    with pytest.raises(ImageDecodeError, match="past the end of the data"):
        decode_cpu(hc.png_huge_chunk(), strict=strict)


_COST_CHILD = textwrap.dedent("""
    import json, resource, sys, time
    import numpy as np
    sys.path.insert(0, {here!r})
    import hostile_corpus as hc
    import stoker.fn as fn
    from stoker import pipeline_def
    from stoker.errors import OperatorError

    thin = np.random.default_rng(0).integers(0, 256, (1, 100000, 3), dtype=np.uint8)
    enc = np.frombuffer(hc.thin_png(), np.uint8)

    def run(case, decode, **resize):
        @pipeline_def(batch_size=1, num_threads=2, device_id=None, seed=0)
        def p():
            data = fn.external_source(source=lambda: [enc if decode else thin], batch=True)
            img = fn.decoders.image(data, max_aspect_ratio=0) if decode else data
            return fn.resize(img, **resize)
        pipe = p(); pipe.build()
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        t = time.perf_counter()
        try:
            out = str(np.asarray(pipe.run()[0].at(0)).shape)
        except OperatorError as e:
            out = str(e)
        pipe.close()
        grow = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
        return case, {{"s": time.perf_counter() - t, "mb": grow, "out": out}}

    print(json.dumps(dict([run("size", False, size=224), run("decode_size", True, size=224),
                           run("shorter", False, resize_shorter=224)])))
""")


def test_thin_images_cost_bounded_time_and_memory():
    """The issue's 1 x 100000 strip (300 KB as PNG) took 24-39 s and 2 GB through decode and a 224
    resize. Run in a fresh process so that the peak RSS measures this alone."""
    code = _COST_CHILD.format(here=str(Path(__file__).parent))
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=110)
    assert res.returncode == 0, res.stderr[-2000:]
    got = json.loads(res.stdout.strip().splitlines()[-1])
    for case in ("size", "decode_size"):
        assert got[case]["out"] == "(224, 224, 3)", got
        assert got[case]["s"] < 5 and got[case]["mb"] < 200, got
    # resize_shorter would make it 224 x 22,400,000: refused by the output limit, at once
    assert "resize_shorter" in got["shorter"]["out"] and "max_pixels" in got["shorter"]["out"], got
    assert "[resize]" in got["shorter"]["out"] or "resize" in got["shorter"]["out"].split("]")[0], got
    assert got["shorter"]["s"] < 2 and got["shorter"]["mb"] < 50, got


def test_resize_output_limit_follows_the_pipeline_max_pixels():
    img = np.zeros((10, 20, 3), np.uint8)

    def make(max_pixels, **resize):
        @pipeline_def(batch_size=1, num_threads=1, device_id=None, max_pixels=max_pixels)
        def p():
            return fn.resize(fn.external_source(source=lambda: [img], batch=True), **resize)

        pipe = p()
        pipe.build()
        return pipe

    pipe = make(10_000, resize_shorter=100)  # 100 x 200 = 20,000 pixels
    try:
        with pytest.raises(OperatorError, match="resize_shorter.*max_pixels=10000") as info:
            pipe.run()
        assert info.value.operator == "resize"
    finally:
        pipe.close()
    for max_pixels, kw in ((10_000, {"resize_shorter": 100, "max_size": [50, 100]}), (0, {"resize_shorter": 100})):
        pipe = make(max_pixels, **kw)
        try:
            (out,) = pipe.run()
            assert np.asarray(out.at(0)).shape[2] == 3
        finally:
            pipe.close()


def test_mixed_decoders_route_images_over_either_limit_to_the_cpu_refusal():
    """``over_limits`` is what the mixed decoders' GPU paths ask before taking an image: over
    max_pixels or max_aspect_ratio goes to the CPU decoder, which fails the sample with the reason."""
    from types import SimpleNamespace

    from stoker.operators.decoders.image import over_limits

    op = SimpleNamespace(max_pixels=10_000, max_aspect_ratio=100.0)
    h = [50, 200, 1, 1, 0, 4]
    w = [50, 60, 100, 101, 0, 2600]
    assert over_limits(op, h, w).tolist() == [False, True, False, True, False, True]
    off = SimpleNamespace(max_pixels=0, max_aspect_ratio=0)
    assert not over_limits(off, h, w).any()
