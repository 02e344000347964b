"""GPU grid_mask and paste (stoker/operators/image/gpu_grid_mask_paste.py, kernels/grid_mask_paste.cu)
against the CPU operators: the same pipelines on both devices over batches of differently sized
images (an empty one among them), HWC and HW, several element types, static and per-sample
arguments; each GPU path called directly on the ways a device batch is stored; a host batch
through the host fallback; bad arguments and shapes failing as on the CPU.

Tolerance: none. grid_mask tests every pixel with the CPU's float32 constants
(grid_mask_params) and the CPU's float32 operations in the CPU's order, each product and sum
rounded on its own (no fused multiply-add), so the same pixels are zeroed, including those on a
square's edge; paste only moves values. Both outputs must equal the CPU's to the bit."""

import numpy as np
import pytest
from gpu_pipelines import compare_exact, load_gpu_module, run_pipeline

import stoker.fn as fn
from stoker.errors import StokerError
from stoker.operators import gpu_registry

pytestmark = pytest.mark.gpu

MODULE = "stoker.operators.image.gpu_grid_mask_paste"


@pytest.fixture(autouse=True, scope="module")
def _gpu_grid_mask_paste():
    load_gpu_module(MODULE)


def _const(values, dtype=np.float32):
    """A per-sample argument input: one array per sample."""
    return fn.external_source(source=[[np.asarray(v, dtype) for v in values]], cycle=True)


def _with_empty(images):
    """``images`` with an image of no rows in the middle."""
    return images[:2] + [np.zeros((0, 7, images[0].shape[2]), images[0].dtype)] + images[2:]


# --- grid_mask -------------------------------------------------------------------------------

GRID_CASES = [dict(), dict(tile=10, ratio=0.3), dict(tile=13, ratio=0.6, angle=0.4, shift_x=3.3, shift_y=-2.1),
              dict(tile=7, ratio=0.5, angle=-1.2, shift_x=-5.0, shift_y=4.5), dict(tile=20, ratio=0.0),
              dict(tile=16, ratio=1.0, angle=3.0), dict(tile=25, ratio=0.2, angle=0.7854, shift_x=100.0),
              dict(tile=3, ratio=0.34, angle=1.5708, shift_x=-0.5, shift_y=12.25)]


@pytest.mark.parametrize("dtype", [np.uint8, np.float32], ids=["u8", "f32"])
@pytest.mark.parametrize("kw", GRID_CASES, ids=str)
def test_grid_mask_matches_cpu(kw, dtype, make_images):
    images = _with_empty(make_images(5, 15, 130))
    if dtype == np.float32:
        images = [im.astype(np.float32) / 7 for im in images]
    compare_exact(lambda x: fn.grid_mask(x, **kw), images, "grid_mask")


def test_grid_mask_dense_gray_and_other_types(make_images):
    """A dense batch (one shape), HW images, and 16-bit, 64-bit and float16 samples (the kernel
    moves elements by size)."""
    dense = make_images(4, 48, 49)
    kw = dict(tile=9, ratio=0.4, angle=0.3, shift_x=1.25)
    compare_exact(lambda x: fn.grid_mask(x, **kw), dense, "grid_mask")
    gray = [np.ascontiguousarray(im[..., 0]) for im in make_images(4, 10, 90)]
    compare_exact(lambda x: fn.grid_mask(x, **kw), gray, "grid_mask", "HW")
    images = make_images(3, 20, 60)
    for dtype in (np.int16, np.float64, np.float16):
        compare_exact(lambda x: fn.grid_mask(x, **kw), [im.astype(dtype) - 100 for im in images], "grid_mask")


def test_grid_mask_edges_where_other_arithmetic_would_differ():
    """Grids with many pixels on a square's edge: float64 arithmetic would zero other pixels
    than the CPU's float32 (checked here), the GPU must still zero exactly the CPU's."""
    from stoker.operators.image.grid_mask import grid_mask_black

    images = [np.full((200, 300, 3), 200, np.uint8), np.full((150, 170, 3), 200, np.uint8)]
    for tile, ratio in ((10, 0.3), (5, 0.6)):
        y, x = np.mgrid[0:200, 0:300].astype(np.float64)
        u, v = x / tile, y / tile
        wide = ((u - np.floor(u)) < ratio) & ((v - np.floor(v)) < ratio)
        assert (wide != grid_mask_black(200, 300, tile, ratio, 0.0, 0.0, 0.0)).any()
        compare_exact(lambda im, t=tile, r=ratio: fn.grid_mask(im, tile=t, ratio=r), images, "grid_mask")


