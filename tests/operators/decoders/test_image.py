"""decoders.image on the CPU: formats, colour spaces, types, EXIF orientation, errors.

Oracles: DALI's CPU decoder (exact, including JPEG, except for the
conversions listed at ``_tol``) and the source pixels the fixtures encoded
(independent of both libraries).
"""

from __future__ import annotations

import numpy as np
import pytest
from decoder_helpers import H, W, as_u8, exif_with_orientation, pil_bytes, run_dali, run_stoker, smooth_image, stored16

from stoker import types
from stoker.errors import OperatorError
from stoker.operators.decoders.cpu import ImageDecodeError, decode_cpu


# Tolerances against DALI, in levels of 255. Both use libjpeg-turbo with the same (accurate integer
# IDCT, fancy upsampling) settings, so YCbCr JPEGs decode bit-exactly; what differs is arithmetic:
# - GRAY from colour (non-JPEG, CMYK JPEG): DALI's luma lands one level off a float32 dot product
#   on ~0.4% of pixels (values within 0.01 of an integer); JPEG gray is libjpeg's luma plane in
#   both, exact;
# - YCbCr: one level on a few pixels where the studio-range value sits on a rounding boundary.
def _tol(name: str, out_type: str = "RGB") -> int:
    t = 0
    if out_type == "GRAY" and (not name.endswith(".jpg") or name.startswith("cmyk")):
        t += 1
    if out_type == "YCbCr":
        t += 1
    return t


LOSSLESS = ["rgb.png", "gray.png", "rgba.png", "palette.png", "rgb.bmp", "rgb.tiff", "rgb.webp", "rgb.jp2",
            "rgb.ppm", "gray.pgm", "rgb16.png", "gray16.png", "la.png"]


def _max_diff(a, b) -> int:
    return int(np.abs(a.astype(np.int64) - b.astype(np.int64)).max())


# DALI 2.4 crashes (gray JPEG) or fails (gray+alpha PNG, CMYK JPEG) on these with ANY_DATA.
_DALI_ANY_DATA_BROKEN = {"gray.jpg", "la.png", "cmyk.jpg"}
# DALI reads only simple WebP files, not the extended (VP8X) layout that carries EXIF.
_DALI_BROKEN = {"exif8.webp"}


@pytest.mark.oracle
@pytest.mark.parametrize("out_type", ["RGB", "BGR", "GRAY", "YCbCr", "ANY_DATA"])
def test_all_formats_match_dali(images, out_type):
    names = [n for n in images
             if n not in _DALI_BROKEN and not (out_type == "ANY_DATA" and n in _DALI_ANY_DATA_BROKEN)]
    datas = [as_u8(images[n]) for n in names]
    ours = run_stoker(datas, lambda x, fn, t: fn.decoders.image(x, output_type=getattr(t, out_type)))[0]
    ref = run_dali(datas, lambda x, fn, t: fn.decoders.image(x, device="cpu", output_type=getattr(t, out_type)))[0]
    for name, a, b in zip(names, ours, ref):
        assert a.shape == b.shape and a.dtype == b.dtype, (name, a.shape, b.shape)
        assert _max_diff(a, b) <= _tol(name, out_type), (name, out_type, _max_diff(a, b))


@pytest.mark.parametrize("name", LOSSLESS)
def test_lossless_formats_give_the_encoded_pixels(images, reference_rgb, name):
    out = decode_cpu(as_u8(images[name]), types.ANY_DATA)
    gray = reference_rgb[..., 0]
    expected = {
        "gray": gray[..., None],
        "rgba": np.concatenate([reference_rgb, reference_rgb[..., 1:2]], -1),
        "la": np.stack([gray, reference_rgb[..., 1]], -1),
    }.get(name.split(".")[0].replace("16", ""), reference_rgb)
    if name == "palette.png":  # quantized to 256 colours: only close
        assert out.shape == (H, W, 3) and np.abs(out.astype(int) - reference_rgb).mean() < 25
        return
    assert out.dtype == np.uint8
    np.testing.assert_array_equal(out, expected)


def test_rgb_output_of_gray_and_alpha_inputs(images, reference_rgb):
    g = reference_rgb[..., :1]
    np.testing.assert_array_equal(decode_cpu(as_u8(images["gray.png"])), np.repeat(g, 3, 2))
    np.testing.assert_array_equal(decode_cpu(as_u8(images["la.png"])), np.repeat(g, 3, 2))
    np.testing.assert_array_equal(decode_cpu(as_u8(images["rgba.png"])), reference_rgb)
    np.testing.assert_array_equal(decode_cpu(as_u8(images["rgb.png"]), types.BGR), reference_rgb[..., ::-1])


