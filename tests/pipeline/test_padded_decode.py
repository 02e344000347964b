"""The fused decode + resize that decodes into the resize's padded buffer
(stoker.pipeline.padded_decode): outputs bit-identical to the unfused executor (STOKER_FUSE=0) for
the files it takes and the ones it leaves to the usual path (progressive, gray, CMYK, rotated, PNG,
corrupt), and it is taken where it applies; the pieces it is made of (turbo.decode_padded,
resample.padded_rgb_plan / resample_padded, the Pillow mapping of resample._rgb_window) each equal
the usual path."""

import io

import cv2
import numpy as np
import pytest
from PIL import Image

import stoker.fn as fn
import stoker.types as types
from stoker import pipeline_def
from stoker.operators.decoders import turbo
from stoker.operators.image import resample as rs
from stoker.operators.image.geometry import resize_plan
from stoker.pipeline import padded_decode
from stoker.pipeline.fusion import FusedStep

pytestmark = pytest.mark.skipif(not turbo.available(), reason="no TurboJPEG 3 library (pip install turbojpeg)")

LIN = types.INTERP_LINEAR
MEAN = [120.0, 110.0, 100.0]
STD = [60.0, 58.0, 57.0]


def photo(h, w, seed=0):
    rng = np.random.default_rng(seed)
    base = cv2.resize(rng.integers(0, 255, (6, 6, 3), dtype=np.uint8), (w, h), interpolation=cv2.INTER_CUBIC)
    return np.clip(base + rng.normal(0, 14, base.shape), 0, 255).astype(np.uint8)


def jpeg(img, **kw):
    buf = io.BytesIO()
    (img if isinstance(img, Image.Image) else Image.fromarray(img)).save(buf, "JPEG", quality=90, **kw)
    return buf.getvalue()


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    """JPEGs the fused pair decodes (4:2:0, 4:4:4, 4:2:2, odd sizes, a large and a tiny one) and
    files it leaves to the usual path (progressive, gray, CMYK, EXIF-rotated JPEGs; a PNG)."""
    root = tmp_path_factory.mktemp("padded")
    files = {}
    for i, ((h, w), sub) in enumerate([((61, 83), 2), ((120, 90), 0), ((97, 131), 1), ((300, 401), 2),
                                       ((37, 29), 2), ((75, 75), 0), ((8, 9), 2), ((230, 170), 1)]):
        files[f"a_{i:02d}.jpg"] = jpeg(photo(h, w, i), subsampling=sub)
    files["b_progressive.jpg"] = jpeg(photo(90, 70, 20), progressive=True)
    files["b_gray.jpg"] = jpeg(photo(64, 80, 21)[..., 0])
    files["b_cmyk.jpg"] = jpeg(Image.fromarray(photo(50, 66, 22)).convert("CMYK"))
    ex = Image.Exif()
    ex[0x0112] = 6
    files["b_rotated.jpg"] = jpeg(photo(70, 52, 23), exif=ex.tobytes())
    buf = io.BytesIO()
    Image.fromarray(photo(45, 60, 24)).save(buf, "PNG")
    files["b_image.png"] = buf.getvalue()
    for k, (name, data) in enumerate(sorted(files.items())):
        d = root / f"class_{k % 2}"
        d.mkdir(exist_ok=True)
        (d / name).write_bytes(data)
    return str(root), len(files)


def val(root, batch, threads, output_type=types.RGB, on_error="raise", cmn=True):
    @pipeline_def(batch_size=batch, num_threads=threads, device_id=None, seed=1, on_error=on_error)
    def p():
        jpegs, labels = fn.readers.file(file_root=root, name="r")
        imgs = fn.resize(fn.decoders.image(jpegs, output_type=output_type), resize_shorter=40)
        if cmn:
            imgs = fn.crop_mirror_normalize(imgs, crop=(32, 32), dtype=types.FLOAT, output_layout="CHW",
                                            mean=MEAN, std=STD)
        return imgs, fn.get_property(jpegs, key="source_info")

    return p()


def train(root, batch, threads, on_error="raise"):
    @pipeline_def(batch_size=batch, num_threads=threads, device_id=None, seed=7, on_error=on_error)
    def p():
        jpegs, labels = fn.readers.file(file_root=root, random_shuffle=True, name="r")
        imgs = fn.decoders.image_random_crop(jpegs, output_type=types.RGB)
        imgs = fn.resize(imgs, resize_x=24, resize_y=20)
        return fn.crop_mirror_normalize(imgs, dtype=types.FLOAT, output_layout="CHW", mean=MEAN, std=STD,
                                        mirror=fn.random.coin_flip()), labels

    return p()


