"""GPU ``laplacian``: each sample's windows come from the CPU operator (``Laplacian.windows``:
per-sample window sizes, smoothing sizes and scales, the same float32 coefficients), and every
partial derivative runs as one 1-D pass per spatial axis, each pass one launch over the batch
(``kernels/laplacian.cu``), summed in float32 in the CPU's order, then rounded (half up) and
saturated to the output type. Two spatial axes (images) run in one launch that computes both
passes of each partial per element, with the same float32 operations in the same order. Samples
of any layout with 1 to 3 spatial axes (HW, HWC, CHW, DHWC, FHWC ...; frames and channels are
never filtered across) in uint8, uint16, int16 or float32.

Integer inputs give the CPU's results exactly while the sums stay exact in float32 (integer
scales and sums below 2**24: for uint8, 2-D windows up to 7 and 3-D up to 5); otherwise, and for
float inputs, each window's taps are summed in another order than OpenCV's and the results agree
within float32 rounding. Per-frame arguments
(fn.per_frame), other types, empty samples and more than 3 spatial axes take the host fallback."""

from __future__ import annotations

import functools

import numpy as np

from stoker.operators.color._common import spatial_layout
from stoker.operators.filters.laplacian import derivative_window, smoothing_window
from stoker.operators.gpu_registry import (
    contiguous_samples,
    flat_offsets,
    grid_for,
    host_fallback,
    register_gpu,
    upload_tables,
)
from stoker.operators.image.geometry_batch import plan_rows, sample_rows
from stoker.operators.per_frame import has_frame_values

_SUFFIX = {np.dtype(np.uint8): "u8", np.dtype(np.uint16): "u16", np.dtype(np.int16): "i16",
           np.dtype(np.float32): "f32"}
_COLS = 40  # itab columns, as LAP_COLS in the .cu
INPUT, OUTPUT, SCRATCH_A, SCRATCH_B, PARTIAL_SUM, COUNT = range(6)


def pass_axes(spatial: list[int], channel, shape) -> list[int]:
    """The order in which the CPU filters a sample's spatial axes (indices into ``spatial``): an
    HW / HWC image goes through one cv2.sepFilter2D, rows (x) first; anything else axis by axis,
    outermost first (``_separable.separable_filter``)."""
    image = (spatial == [0, 1] and len(shape) in (2, 3)
             and (len(shape) == 2 or (channel == 2 and shape[2] <= 128)))
    return [1, 0] if image else list(range(len(spatial)))


def laplacian_tables(shapes, plans, kmax: int):
    """(itab int64 (N, 40) without pointers, taps float32 (N, passes, kmax)) for samples of
    ``shapes`` with ``plans[i]`` = (spatial axes, channel axis, windows) from ``Laplacian.windows``;
    pass q = partial * axes + step filters axis ``pass_axes(...)[step]`` with that partial's window."""
    n = len(shapes)
    axes = len(plans[0][0])
    itab = np.zeros((n, _COLS), np.int64)
    taps = np.zeros((n, axes * axes, kmax), np.float32)
    for s, (shape, (spatial, channel, windows)) in enumerate(zip(shapes, plans)):
        shape = [int(d) for d in shape]
        strides = np.cumprod([1, *shape[::-1]])[::-1][1:]  # C-order element strides
        itab[s, COUNT] = int(np.prod(shape, dtype=np.int64))
        order = pass_axes(list(spatial), channel, shape)
        for i, kernels in enumerate(windows):
            for step, j in enumerate(order):
                q = i * axes + step
                k = np.asarray(kernels[j], np.float32)
                itab[s, 8 + 3 * q:11 + 3 * q] = shape[spatial[j]], strides[spatial[j]], (len(k) - 1) // 2
                taps[s, q, :len(k)] = k
    return itab, taps


def pass_plan(axes: int) -> list[tuple[int, int, int, bool]]:
    """Every launch as (pass q, source column, destination column, adds the partial sum): a
    partial's passes ping-pong between two scratches; its last pass writes the partial sum (the
    sum so far plus this partial), the last partial's the output."""
    plan = []
    for i in range(axes):
        for step in range(axes):
            last = step == axes - 1
            src = INPUT if step == 0 else (SCRATCH_A if step % 2 == 1 else SCRATCH_B)
            if not last:
                dst = SCRATCH_A if step % 2 == 0 else SCRATCH_B
            else:
                dst = OUTPUT if i == axes - 1 else PARTIAL_SUM
            plan.append((i * axes + step, src, dst, last and i > 0))
    return plan