def test_grid_mask_per_sample_arguments(make_images):
    images = make_images(4, 20, 120)

    def build(x):
        return fn.grid_mask(x, tile=_const([8, 31, 3, 17], np.int32), angle=_const([0.1, -2.0, 1.0, 0.0]),
                            ratio=_const([0.25, 0.7, 0.5, 1.0]), shift_x=_const([0.0, 3.5, -7.25, 1e3]),
                            shift_y=1.5)

    compare_exact(build, images, "grid_mask")


def test_grid_mask_bad_arguments_and_shapes_fail_like_the_cpu(make_images):
    images = make_images(3, 10, 30)
    for gpu in (True, False):
        with pytest.raises(StokerError, match="grid_mask: argument 'tile'"):
            run_pipeline(lambda x: fn.grid_mask(x, tile=0), [images], gpu)
        with pytest.raises(StokerError, match="grid_mask: argument 'ratio'"):
            run_pipeline(lambda x: fn.grid_mask(x, ratio=1.5), [images], gpu)
        with pytest.raises(StokerError, match="grid_mask: argument 'tile' must be positive, got -2"):
            run_pipeline(lambda x: fn.grid_mask(x, tile=_const([4, -2, 4], np.int32)), [images], gpu)
        clips = [np.zeros((2, 5, 6, 3), np.uint8)] * 2
        with pytest.raises(StokerError, match="grid_mask: expects HW or HWC images, got shape"):
            run_pipeline(lambda x: fn.grid_mask(x), [clips], gpu, "FHWC")


# --- paste -----------------------------------------------------------------------------------

PASTE_CASES = [dict(ratio=2), dict(ratio=1.5, paste_x=0.3, paste_y=0.8), dict(ratio=1.7, paste_x=1, paste_y=0),
               dict(ratio=1.3, min_canvas_size=40), dict(ratio=2.5), dict(ratio=1.0),
               dict(ratio=3.33, paste_x=0.71)]
FILLS = {"per channel": [250, 10, 128], "one value": [300.7], "negative": [-3.5, 0, 1e3]}


@pytest.mark.parametrize("fill", sorted(FILLS))
@pytest.mark.parametrize("dtype", [np.uint8, np.float32], ids=["u8", "f32"])
@pytest.mark.parametrize("kw", PASTE_CASES, ids=str)
def test_paste_matches_cpu(kw, dtype, fill, make_images):
    images = _with_empty(make_images(5, 4, 40))
    if dtype == np.float32:
        images = [im.astype(np.float32) / 7 for im in images]
    compare_exact(lambda x: fn.paste(x, fill_value=FILLS[fill], **kw), images, "paste")


def test_paste_dense_other_channels_and_types(make_images):
    dense = make_images(3, 16, 17)
    compare_exact(lambda x: fn.paste(x, ratio=1.9, fill_value=[1, 2, 3]), dense, "paste")
    gray = [np.ascontiguousarray(im[..., :1]) for im in make_images(4, 5, 30)]
    compare_exact(lambda x: fn.paste(x, ratio=1.9, n_channels=1, fill_value=[77]), gray, "paste")
    rgba = make_images(3, 5, 30, c=4)
    compare_exact(lambda x: fn.paste(x, ratio=2.2, n_channels=4, fill_value=[1, 2, 3, 4], paste_y=0.1), rgba,
                  "paste")
    images = make_images(3, 5, 30)
    for dtype in (np.int16, np.float64, np.float16):
        compare_exact(lambda x: fn.paste(x, ratio=1.4, fill_value=[-7.9, 0.5, 2e4]),
                      [im.astype(dtype) - 100 for im in images], "paste")


def test_paste_per_sample_arguments_and_an_empty_image(make_images):
    images = _with_empty(make_images(3, 4, 40))

    def build(x):
        return fn.paste(x, ratio=_const([1.25, 2.0, 1.0, 3.1]), paste_x=_const([0.0, 0.6, 0.5, 1.0]),
                        paste_y=_const([1.0, 0.15, 0.5, 0.5]), min_canvas_size=_const([0, 0, 12, 50]),
                        fill_value=[9, 8, 7])

    got = compare_exact(build, images, "paste")
    assert got[2].shape == (12, 12, 3) and (got[2] == [9, 8, 7]).all()  # no image: fill only