def outputs(make, stoker_settings, fuse, iterations, monkeypatch=None, **kw):
    """The pipeline's outputs over ``iterations`` runs, and how many samples the fused pair took."""
    stoker_settings(fuse=fuse, reduced_size_decode=False)
    taken = []
    if monkeypatch is not None:
        real = padded_decode.run_pair

        def counted(*a, **k):
            got = real(*a, **k)
            taken.append(got is not None)
            return got

        monkeypatch.setattr(padded_decode, "run_pair", counted)
    pipe = make(**kw)
    pipe.build()
    try:
        steps = [s for s in pipe._executor._cpu_steps if isinstance(s, FusedStep)]
        assert bool(steps) == fuse and (not fuse or steps[0].padded is not None)
        outs = [[[np.array(t.at(i)) for i in range(len(t))] for t in pipe.run()] for _ in range(iterations)]
    finally:
        pipe.close()
    return outs, taken


def assert_same(a, b):
    assert len(a) == len(b)
    for ia, ib in zip(a, b):
        for oa, ob in zip(ia, ib):
            assert len(oa) == len(ob) and len(oa)
            for sa, sb in zip(oa, ob):
                assert sa.dtype == sb.dtype and sa.shape == sb.shape and np.array_equal(sa, sb)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("output_type", [types.RGB, types.BGR])
def test_validation_identical_to_unfused_and_taken(data_dir, stoker_settings, monkeypatch, threads, output_type):
    root, n = data_dir
    a, taken = outputs(val, stoker_settings, True, 2, monkeypatch, root=root, batch=n, threads=threads,
                       output_type=output_type)
    b, _ = outputs(val, stoker_settings, False, 2, root=root, batch=n, threads=threads, output_type=output_type)
    assert_same(a, b)
    # 8 files through the pair, every iteration (the batch is the whole folder; prefetching runs
    # more than the 2 read): the 7 baseline colour JPEGs but the 8x9 one, which the resize enlarges
    # as a whole (OpenCV's bilinear), and the progressive one; the gray, CMYK and rotated JPEGs and
    # the PNG the usual way
    assert len(taken) >= 2 * n and len(taken) % n == 0 and sum(taken) == len(taken) // n * 8


def test_resize_output_identical_without_crop_mirror_normalize(data_dir, stoker_settings, monkeypatch):
    root, n = data_dir
    a, taken = outputs(val, stoker_settings, True, 1, monkeypatch, root=root, batch=n, threads=2, cmn=False)
    b, _ = outputs(val, stoker_settings, False, 1, root=root, batch=n, threads=2, cmn=False)
    assert_same(a, b)
    assert len(taken) >= n and len(taken) % n == 0 and sum(taken) == len(taken) // n * 8


@pytest.mark.parametrize("threads", [1, 2])
def test_training_identical_to_unfused_and_taken(data_dir, stoker_settings, monkeypatch, threads):
    root, n = data_dir
    a, taken = outputs(train, stoker_settings, True, 4, monkeypatch, root=root, batch=5, threads=threads)
    b, _ = outputs(train, stoker_settings, False, 4, root=root, batch=5, threads=threads)
    assert_same(a, b)
    assert 0 < sum(taken) < len(taken) and len(taken) >= 20