def _has_frame_values(arg_inputs) -> bool:
    """Whether some argument input holds per-frame values (C-level: no Python step per sample)."""
    return has_frame_values(arg_inputs)


@functools.cache
def _window_bank() -> tuple[np.ndarray, np.ndarray]:
    """(derivative, smoothing) windows of every size the arguments allow, as (24, 23) float32
    rows: row s holds the window of s taps (the CPU's ``derivative_window`` / ``smoothing_window``),
    zeros after them."""
    deriv, smooth = np.zeros((24, 23), np.float32), np.zeros((24, 23), np.float32)
    for s in range(1, 24):
        smooth[s, :s] = smoothing_window(s)
        if s >= 3:
            deriv[s, :s] = derivative_window(s)
    return deriv, smooth


def _size_rows(op, arg_inputs, name: str, n: int, axes: int, lo: int) -> np.ndarray | None:
    """Window sizes ``name`` of every sample as (n, axes) int64 (one value broadcast), None when
    not given; ValueError for values ``Laplacian.windows`` refuses (PerSample for values NumPy
    cannot take at once)."""
    rows = sample_rows(op, arg_inputs, name, n)
    if rows is None:
        return None
    if rows.shape[1] not in (1, axes):
        raise ValueError(f"argument '{name}' needs 1 or {axes} values (one per spatial axis)")
    if ((rows % 2 == 0) | (rows < lo) | (rows > 23)).any():
        raise ValueError(f"argument '{name}' must be odd and in [{lo}, 23]")
    return np.broadcast_to(np.trunc(rows).astype(np.int64), (n, axes))


def laplacian_plans(op, arg_inputs, shapes, layout: str) -> tuple[np.ndarray, np.ndarray]:
    """``(itab, taps)`` for every sample at once, with no step per sample: the rows
    :func:`laplacian_plan_one` gives (``Laplacian.windows`` and :func:`laplacian_tables`), taps
    (N, passes, 23). Raises ValueError where a sample's arguments are refused."""
    shapes = np.asarray(shapes, np.int64)
    n, ndim = shapes.shape
    spatial, channel = spatial_layout(layout, ndim)
    axes = len(spatial)
    win = _size_rows(op, arg_inputs, "window_size", n, axes, 3)
    smooth = _size_rows(op, arg_inputs, "smoothing_size", n, axes, 1)
    scale = sample_rows(op, arg_inputs, "scale", n)
    if scale is not None and scale.shape[1] not in (1, axes):
        raise ValueError(f"argument 'scale' needs 1 or {axes} values (one per spatial axis)")
    scale = np.ones((n, axes)) if scale is None else np.broadcast_to(scale, (n, axes))
    # pass_axes per sample: rows first for HW / HWC images of up to 128 channels
    image = spatial == [0, 1] and ndim in (2, 3) and (ndim == 2 or channel == 2)
    image = np.full(n, image) if ndim != 3 or not image else shapes[:, 2] <= 128
    order = np.where(image[:, None], np.arange(axes)[::-1], np.arange(axes))
    strides = np.ones_like(shapes)
    if ndim > 1:
        strides[:, :-1] = np.cumprod(shapes[:, :0:-1], axis=1)[:, ::-1]  # C-order element strides
    spatial = np.asarray(spatial, np.int64)
    deriv, smoothing = _window_bank()
    rows = np.arange(n)
    itab = np.zeros((n, _COLS), np.int64)
    itab[:, COUNT] = np.prod(shapes, axis=1, dtype=np.int64)
    taps = np.zeros((n, axes * axes, 23), np.float32)
    col = np.arange(23)
    for i in range(axes):
        # the sizes of partial i along every axis (its own window along axis i)
        sizes = np.repeat(win[:, i:i + 1], axes, axis=1) if smooth is None else smooth.copy()
        sizes[:, i] = win[:, i]
        if op.args.get("normalized_kernel"):
            factor = np.power(2.0, -sizes.sum(axis=1) + axes + 2).astype(np.float32)
        else:
            factor = scale[:, i].astype(np.float32)
        for step in range(axes):
            j = order[:, step]
            size = sizes[rows, j]
            own = j == i
            k = np.where(own[:, None], deriv[size], smoothing[size])
            with np.errstate(all="ignore"):  # the product is kept only where the window has taps
                scaled = k * factor[:, None]
            q = i * axes + step
            taps[:, q] = np.where(own[:, None] & (col < size[:, None]), scaled, k)
            ax = spatial[j]
            itab[:, 8 + 3 * q], itab[:, 9 + 3 * q] = shapes[rows, ax], strides[rows, ax]
            itab[:, 10 + 3 * q] = (size - 1) // 2
    return itab, taps


