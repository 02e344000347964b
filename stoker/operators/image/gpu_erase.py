"""GPU ``erase``: every sample's boxes filled in one kernel launch per batch (``kernels/erase.cu``).

The boxes and fill values come from the CPU operator's own ``Erase.boxes`` (normalized and
centred anchors, axes and axis_names, per-channel fills, clipping, and the same errors, raised
for the failing sample as the CPU path raises them). The device only tests each element against
its sample's boxes. Any element type runs on the kernel (it moves bit patterns, by element size);
samples of more than ``MAX_DIMS`` dimensions take the host fallback.
"""

from __future__ import annotations

import numpy as np

from stoker.operators.gpu_registry import (
    contiguous_samples,
    flat_output,
    grid_for,
    host_fallback,
    per_sample,
    register_gpu,
    upload_table,
)

MAX_DIMS = 6  # as in kernels/erase.cu
_ITAB = 8 + MAX_DIMS
_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}  # element size -> kernel's type


def erase_tables(shapes, dtype, plans):
    """The kernel's host tables for samples of ``shapes`` (all of one ndim <= MAX_DIMS) and
    ``dtype``, erased by ``plans[i] = (fill, boxes)`` (``Erase.boxes``).

    Returns ``(itab, btab, fill)``: ``itab`` (n, 8 + MAX_DIMS) int64 with the pointers left 0
    (the caller sets columns 0 and 1), ``btab`` (boxes, 2 * MAX_DIMS) int64, ``fill`` the fill
    values in ``dtype``, back to back. Boxes that hold no element are left out."""
    n = len(shapes)
    itab = np.zeros((n, _ITAB), np.int64)
    boxes, fills = [], []
    n_fill = 0
    for i, (shape, (fill, sample_boxes)) in enumerate(zip(shapes, plans)):
        ndim = len(shape)
        itab[i, 2] = int(np.prod(shape, dtype=np.int64))
        itab[i, 3] = ndim
        itab[i, 8:8 + ndim] = shape
        kept = [b for b in sample_boxes if all(lo < hi for lo, hi in b)]
        itab[i, 4] = len(boxes)
        itab[i, 5] = len(kept)
        for b in kept:
            row = np.zeros(2 * MAX_DIMS, np.int64)
            row[:2 * ndim] = np.asarray(b, np.int64).reshape(-1)
            boxes.append(row)
        itab[i, 6] = n_fill
        itab[i, 7] = -1
        if kept:
            values = np.asarray(fill, dtype)
            if values.size > 1:  # one value per channel: fill_for put them along the channel axis
                itab[i, 7] = int(np.argmax(values.shape))
            fills.append(values.reshape(-1))
            n_fill += values.size
    btab = np.stack(boxes) if boxes else np.zeros((1, 2 * MAX_DIMS), np.int64)
    fill = np.concatenate(fills) if fills else np.zeros(1, dtype)
    return itab, btab, fill


def _takes(x) -> bool:
    """Whether the kernel takes this batch (else the host fallback runs)."""
    shapes = x.shape()
    return (len(x) > 0 and len(shapes[0]) <= MAX_DIMS
            and np.dtype(x.samples()[0].dtype).itemsize in _UINT)


@register_gpu("erase")
def gpu_erase(op, batch, inputs, arg_inputs):
    """``fn.erase`` on GPU batches: one flat output buffer, one launch."""
    from stoker.backend import cuda

    x = inputs[0]
    if not _takes(x):
        return host_fallback(op, batch, inputs, arg_inputs)
    x = contiguous_samples(x)
    samples = x.samples()
    n = len(samples)
    dtype = np.dtype(samples[0].dtype)
    layout = x.layout() or ""
    shapes = [tuple(int(e) for e in s.shape) for s in samples]

    def plan(i):
        args = {**op.sample_args(arg_inputs, i), "__layout": layout}
        return op.boxes(shapes[i], dtype, args)

    itab, btab, fill = erase_tables(shapes, dtype, per_sample(op, batch, n, plan))
    sizes = itab[:, 2]
    buf, offsets, out = flat_output(shapes, sizes, dtype, layout, x.source_info())
    if not sizes.any():
        return [out]
    itab[:, 0] = np.fromiter((s.data.ptr for s in samples), np.int64, n)
    itab[:, 1] = buf.data.ptr + offsets * dtype.itemsize
    grid, block = grid_for(int(sizes.max()), n)
    kernel = cuda.load_kernel("erase", f"erase_{dtype.itemsize}")
    kernel(grid, block, (upload_table(itab, batch), upload_table(btab, batch),
                         upload_table(fill.view(_UINT[dtype.itemsize]), batch)))
    return [out]
