"""GPU kernels of stoker.auto_aug's own steps (``stoker.auto_aug._ops``): ``_auto_aug.filter``
(sharpness), ``equalize``, ``contrast``, ``auto_contrast``, ``solarize`` and ``solarize_add``, on
GPU batches of uint8 images (HWC, or HW), each batch in one to three launches of
``kernels/auto_aug.cu`` into one flat output buffer, with no host step per sample and no wait for
the device.

- ``solarize``, ``solarize_add``: one launch (``aa_point``); each thread reads its sample's
  parameter where it lies on the device (the second input, a GPU batch in a GPU pipeline) and
  applies the CPU's table formula (``_ops.solarize_table`` / ``solarize_add_table``) to its values.
- ``equalize``, ``auto_contrast``, ``contrast``: a memset and three launches: per-sample
  per-channel histograms (``aa_hist``), each sample's tables from its histogram (``aa_tables``: the
  CPU's arithmetic operation by operation, see ``_ops.equalize_table`` (OpenCV's equalizeHist),
  ``auto_contrast_table`` and ``contrast_table``; the histogram gives the sums, minima and maxima
  exactly), then the lookup (``aa_lut``).
- ``filter``: one launch (``aa_filter``), the 3x3 correlation with each sample's kernel (read on the
  device), reflect-101 border, rounded half to even and saturated as the CPU rounds.

Agreement with the CPU operators: the values of the CPU operators, to the bit. The filter sums its
9 products in float32 as OpenCV's filter2D does (fused multiply-adds in its vectorised loop, a
product then a sum in its scalar loop at the end of a row), which a probe of the host's OpenCV
finds once (``opencv_filter_lanes``); should none of the known ways reproduce it, the last bit of
a sum may differ and a result on a rounding tie then differs by one level (at most 1).

Parameters are read as the CPU reads them: ``np.float32`` of the value (contrast's factor, the
filter's kernel), a comparison with the value (solarize's threshold), ``.astype(np.uint8)``
(solarize_add's shift; a float shift outside [0, 256) has no defined uint8 value, and the device's
truncation may differ from the host's there). Parameters of other types (float16, ...) or sizes,
samples that are not 2-D or 3-D (videos: FHWC), other element types, samples with an empty extent
and contrast on samples without 3 channels go through the host fallback, with the CPU's results
and errors.
"""

from __future__ import annotations

import functools

import numpy as np

from stoker.operators.gpu_registry import (
    contiguous_samples,
    flat_offsets,
    flat_output,
    grid_for,
    host_fallback,
    register_gpu,
    upload_table,
)

_ITAB = 8  # columns of the kernels' sample table, as ITAB in kernels/auto_aug.cu
# parameter types, as param_* in kernels/auto_aug.cu
_PTYPES = {np.dtype(t): k for k, t in enumerate((np.uint8, np.int8, np.uint16, np.int16, np.uint32, np.int32,
                                                 np.uint64, np.int64, np.float32, np.float64, np.bool_))}
_TABLE_OPS = {"_auto_aug.equalize": 0, "_auto_aug.auto_contrast": 1, "_auto_aug.contrast": 2}  # OP_* in the .cu
_POINT_OPS = {"_auto_aug.solarize": 0, "_auto_aug.solarize_add": 1}
_SHARED_CHANNELS = 48  # histograms of up to this many channels are counted in shared memory (48 KiB)
_HIST_PIXELS = 16  # pixels per thread of the histogram kernel (each block adds its bins once)
_PIXELS = 4  # pixels (elements for aa_point) per thread of the other kernels


def _empty(x):
    from stoker.tensors_gpu import TensorListGPU

    return [TensorListGPU([], x.layout(), [])]


def param_pointers(p, n: int, count: int, batch):
    """``(pointers (n,) int64, type code)`` of each sample's ``count`` parameter values, where
    they lie: a GPU batch's samples (no copy, no wait), or a host batch's values uploaded as one
    table. None when the kernels do not take them (another type, another number of values)."""
    from stoker.tensors_gpu import TensorListGPU

    if isinstance(p, TensorListGPU):
        if len(p) != n or p.element_dtype() not in _PTYPES:
            return None
        parts = p.flat_parts()
        if parts is not None:  # one buffer (an uploaded batch, a branch of one): arrays, no loop
            buf, offsets, shapes = parts
            ptrs, sizes = buf.data.ptr + offsets * buf.itemsize, np.prod(shapes, axis=1)
        else:  # separate device arrays (scalars among them, which geometry() does not take)
            samples = contiguous_samples(p).samples()
            ptrs = np.fromiter((s.data.ptr for s in samples), np.int64, n)
            sizes = np.fromiter((s.size for s in samples), np.int64, n)
        if (sizes != count).any():
            return None
        return ptrs, _PTYPES[p.element_dtype()]
    samples = p.samples() if hasattr(p, "samples") else list(p)
    if len(samples) != n:
        return None
    try:  # host values (a GPU implementation called with a CPU parameter batch)
        a = np.asarray([np.asarray(s) for s in samples])
    except ValueError:
        return None
    if a.dtype not in _PTYPES or a.size != n * count:
        return None
    table = upload_table(a.reshape(n, count), batch)
    return table.data.ptr + np.arange(n, dtype=np.int64) * (count * a.dtype.itemsize), _PTYPES[a.dtype]