def test_gray_and_ycbcr_formulas(images, reference_rgb):
    """BT.601 luma and studio-range YCbCr, against a float64 NumPy computation."""
    rgb = reference_rgb.astype(np.float64)
    luma = rgb @ [0.299, 0.587, 0.114]
    gray = decode_cpu(as_u8(images["rgb.png"]), types.GRAY)
    assert gray.shape == (H, W, 1) and _max_diff(gray[..., 0], np.rint(luma)) <= 1
    m = np.array([[65.481, 128.553, 24.966], [-37.797, -74.203, 112.0], [112.0, -93.786, -18.214]]) / 255
    ycc = rgb @ m.T + [16, 128, 128]
    out = decode_cpu(as_u8(images["rgb.png"]), types.YCbCr)
    assert _max_diff(out, np.rint(ycc)) <= 1
    assert out[..., 0].min() >= 16 and out[..., 0].max() <= 235


def test_jpeg_close_to_source_and_cmyk_sensible(images, reference_rgb):
    for name in ("rgb444.jpg", "cmyk.jpg"):
        out = decode_cpu(as_u8(images[name]))
        assert out.shape == (H, W, 3)
        assert np.abs(out.astype(int) - reference_rgb).mean() < 4, name


@pytest.mark.oracle
@pytest.mark.parametrize("dtype", ["UINT8", "UINT16", "INT16", "FLOAT"])
def test_dtypes_match_dali(images, dtype):
    names = ["rgb.png", "rgb16.png", "gray16.png", "rgb.jpg"]
    datas = [as_u8(images[n]) for n in names]
    for ot in ("RGB", "GRAY"):
        def build(x, fn, t, ot=ot):
            return fn.decoders.image(x, output_type=getattr(t, ot), dtype=getattr(t, dtype))

        ours = run_stoker(datas, build)[0]
        ref = run_dali(datas, lambda x, fn, t, ot=ot: fn.decoders.image(
            x, device="cpu", output_type=getattr(t, ot), dtype=getattr(t, dtype)))[0]
        for name, a, b in zip(names, ours, ref):
            assert a.dtype == b.dtype and a.shape == b.shape, (name, ot, a.dtype, b.dtype)
            if a.dtype.kind == "f":
                assert np.abs(a - b).max() <= _tol(name, ot) / 255 + 1e-6, (name, ot)
            else:
                scale = np.iinfo(a.dtype).max / 255
                assert _max_diff(a, b) <= _tol(name, ot) * scale + 1, (name, ot, _max_diff(a, b))


def test_16bit_png_keeps_and_scales_values(images, reference_rgb):
    stored = stored16(reference_rgb)
    np.testing.assert_array_equal(decode_cpu(as_u8(images["rgb16.png"]), types.RGB, np.uint16), stored)
    np.testing.assert_array_equal(decode_cpu(as_u8(images["gray16.png"]), types.ANY_DATA, np.uint16),
                                  stored[..., :1])
    np.testing.assert_array_equal(decode_cpu(as_u8(images["rgb16.png"])), np.rint(stored / 257).astype(np.uint8))
    f = decode_cpu(as_u8(images["rgb16.png"]), types.RGB, np.float32)
    np.testing.assert_allclose(f, stored / 65535, rtol=0, atol=1e-6)


def _exif_reference(img: np.ndarray, o: int) -> np.ndarray:
    """The orientation transform done by Pillow (independent of our code)."""
    from PIL import Image, ImageOps

    im = Image.fromarray(img)
    im.info["exif"] = exif_with_orientation(o)
    im.getexif()[0x0112] = o
    return np.asarray(ImageOps.exif_transpose(im))


@pytest.mark.parametrize("o", range(1, 9))
def test_exif_orientation(images, o):
    stored = decode_cpu(as_u8(images[f"exif{o}.jpg"]), adjust_orientation=False)
    out = decode_cpu(as_u8(images[f"exif{o}.jpg"]))
    np.testing.assert_array_equal(out, _exif_reference(stored, o))


