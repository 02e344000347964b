"""GPU resize / crop_mirror_normalize / crop / flip / cast against NumPy references and the CPU code.

Tolerances: resize agrees with an exact float64 NumPy model within 1 (uint8
rounding of float32 sums) and with the CPU resampler within 1;
crop_mirror_normalize is exact up to float32 rounding (1e-5 relative);
crop, flip and cast are exact.
"""

import math

import numpy as np
import pytest

pytestmark = pytest.mark.gpu


def _weights(n_in, n_out, lo, scale, antialias=True):
    """Triangle-filter weight matrix (n_out, n_in) of the resize model, edge taps repeated."""
    W = np.zeros((n_out, n_in))
    r = max(abs(scale), 1.0) if antialias else 1.0
    for j in range(n_out):
        s = lo + (j + 0.5) * scale
        for i in range(math.floor(s - r) - 1, math.ceil(s + r) + 2):
            w = max(0.0, 1.0 - abs(i + 0.5 - s) / r)
            W[j, min(max(i, 0), n_in - 1)] += w
        W[j] /= W[j].sum()
    return W


def ref_resize(img, p):
    oh, ow, y0, x0, sy, sx = p
    Wy, Wx = _weights(img.shape[0], oh, y0, sy), _weights(img.shape[1], ow, x0, sx)
    out = np.einsum("yi,ijc,xj->yxc", Wy, img.astype(np.float64), Wx)
    return np.clip(np.floor(out + 0.5), 0, 255).astype(np.uint8)


@pytest.mark.parametrize("args", [{"resize_x": 224, "resize_y": 224}, {"resize_shorter": 40},
                                  {"resize_x": 17}, {"size": (120, 33)}])
def test_resize_matches_model(args, batch_ctx, make_images, cp):
    from stoker.operators.image.gpu_resize import plan, resize_samples

    imgs = make_images(6)
    plans = [plan(args, im.shape[0], im.shape[1]) for im in imgs]
    outs, dense = resize_samples([cp.asarray(i) for i in imgs], plans, batch_ctx)
    batch_ctx.stream.synchronize()
    if len({p[:2] for p in plans}) == 1:
        assert dense is not None and dense.shape[0] == 6
    for im, p, o in zip(imgs, plans, outs):
        want = ref_resize(im, p)
        got = o.get()
        assert got.shape == want.shape
        assert np.abs(got.astype(int) - want).max() <= 1


def test_resize_matches_cpu_resampler(batch_ctx, make_images, cp):
    resample = pytest.importorskip("stoker.operators.image.resample")
    from stoker.operators.image.geometry import resize_plan
    from stoker.operators.image.gpu_resize import plan, resize_samples
    from stoker.types import DALIInterpType

    imgs = make_images(4, 40, 120)
    plans = [plan({"resize_shorter": 31}, im.shape[0], im.shape[1]) for im in imgs]
    outs, _ = resize_samples([cp.asarray(i) for i in imgs], plans, batch_ctx)
    batch_ctx.stream.synchronize()
    for im, o in zip(imgs, outs):
        rp = resize_plan(im.shape[:2], (0, 0), resize_shorter=31)
        want = resample.resample(im, (0, 1), rp.out_size, rp.lo, rp.hi, min_filter=DALIInterpType.INTERP_LINEAR,
                                 mag_filter=DALIInterpType.INTERP_LINEAR, antialias=True, dtype=np.uint8)
        assert np.abs(o.get().astype(int) - want.astype(int)).max() <= 1


def test_crop_mirror_normalize(batch_ctx, make_images, cp):
    from stoker.operators.image.gpu_crop_mirror_normalize import cmn_samples, crop_window

    imgs = make_images(5, 30, 60)
    mean, std = [10.0, 100.0, 200.0], [2.0, 50.0, 0.5]
    windows = [crop_window({"crop": (24, 20), "crop_pos_x": 0.3}, im.shape[0], im.shape[1]) for im in imgs]
    mirror = [0, 1, 0, 1, 1]
    for layout in ("CHW", "HWC"):
        out = cmn_samples([cp.asarray(i) for i in imgs], windows, mirror, batch_ctx, mean=mean, std=std,
                          layout=layout)
        batch_ctx.stream.synchronize()
        got = out.get()
        for k, (im, (y0, x0, h, w)) in enumerate(zip(imgs, windows)):
            ref = im[y0:y0 + h, x0:x0 + w].astype(np.float64)
            if mirror[k]:
                ref = ref[:, ::-1]
            ref = (ref - mean) / std
            if layout == "CHW":
                ref = ref.transpose(2, 0, 1)
            np.testing.assert_allclose(got[k], ref, rtol=1e-5, atol=1e-4)