def test_paste_bad_arguments_and_shapes_fail_like_the_cpu(make_images):
    images = make_images(3, 10, 30)
    for gpu in (True, False):
        with pytest.raises(StokerError, match="paste: argument 'ratio' must be at least 1, got 0.5"):
            run_pipeline(lambda x: fn.paste(x, ratio=_const([2, 0.5, 2]), fill_value=[1]), [images], gpu)
        with pytest.raises(StokerError, match="paste: argument 'paste_x' must be in"):
            run_pipeline(lambda x: fn.paste(x, ratio=2, paste_x=1.5, fill_value=[1]), [images], gpu)
        with pytest.raises(StokerError, match="paste: argument 'fill_value'"):
            run_pipeline(lambda x: fn.paste(x, ratio=2, fill_value=[1, 2]), [images], gpu)
        with pytest.raises(StokerError, match="paste: expects HWC images with n_channels=1 channels"):
            run_pipeline(lambda x: fn.paste(x, ratio=2, n_channels=1, fill_value=[1]), [images], gpu)


# --- each way of storing a device batch, empty batches, the host fallback ------------------------

def _stored(cp, samples, how: str):
    """``samples`` as a TensorListGPU: "dense" (one (N, ...) array), "flat" (one buffer, junk
    between the samples), "list" (one array per sample) or "strided" (non-contiguous views)."""
    from stoker.tensors_gpu import TensorListGPU

    if how == "dense":
        return TensorListGPU(cp.asarray(np.stack(samples)), "HWC")
    if how == "list":
        return TensorListGPU([cp.asarray(s) for s in samples], "HWC")
    if how == "strided":
        return TensorListGPU([cp.asarray(np.repeat(s, 2, axis=1))[:, ::2] for s in samples], "HWC")
    gap = 5
    sizes = np.array([s.size for s in samples], np.int64)
    offsets = np.concatenate([[0], np.cumsum(sizes + gap)[:-1]]).astype(np.int64)
    buf = np.full(int(sizes.sum()) + gap * len(samples), 9, samples[0].dtype)
    for o, s in zip(offsets, samples):
        buf[o:o + s.size] = s.reshape(-1)
    shapes = np.asarray([s.shape for s in samples], np.int64).reshape(len(samples), -1)
    return TensorListGPU.from_flat(cp.asarray(buf), offsets, shapes, "HWC")


def _op(name, **kwargs):
    from stoker.operators.schema import get_operator

    cls = get_operator(name)
    static, _ = cls.schema.bind(kwargs, lambda v: False)
    return cls(static, "gpu"), cls(static, "cpu")


def _direct(name, kwargs, samples, x, batch_ctx, fallback=False):
    """The GPU function on batch ``x`` and the CPU operator on ``samples``: equal; whether the
    host fallback ran is checked against ``fallback``."""
    from stoker.operators.base import BatchContext
    from stoker.tensors import TensorListCPU

    gpu_op, cpu_op = _op(name, **kwargs)
    before = gpu_registry.FALLBACKS[name]
    (got,) = gpu_op.run_gpu(batch_ctx, [x], {})
    assert gpu_registry.FALLBACKS[name] == before + (1 if fallback else 0)
    (want,) = cpu_op.run_cpu(BatchContext(batch_size=len(samples)), [TensorListCPU(samples, "HWC")], {})
    batch_ctx.stream.synchronize()
    assert got.layout() == want.layout() and len(got) == len(want)
    for a, b in zip(got.as_cpu().samples(), want.samples()):
        a, b = np.asarray(a), np.asarray(b)
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("how", ["dense", "flat", "list", "strided"])
def test_each_storage_of_the_input_batch(how, make_images, batch_ctx, cp):
    images = make_images(4, 30, 31) if how == "dense" else _with_empty(make_images(4, 10, 60))
    x = _stored(cp, images, how)
    _direct("grid_mask", dict(tile=11, ratio=0.45, angle=0.9, shift_y=2.5), images, x, batch_ctx)
    _direct("paste", dict(ratio=1.6, paste_x=0.2, fill_value=[5, 6, 7]), images, x, batch_ctx)


def test_empty_batches(batch_ctx):
    from stoker.tensors_gpu import TensorListGPU

    for name, kw in (("grid_mask", {}), ("paste", dict(ratio=2, fill_value=[1]))):
        (out,) = _op(name, **kw)[0].run_gpu(batch_ctx, [TensorListGPU([], "HWC")], {})
        assert len(out) == 0


def test_a_host_batch_takes_the_host_fallback(make_images, batch_ctx):
    """A host batch (only in a direct call: a pipeline uploads it) runs the CPU operator, counted."""
    from stoker.tensors import TensorListCPU

    images = make_images(3, 10, 40)
    host = TensorListCPU(images, "HWC")
    _direct("grid_mask", dict(tile=6, angle=0.5), images, host, batch_ctx, fallback=True)
    _direct("paste", dict(ratio=1.5, fill_value=[3]), images, host, batch_ctx, fallback=True)