@pytest.mark.parametrize("name,o", [("exif6.png", 6), ("exif8.webp", 8), ("exif6.tiff", 6)])
def test_exif_orientation_other_formats(images, reference_rgb, name, o):
    np.testing.assert_array_equal(decode_cpu(as_u8(images[name])), _exif_reference(reference_rgb, o))
    np.testing.assert_array_equal(decode_cpu(as_u8(images[name]), adjust_orientation=False), reference_rgb)


@pytest.mark.oracle
@pytest.mark.parametrize("adjust", [True, False])
def test_exif_orientation_matches_dali(images, adjust):
    names = [f"exif{o}.jpg" for o in range(1, 9)] + ["exif6.png", "exif6.tiff"]
    datas = [as_u8(images[n]) for n in names]
    ours = run_stoker(datas, lambda x, fn, t: fn.decoders.image(x, adjust_orientation=adjust))[0]
    ref = run_dali(datas, lambda x, fn, t: fn.decoders.image(x, device="cpu", adjust_orientation=adjust))[0]
    for name, a, b in zip(names, ours, ref):
        assert a.shape == b.shape, (name, adjust)
        assert _max_diff(a, b) <= _tol(name), (name, adjust)


def test_output_layout_and_batch(images):
    from stoker import fn, pipeline_def

    datas = [as_u8(images["rgb.jpg"]), as_u8(images["exif6.jpg"])]

    @pipeline_def(batch_size=2, num_threads=2, device_id=None)
    def pipe():
        return fn.decoders.image(fn.external_source(source=lambda: datas, batch=True))

    p = pipe()
    p.build()
    (out,) = p.run()
    assert out.layout() == "HWC"
    assert [out.at(i).shape for i in range(2)] == [(H, W, 3), (W, H, 3)]


def test_legacy_ops_names():
    from stoker import ops

    assert ops.ImageDecoder is not None and ops.decoders.Image is not None
    assert ops.ImageDecoderRandomCrop is not None and ops.PeekImageShape is not None


# --- bad data -------------------------------------------------------------------

def _bad_files(images) -> dict[str, bytes]:
    jpg, png = images["rgb.jpg"], images["rgb.png"]
    return {
        "truncated.jpg": jpg[: len(jpg) // 2],
        "header_only.jpg": jpg[:30],
        "truncated.png": png[: len(png) // 2],
        "notes.jpg": b"these are not the pixels you are looking for\n" * 3,
        "empty.png": b"",
        "broken_sof.jpg": b"\xff\xd8\xff\xc0\x00\x11\x08\x00\x00\x00\x00\x03" + b"\x00" * 20,
    }


@pytest.mark.parametrize("which", ["truncated.jpg", "header_only.jpg", "truncated.png", "notes.jpg", "empty.png",
                                   "broken_sof.jpg"])
def test_bad_data_raises_clear_error(images, which):
    with pytest.raises(ImageDecodeError) as e:
        decode_cpu(as_u8(_bad_files(images)[which]))
    assert str(e.value)


def test_bad_file_error_names_operator_and_path(images, tmp_path):
    from stoker import fn, pipeline_def

    bad = _bad_files(images)
    paths = []
    for name, data in [("good.jpg", images["rgb.jpg"]), ("truncated.jpg", bad["truncated.jpg"]),
                       ("notes.jpg", bad["notes.jpg"])]:
        (tmp_path / name).write_bytes(data)
        paths.append(str(tmp_path / name))
    for bad_path in paths[1:]:
        @pipeline_def(batch_size=2, num_threads=1, device_id=None)
        def pipe(bad_path=bad_path):
            enc, _ = fn.readers.file(files=[paths[0], bad_path])
            return fn.decoders.image(enc)

        p = pipe()
        p.build()
        with pytest.raises(OperatorError) as e:
            p.run()
        msg = str(e.value)
        assert "decoders.image" in msg and bad_path in msg, msg
        assert e.value.source == bad_path


def test_non_uint8_input_is_rejected():
    with pytest.raises(ImageDecodeError, match="uint8"):
        decode_cpu(np.zeros(10, np.float32))


def test_large_image_roundtrip():
    """A photo-sized JPEG decodes to its size and close to its pixels."""
    img = smooth_image(375, 500, 3, seed=3)
    out = decode_cpu(as_u8(pil_bytes(img, "JPEG", quality=95)))
    assert out.shape == (375, 500, 3) and np.abs(out.astype(int) - img).mean() < 8