def plan(op, batch, inputs, param_count: int = 0, channels: int | None = None):
    """The kernels' plan for a batch: ``(sample table (n, ITAB) int64, output TensorListGPU,
    parameter type code)``; ``[]`` for an empty batch; None when the kernels do not take it (then
    the host fallback runs). ``param_count``: values of the second input per sample (0: none);
    ``channels``: the channels every sample must have (3-D samples)."""
    from stoker.tensors_gpu import TensorListGPU

    x = inputs[0]
    if not isinstance(x, TensorListGPU):
        return None
    n = len(x)
    if n == 0:
        return []
    if x.ndim not in (2, 3) or x.element_dtype() != np.uint8:
        return None
    if channels is not None and x.ndim != 3:
        return None
    x = contiguous_samples(x)
    ptrs, _, shapes = x.geometry()
    hwc = shapes if shapes.shape[1] == 3 else np.column_stack([shapes, np.ones(n, np.int64)])
    if not hwc.all() or (channels is not None and (hwc[:, 2] != channels).any()):
        return None  # empty extents and other channel counts: the CPU's results or errors
    ptype = 0
    itab = np.empty((n, _ITAB), np.int64)
    if param_count:
        got = param_pointers(inputs[1], n, param_count, batch)
        if got is None:
            return None
        itab[:, 5], ptype = got
    else:
        itab[:, 5] = 0
    sizes = np.prod(hwc, axis=1)
    buf, offsets, out = flat_output(shapes, sizes, np.uint8, x.layout(), x.source_info())
    itab[:, 0] = ptrs
    itab[:, 1] = buf.data.ptr + offsets
    itab[:, 2] = hwc[:, 0] * hwc[:, 1]
    itab[:, 3] = hwc[:, 2]
    itab[:, 4] = flat_offsets(hwc[:, 2] * 256)
    itab[:, 6:8] = hwc[:, :2]
    return itab, out, ptype