@pytest.mark.parametrize("on_error", ["skip", "substitute"])
def test_corrupt_files_as_unfused(data_dir, stoker_settings, tmp_path, on_error):
    """A truncated JPEG and one with damaged entropy-coded data (strict refuses both) among files
    the pair takes: dropped or replaced as without fusion."""
    root, _ = data_dir
    import shutil

    shutil.copytree(root, tmp_path / "d")
    good = (tmp_path / "d" / "class_0" / "a_00.jpg").read_bytes()
    (tmp_path / "d" / "class_0" / "a_00x.jpg").write_bytes(good[: len(good) // 2])
    damaged = bytearray(good)
    damaged[len(good) // 2:len(good) // 2 + 24] = bytes(24)
    (tmp_path / "d" / "class_1" / "a_00y.jpg").write_bytes(bytes(damaged))
    kw = dict(root=str(tmp_path / "d"), batch=5, threads=2, on_error=on_error)
    a, _ = outputs(val, stoker_settings, True, 4, **kw)
    b, _ = outputs(val, stoker_settings, False, 4, **kw)
    assert_same(a, b)
    names = [bytes(s).decode() for it in a for s in it[1]]
    assert len(names) == 4 * 5 and not any("a_00x" in s or "a_00y" in s for s in names)


def test_plan_only_where_the_resize_alone_reads_a_strict_uint8_decode(data_dir, stoker_settings, monkeypatch):
    root, _ = data_dir
    stoker_settings(reduced_size_decode=False)

    def plan(build):
        @pipeline_def(batch_size=2, num_threads=1, device_id=None)
        def p():
            jpegs, _ = fn.readers.file(file_root=root)
            return build(jpegs)

        pipe = p()
        pipe.build()
        try:
            return [s.padded for s in pipe._executor._cpu_steps if isinstance(s, FusedStep)]
        finally:
            pipe.close()

    assert plan(lambda j: fn.resize(fn.decoders.image(j), size=[20, 30])) == [padded_decode.PaddedDecode(False)]
    assert plan(lambda j: fn.resize(fn.decoders.image_random_crop(j), size=[20, 30])) == \
        [padded_decode.PaddedDecode(True)]
    dec = {}
    assert plan(lambda j: (fn.resize(dec.setdefault("d", fn.decoders.image(j)), size=[20, 30]), dec["d"])) == [None]
    assert plan(lambda j: fn.resize(fn.decoders.image(j, strict=False), size=[20, 30])) == [None]
    assert plan(lambda j: fn.resize(fn.decoders.image(j, dtype=types.FLOAT), size=[20, 30])) == [None]
    assert plan(lambda j: fn.resize(fn.decoders.image(j, output_type=types.GRAY), size=[20, 30])) == [None]
    assert plan(lambda j: fn.resize(fn.decoders.image(j), size=[20, 30], save_attrs=True)) == [None]
    # resizes no sample could take through the pair: none tries
    assert plan(lambda j: fn.resize(fn.decoders.image(j), size=[20, 30], interp_type=types.INTERP_CUBIC)) == [None]
    assert plan(lambda j: fn.resize(fn.decoders.image(j), size=[20, 30], dtype=types.FLOAT)) == [None]
    assert plan(lambda j: fn.resize(fn.decoders.image(j), size=[20, 30], min_filter=types.INTERP_TRIANGULAR,
                                    mag_filter=types.INTERP_LINEAR)) == [padded_decode.PaddedDecode(False)]
    assert plan(lambda j: fn.resize(fn.decoders.image(j), size=[20, 30],
                                    interp_type=fn.random.uniform(range=[0, 1], dtype=types.INT32))) == \
        [padded_decode.PaddedDecode(False)]  # (per sample: decided per sample)
    with monkeypatch.context() as m:  # STOKER_TORCH_RESIZE=1 with torch installed: torch resizes
        from stoker.operators.image import resample_torch

        m.setattr(resample_torch, "available", lambda: True)
        assert plan(lambda j: fn.resize(fn.decoders.image(j), size=[20, 30])) == [None]
    stoker_settings(reduced_size_decode=True)  # fast mode's pair wins
    assert plan(lambda j: fn.resize(fn.decoders.image(j), size=[20, 30])) == [None]


# --- the pieces ------------------------------------------------------------------------------------

@pytest.mark.parametrize("progressive", [False, True])
@pytest.mark.parametrize("subsampling", [0, 1, 2])
def test_decode_padded_window_equals_the_usual_decode(progressive, subsampling):
    img = photo(83, 117, subsampling)
    buf = np.frombuffer(jpeg(img, subsampling=subsampling, progressive=progressive), np.uint8)
    full = turbo.decode_full(buf, "rgb")
    for win in [(0, 0, 83, 117), (10, 21, 40, 50), (0, 50, 83, 67), (70, 0, 13, 5), (33, 97, 1, 1)]:
        for margins in [(0, 0, 0, 0), (3, 4, 5, 2), (1, 0, 40, 0)]:
            for bgr in (False, True):
                got = turbo.decode_padded(buf, win, margins, bgr=bgr, expect=(83, 117))
                assert got is not None
                out, (r, c) = got
                y, x, h, w = win
                t, b, left, right = margins
                assert r >= t and c >= left and out.shape[0] >= r + h + b and out.shape[1] >= c + w + right
                assert out.base is not None and out.base.size >= (out.shape[0] + 1) * out.shape[1] * 4
                want = full[y:y + h, x:x + w]
                np.testing.assert_array_equal(out[r:r + h, c:c + w, :3], want[..., ::-1] if bgr else want)
                if win != (0, 0, 83, 117):
                    np.testing.assert_array_equal(out[r:r + h, c:c + w, :3][..., ::-1] if bgr else
                                                  out[r:r + h, c:c + w, :3], turbo.decode_window(buf, win))


def test_decode_padded_refuses_what_the_usual_path_must_handle():
    img = photo(40, 48)
    buf = np.frombuffer(jpeg(img), np.uint8)
    assert turbo.decode_padded(buf, (0, 0, 40, 48), (1, 1, 1, 1), expect=(41, 48)) is None  # header disagrees
    assert turbo.decode_padded(buf, (0, 0, 41, 48), (1, 1, 1, 1)) is None  # window outside
    assert turbo.decode_padded(buf[: buf.size // 2], (0, 0, 40, 48), (0, 0, 0, 0)) is None  # truncated: warns
    gray = np.frombuffer(jpeg(img[..., 0]), np.uint8)
    assert turbo.decode_padded(gray, (0, 0, 40, 48), (0, 0, 0, 0)) is None
    assert turbo.decode_padded(buf, (0, 0, 40, 48), (1, 1, 1, 1)) is not None  # (the handle still works)


def _cases():
    rng = np.random.default_rng(11)
    for t in range(60):
        h, w = (int(v) for v in rng.integers(2, 90, 2))
        out = [int(v) for v in rng.integers(1, 70, 2)]
        if t % 3 == 0:
            lo, hi = [0.0, 0.0], [float(h), float(w)]
        elif t % 3 == 1:
            p = resize_plan([h, w], [0.0, 0.0], resize_shorter=float(rng.integers(1, 60)))
            out, lo, hi = list(p.out_size), list(p.lo), list(p.hi)
        else:
            lo = [float(rng.uniform(-5, h / 2)), float(rng.uniform(-5, w / 2))]
            hi = [float(rng.uniform(h / 2, h + 5)), float(rng.uniform(w / 2, w + 5))]
        yield t, (h, w), out, lo, hi


def test_rgb_window_mapping_equals_the_copying_path(monkeypatch):
    """_rgb_window (one OpenCV copy into Pillow's layout, mapped) against the copy through
    Image.fromarray it replaced, for whole images, resize_shorter regions and arbitrary ones, views
    and flipped regions included."""
    args = dict(min_filter=LIN, mag_filter=LIN, antialias=True)
    for t, (h, w), out, lo, hi in _cases():
        img = photo(h + 6, w + 4, t)[3:3 + h, 1:1 + w]  # (a strided view)
        if t % 4 == 3:
            lo, hi = [hi[0], lo[0]], [hi[1], lo[1]]  # flipped
        got = rs.resample(img, [0, 1], out, lo, hi, **args)
        with monkeypatch.context() as m:
            m.setattr(rs, "_rgb_window", lambda *a: None)
            want = rs.resample(img, [0, 1], out, lo, hi, **args)
        assert got.shape == want.shape and got.flags.c_contiguous and np.array_equal(got, want), t


def test_rgb_window_falls_back_when_pillow_will_not_map(monkeypatch):
    img = photo(50, 70)
    want = rs.resample(img, [0, 1], (20, 30), (0, 0), (50, 70), min_filter=LIN, mag_filter=LIN, antialias=True)

    def refuse(*a):
        raise ValueError("no")

    monkeypatch.setattr(Image.core, "map_buffer", refuse)
    assert rs._rgb_window(img, [0.0, 0.0], [50.0, 70.0], [2.5, 70 / 30], 1.0) is None
    got = rs.resample(img, [0, 1], (20, 30), (0, 0), (50, 70), min_filter=LIN, mag_filter=LIN, antialias=True)
    np.testing.assert_array_equal(got, want)


def test_resample_padded_equals_resample():
    taken = 0
    for t, (h, w), out, lo, hi in _cases():
        img = photo(h, w, t)
        how = rs.padded_rgb_plan((h, w), out, lo, hi, min_filter=LIN, mag_filter=LIN, antialias=True)
        if how is None:
            continue
        taken += 1
        pads, box = how
        (top, bottom), (left, right) = pads
        flat = np.full((top + h + bottom + 3) * (left + w + right + 5) * 4, 7, np.uint8)
        buf = flat[:(top + h + bottom + 2) * (left + w + right + 5) * 4].reshape(top + h + bottom + 2, -1, 4)
        buf[top + 1:top + 1 + h, left + 2:left + 2 + w, :3] = img  # (garbage around it: it fills the pads)
        got = rs.resample_padded(buf, (top + 1, left + 2), (h, w), pads, box, out)
        want = rs.resample(img, [0, 1], out, lo, hi, min_filter=LIN, mag_filter=LIN, antialias=True)
        assert np.array_equal(got, want), t
    assert taken > 20


def test_padded_plan_only_for_the_pillow_rgb_path():
    kw = dict(min_filter=LIN, mag_filter=LIN, antialias=True)
    assert rs.padded_rgb_plan((100, 80), (50, 40), (0, 0), (100, 80), **kw) is not None
    assert rs.padded_rgb_plan((100, 80), (200, 160), (0, 0), (100, 80), **kw) is None  # upscale: OpenCV
    assert rs.padded_rgb_plan((100, 80), (50, 40), (0, 0), (100, 80), **kw, dtype=np.float32) is None
    assert rs.padded_rgb_plan((100, 80), (50, 40), (100, 0), (0, 80), **kw) is None  # flipped
    assert rs.padded_rgb_plan((100, 80), (50, 40), (30, 20), (60, 50), **kw) is None  # not the whole image
    for interp in (types.INTERP_NN, types.INTERP_CUBIC, types.INTERP_LANCZOS3):
        assert rs.padded_rgb_plan((100, 80), (50, 40), (0, 0), (100, 80), min_filter=interp, mag_filter=LIN,
                                  antialias=True) is None
    assert rs.padded_rgb_plan((100, 80), (50, 40), (0, 0), (100, 80), min_filter=LIN, mag_filter=LIN,
                              antialias=False) is None


def test_worker_processes_compute_the_same_pair():
    """chain_processes runs fused chains in helper processes (8+ threads): it takes the pair too,
    with the same pixels as the operators one after the other."""
    from stoker.operators.base import SampleContext
    from stoker.operators.decoders.image import ImageDecoderRandomCrop
    from stoker.operators.image.resize import Resize
    from stoker.pipeline import chain_processes

    def make(cls, **kw):
        static, _ = cls.schema.bind(kw, lambda v: False)
        return cls(static, "cpu", op_seed=11)

    dec, rsz = make(ImageDecoderRandomCrop), make(Resize, resize_x=48.0, resize_y=40.0)
    rargs = dict(rsz.args, __layout="HWC")
    plan = padded_decode.PaddedDecode(random_crop=True)
    for i, (h, w) in enumerate([(120, 90), (97, 131), (300, 401)]):
        data = np.frombuffer(jpeg(photo(h, w, i)), np.uint8)
        contexts = [(i, 0, 11, ""), (i, 0, 11, "")]
        worker = chain_processes._run_chain([dec, rsz], [0], (data,), [dec.args, rargs], contexts, None, plan)
        pair = padded_decode.run_pair(plan, dec, rsz, data, dec.args, SampleContext(*contexts[0]), rargs)
        exact = rsz.run_sample((dec.run_sample((data,), dec.args, SampleContext(*contexts[0])),), rargs, None)
        assert pair is not None and np.array_equal(pair[0], dec.run_sample((data,), dec.args,
                                                                            SampleContext(*contexts[0])))
        assert np.array_equal(worker, exact) and np.array_equal(pair[1], exact)


def test_pair_tunes_the_allocator_as_the_decoder_does(monkeypatch):
    """The decoder's first decode_cpu call tunes glibc malloc (decoders.cpu._tune_allocator); with
    every sample through the pair, decode_cpu may never run, so the pair does it."""
    from stoker.operators.base import SampleContext
    from stoker.operators.decoders import cpu
    from stoker.operators.decoders.image import ImageDecoder
    from stoker.operators.image.resize import Resize

    def make(cls, **kw):
        static, _ = cls.schema.bind(kw, lambda v: False)
        return cls(static, "cpu", op_seed=11)

    calls = []
    monkeypatch.setattr(cpu, "_ALLOCATOR_TUNED", None)
    monkeypatch.setattr(cpu, "_tune_allocator", lambda: calls.append(1) or False)
    dec, rsz = make(ImageDecoder), make(Resize, resize_shorter=30.0)
    data = np.frombuffer(jpeg(photo(60, 80)), np.uint8)
    pair = padded_decode.run_pair(padded_decode.PaddedDecode(False), dec, rsz, data, dec.args,
                                  SampleContext(0, 0, 11), dict(rsz.args, __layout="HWC"))
    assert pair is not None and calls == [1]