def laplacian_plan_one(op, arg_inputs, i: int, shape, layout: str) -> tuple[np.ndarray, np.ndarray]:
    """Sample ``i``'s ``(itab row, taps (passes, 23))`` by the CPU operator's per-sample rule
    (``Laplacian.windows``, then :func:`laplacian_tables`): raises that sample's error."""
    shape = tuple(int(d) for d in shape)
    plan = op.windows(op.sample_args(arg_inputs, i), layout, shape)
    itab, taps = laplacian_tables([shape], [plan], 23)
    return itab[0], taps[0]


@register_gpu("laplacian")
def gpu_laplacian(op, batch, inputs, arg_inputs):
    """``fn.laplacian`` on GPU batches."""
    from stoker.backend import cuda
    from stoker.tensors_gpu import TensorListGPU

    x = inputs[0]
    n = len(x)
    if n == 0 or _has_frame_values(arg_inputs):
        return host_fallback(op, batch, inputs, arg_inputs)
    in_type = x.element_dtype()
    out_type = np.dtype(op.args.get("dtype") or in_type)
    layout = x.layout() or ""
    spatial, _ = spatial_layout(layout, x.ndim)
    if in_type not in _SUFFIX or out_type not in _SUFFIX or not 1 <= len(spatial) <= 3:
        return host_fallback(op, batch, inputs, arg_inputs)
    x = contiguous_samples(x)
    ptrs, _, shapes = x.geometry()
    if not shapes.all():
        return host_fallback(op, batch, inputs, arg_inputs)
    itab, taps = plan_rows(op, batch, n, lambda: laplacian_plans(op, arg_inputs, shapes, layout),
                           lambda i: laplacian_plan_one(op, arg_inputs, i, shapes[i], layout))
    kmax = int(2 * itab[:, 10:8 + 3 * len(spatial) ** 2:3].max() + 1)  # the longest window's taps
    taps = np.ascontiguousarray(taps[:, :, :kmax])
    cp = cuda.cupy()
    sizes = itab[:, COUNT]
    offsets = flat_offsets(sizes)
    total = int(sizes.sum())
    axes = len(spatial)
    buf = cp.empty(total, out_type)
    itab[:, INPUT] = ptrs
    itab[:, OUTPUT] = buf.data.ptr + offsets * out_type.itemsize
    grid, block = grid_for(int(sizes.max()), n)
    names = {INPUT: _SUFFIX[in_type], OUTPUT: _SUFFIX[out_type]}
    if axes == 2 and int(sizes.max()) < 2**31:  # images: one launch, no float32 scratch (4 launches: ~1.3 ms)
        it, tt = upload_tables(batch, itab, taps.reshape(n, -1))
        r1 = "r1_" if (itab[:, 10:20:3] == 1).all() else ""  # every window 3 taps: the unrolled kernel
        kernel = cuda.load_kernel("laplacian", f"lap2d_{r1}{names[INPUT]}_{names[OUTPUT]}")
        kernel(grid, block, (it, tt, np.int32(kmax)))
        return [TensorListGPU.from_flat(buf, offsets, shapes.copy(), x.layout(), x.source_info())]
    scratch = []  # float32, one element per input element
    for col in {1: (), 2: (SCRATCH_A, PARTIAL_SUM), 3: (SCRATCH_A, SCRATCH_B, PARTIAL_SUM)}[axes]:
        scratch.append(cp.empty(total, cp.float32))
        itab[:, col] = scratch[-1].data.ptr + offsets * 4
    it, tt = upload_tables(batch, itab, taps.reshape(n, -1))
    for q, src, dst, add in pass_plan(axes):
        kernel = f"lap_pass_{names.get(src, 'f32')}_{names.get(dst, 'f32')}"
        cuda.load_kernel("laplacian", kernel)(
            grid, block, (it, tt, np.int32(axes * axes), np.int32(kmax), np.int32(q), np.int32(src), np.int32(dst),
                          np.int32(add)))
    # the scratches go back to the pool now: reuse is ordered after these launches on this stream
    return [TensorListGPU.from_flat(buf, offsets, shapes.copy(), x.layout(), x.source_info())]