def test_cmn_pads_out_of_bounds_and_channels(batch_ctx, make_images, cp):
    from stoker.operators.image.gpu_crop_mirror_normalize import cmn_samples

    im = make_images(1, 10, 11)[0]
    out = cmn_samples([cp.asarray(im)], [(-2, -3, im.shape[0] + 4, im.shape[1] + 6)], [0], batch_ctx,
                      mean=None, std=None, dtype=np.uint8, layout="HWC", pad_output=True, fill=7.0)
    batch_ctx.stream.synchronize()
    got = out.get()[0]
    assert got.shape == (im.shape[0] + 4, im.shape[1] + 6, 4)
    np.testing.assert_array_equal(got[2:-2, 3:-3, :3], im)
    assert (got[:2] == 7).all() and (got[..., 3] == 7).all()


def test_crop_and_flip(batch_ctx, make_images, cp):
    from stoker.operators.image.gpu_crop_flip import crop_flip_samples

    imgs = [i.astype(np.float32) for i in make_images(4, 12, 30)]
    windows = [(1, 2, 8, 9)] * 4
    flips = [0, 1, 2, 3]
    outs, dense = crop_flip_samples([cp.asarray(i) for i in imgs], windows, flips, batch_ctx)
    batch_ctx.stream.synchronize()
    assert dense is not None and dense.dtype == np.float32
    for im, f, o in zip(imgs, flips, outs):
        ref = im[1:9, 2:11]
        if f & 1:
            ref = ref[:, ::-1]
        if f & 2:
            ref = ref[::-1]
        np.testing.assert_array_equal(o.get(), ref)


def test_cast_matches_cpu(cp, rng):
    from stoker.operators.tensor.basic import convert
    from stoker.operators.tensor.gpu_cast import cast_array

    x = rng.normal(0, 300, (1000,)).astype(np.float32)
    x[:4] = [0.5, 1.5, -0.5, 254.5]
    for dt in (np.uint8, np.int16, np.int8, np.float16):
        np.testing.assert_array_equal(cast_array(cp.asarray(x), dt).get(), convert(x, dt))
    y = rng.integers(-70000, 70000, 1000).astype(np.int32)
    np.testing.assert_array_equal(cast_array(cp.asarray(y), np.int16).get(), convert(y, np.int16))


def test_resize_of_a_flat_batch_matches_the_list_path(batch_ctx, make_images, cp):
    from stoker.operators.image.gpu_resize import plan, resize_samples
    from stoker.tensors_gpu import TensorListGPU

    imgs = make_images(5)
    offsets = np.cumsum([0] + [im.size for im in imgs[:-1]])
    buf = cp.asarray(np.concatenate([im.reshape(-1) for im in imgs]))
    flat = TensorListGPU.from_flat(buf, offsets, [im.shape for im in imgs], "HWC")
    plans = [plan({"resize_shorter": 30}, im.shape[0], im.shape[1]) for im in imgs]
    a, _ = resize_samples(flat, plans, batch_ctx)
    b, _ = resize_samples([cp.asarray(im) for im in imgs], plans, batch_ctx)
    batch_ctx.stream.synchronize()
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x.get(), y.get())


def test_cmn_batch_windows_match_per_sample_windows(batch_ctx, make_images, cp):
    from types import SimpleNamespace

    from stoker.operators.image.gpu_crop_mirror_normalize import batch_windows, crop_window
    from stoker.tensors_gpu import TensorListGPU

    imgs = make_images(6)
    tl = TensorListGPU([cp.asarray(i) for i in imgs], "HWC")
    op = SimpleNamespace(args={"crop": [15.0, 11.0], "crop_pos_x": 0.3})
    arg_inputs = {"crop_pos_y": [np.float32(v) for v in np.linspace(0, 1, 6)],
                  "mirror": [np.int32(i % 2) for i in range(6)]}
    windows, mirror = batch_windows(op, tl, arg_inputs)
    for i, im in enumerate(imgs):
        args = {**op.args, "crop_pos_y": arg_inputs["crop_pos_y"][i]}
        assert tuple(windows[i]) == crop_window(args, im.shape[0], im.shape[1])
    assert mirror.tolist() == [bool(i % 2) for i in range(6)]
