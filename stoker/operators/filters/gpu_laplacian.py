"""GPU ``laplacian``: each sample's windows come from the CPU operator (``Laplacian.windows``:
per-sample window sizes, smoothing sizes and scales, the same float32 coefficients), and every
partial derivative runs as one 1-D pass per spatial axis, each pass one launch over the batch
(``kernels/laplacian.cu``), summed in float32 in the CPU's order, then rounded (half up) and
saturated to the output type. Samples of any layout with 1 to 3 spatial axes (HW, HWC, CHW,
DHWC, FHWC ...; frames and channels are never filtered across) in uint8, uint16, int16 or
float32.

Integer inputs give the CPU's results exactly while the sums stay exact in float32 (integer
scales and sums below 2**24: for uint8, 2-D windows up to 7 and 3-D up to 5); otherwise, and for
float inputs, each window's taps are summed in another order than OpenCV's and the results agree
within float32 rounding. Per-frame arguments
(fn.per_frame), other types, empty samples and more than 3 spatial axes take the host fallback."""

from __future__ import annotations

import numpy as np

from stoker.operators.color._common import spatial_layout
from stoker.operators.gpu_registry import (
    contiguous_samples,
    flat_offsets,
    grid_for,
    host_fallback,
    per_sample,
    register_gpu,
    upload_table,
)
from stoker.operators.per_frame import FrameArray

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
    return any(isinstance(v, FrameArray) for vals in arg_inputs.values() for v in vals)


@register_gpu("laplacian")
def gpu_laplacian(op, batch, inputs, arg_inputs):
    """``fn.laplacian`` on GPU batches."""
    from stoker.backend import cuda
    from stoker.tensors_gpu import TensorListGPU

    x = inputs[0]
    n = len(x)
    if n == 0 or _has_frame_values(arg_inputs):
        return host_fallback(op, batch, inputs, arg_inputs)
    in_type = np.dtype(x.samples()[0].dtype)
    out_type = np.dtype(op.args.get("dtype") or in_type)
    shapes = [tuple(int(d) for d in s) for s in x.shape()]
    layout = x.layout() or ""
    spatial, _ = spatial_layout(layout, x.ndim)
    if (in_type not in _SUFFIX or out_type not in _SUFFIX or not 1 <= len(spatial) <= 3
            or any(0 in s for s in shapes)):
        return host_fallback(op, batch, inputs, arg_inputs)
    plans = per_sample(op, batch, n, lambda i: op.windows(op.sample_args(arg_inputs, i), layout, shapes[i]))
    kmax = max(len(k) for _, _, windows in plans for kernels in windows for k in kernels)
    itab, taps = laplacian_tables(shapes, plans, kmax)
    cp = cuda._cupy()
    x = contiguous_samples(x)
    ptrs, _, _ = x.geometry()
    sizes = itab[:, COUNT]
    offsets = flat_offsets(sizes)
    total = int(sizes.sum())
    axes = len(spatial)
    buf = cp.empty(total, out_type)
    itab[:, INPUT] = ptrs
    itab[:, OUTPUT] = buf.data.ptr + offsets * out_type.itemsize
    scratch = []  # float32, one element per input element
    for col in {1: (), 2: (SCRATCH_A, PARTIAL_SUM), 3: (SCRATCH_A, SCRATCH_B, PARTIAL_SUM)}[axes]:
        scratch.append(cp.empty(total, cp.float32))
        itab[:, col] = scratch[-1].data.ptr + offsets * 4
    it, tt = upload_table(itab, batch), upload_table(taps.reshape(n, -1), batch)
    grid, block = grid_for(int(sizes.max()), n)
    names = {INPUT: _SUFFIX[in_type], OUTPUT: _SUFFIX[out_type]}
    for q, src, dst, add in pass_plan(axes):
        kernel = f"lap_pass_{names.get(src, 'f32')}_{names.get(dst, 'f32')}"
        cuda.load_kernel("laplacian", kernel)(
            grid, block, (it, tt, np.int32(axes * axes), np.int32(kmax), np.int32(q), np.int32(src), np.int32(dst),
                          np.int32(add)))
    # the scratches go back to the pool now: reuse is ordered after these launches on this stream
    return [TensorListGPU.from_flat(buf, offsets, np.asarray(shapes, np.int64), x.layout(), x.source_info())]