def _pixel_grid(itab, per_thread: int):
    return grid_for(-(-int(itab[:, 2].max()) // per_thread), len(itab))


def histogram_tables(itab, op_code: int, ptype: int, batch):
    """Every sample's per-channel lookup tables (one uint8 device buffer, sample i's ``C * 256``
    entries from ``itab[i, 4]``) for table op ``op_code``, from per-channel histograms: a memset
    and two launches, no wait."""
    from stoker.auto_aug._ops import LUMA
    from stoker.backend import cuda

    cp = cuda.cupy()
    n = len(itab)
    bins = int(itab[:, 3].sum()) * 256
    cmax = int(itab[:, 3].max())
    hist = cp.zeros(bins, cp.uint32)
    tables = cp.empty(bins, cp.uint8)
    dev_itab = upload_table(itab, batch)
    in_shared = cmax <= _SHARED_CHANNELS
    grid, block = _pixel_grid(itab, _HIST_PIXELS)
    cuda.load_kernel("auto_aug", "aa_hist")(grid, block, (dev_itab, hist, np.int32(in_shared)),
                                             shared_mem=cmax * 256 * 4 if in_shared else 0)
    luma = [np.float32(v) for v in LUMA]
    cuda.load_kernel("auto_aug", "aa_tables")((1 if op_code == 2 else cmax, n, 1), (256, 1, 1),
                                               (dev_itab, hist, tables, np.int32(op_code), np.int32(ptype), *luma))
    return dev_itab, tables


def _table_op(op, batch, inputs, arg_inputs, param_count: int = 0, channels: int | None = None):
    from stoker.backend import cuda

    planned = plan(op, batch, inputs, param_count, channels)
    if planned is None:
        return host_fallback(op, batch, inputs, arg_inputs)
    if not planned:
        return _empty(inputs[0])
    itab, out, ptype = planned
    dev_itab, tables = histogram_tables(itab, _TABLE_OPS[op.schema.name], ptype, batch)
    grid, block = _pixel_grid(itab, _PIXELS)
    cuda.load_kernel("auto_aug", "aa_lut")(grid, block, (dev_itab, tables))
    return [out]


@register_gpu("_auto_aug.equalize")
def gpu_equalize(op, batch, inputs, arg_inputs):
    """Per-channel histogram equalization (OpenCV's equalizeHist) of GPU batches."""
    return _table_op(op, batch, inputs, arg_inputs)


@register_gpu("_auto_aug.auto_contrast")
def gpu_auto_contrast(op, batch, inputs, arg_inputs):
    """Per-channel min-max stretch of GPU batches."""
    return _table_op(op, batch, inputs, arg_inputs)


@register_gpu("_auto_aug.contrast")
def gpu_contrast(op, batch, inputs, arg_inputs):
    """PIL-style contrast of GPU batches of RGB images (per-sample factor)."""
    return _table_op(op, batch, inputs, arg_inputs, param_count=1, channels=3)


def _point_op(op, batch, inputs, arg_inputs):
    from stoker.backend import cuda

    planned = plan(op, batch, inputs, param_count=1)
    if planned is None:
        return host_fallback(op, batch, inputs, arg_inputs)
    if not planned:
        return _empty(inputs[0])
    itab, out, ptype = planned
    elements = itab[:, 2] * itab[:, 3]
    grid, block = grid_for(-(-int(elements.max()) // _PIXELS), len(itab))
    cuda.load_kernel("auto_aug", "aa_point")(grid, block, (upload_table(itab, batch),
                                                           np.int32(_POINT_OPS[op.schema.name]), np.int32(ptype)))
    return [out]


@register_gpu("_auto_aug.solarize")
def gpu_solarize(op, batch, inputs, arg_inputs):
    """Inverts the values at or above each sample's threshold (GPU batches)."""
    return _point_op(op, batch, inputs, arg_inputs)


@register_gpu("_auto_aug.solarize_add")
def gpu_solarize_add(op, batch, inputs, arg_inputs):
    """Adds each sample's shift to the values below 128 (GPU batches)."""
    return _point_op(op, batch, inputs, arg_inputs)


@register_gpu("_auto_aug.filter")
def gpu_filter(op, batch, inputs, arg_inputs):
    """The 3x3 filter (sharpness) of GPU batches, each sample with its own kernel."""
    from stoker.backend import cuda

    planned = plan(op, batch, inputs, param_count=9)
    if planned is None:
        return host_fallback(op, batch, inputs, arg_inputs)
    if not planned:
        return _empty(inputs[0])
    itab, out, ptype = planned
    grid, block = _pixel_grid(itab, _PIXELS)
    lanes = np.int64(opencv_filter_lanes()[0])
    cuda.load_kernel("auto_aug", "aa_filter")(grid, block, (upload_table(itab, batch), np.int32(ptype), lanes))
    return [out]


_NO_FMA = 1 << 30  # a vector wider than any row: every value summed as a product then a sum


def filter_model(img, kernel, lanes: int) -> np.ndarray:
    """What aa_filter computes for an HWC uint8 ``img`` (float32 sums, before rounding), in NumPy:
    fused multiply-adds (exact in float64 here: a uint8 times a float32, plus a float32, then one
    rounding) for a row's first ``(W * C // lanes) * lanes`` values, a product then a sum for the
    rest."""
    h, w, c = img.shape
    padded = np.pad(img.astype(np.float32), ((1, 1), (1, 1), (0, 0)), mode="reflect")  # reflect-101
    kernel = np.asarray(kernel, np.float32).reshape(3, 3)
    fused = np.zeros(img.shape, np.float32)
    plain = np.zeros(img.shape, np.float32)
    for i in range(3):
        for j in range(3):
            tap = padded[i:i + h, j:j + w]
            fused = (tap.astype(np.float64) * np.float64(kernel[i, j]) + fused).astype(np.float32)
            plain = plain + tap * kernel[i, j]
    index = np.arange(w)[:, None] * c + np.arange(c)[None, :]
    return np.where(index < (w * c // lanes) * lanes, fused, plain)


@functools.cache
def opencv_filter_lanes() -> tuple[int, bool]:
    """``(lanes, exact)``: how this host's OpenCV sums filter2D's float32 taps, found once by a
    probe: its vectorised loop (fused multiply-adds) over ``lanes`` values at a time (8 with AVX2),
    the rest of a row in its scalar loop (products then sums), or no fused step at all; ``exact``
    is False when no candidate reproduces the probe (then 8: results within one level)."""
    import cv2

    rng = np.random.default_rng(12345)
    img = rng.integers(0, 256, (6, 45, 3), dtype=np.uint8)
    kernel = rng.uniform(-1, 1, (3, 3)).astype(np.float32)
    want = cv2.filter2D(img.astype(np.float32), -1, kernel, borderType=cv2.BORDER_REFLECT_101)
    for lanes in (8, 16, 4, 32, 1, _NO_FMA):
        if np.array_equal(filter_model(img, kernel, lanes), want):
            return lanes, True
    return 8, False
