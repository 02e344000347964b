"""GPU ``erase``: every sample's boxes filled in one kernel launch per batch (``kernels/erase.cu``).

The boxes and fill values come from the CPU operator's ``Erase.boxes_batch``, planned for the
whole batch at once with NumPy (the numbers of the per-sample ``Erase.boxes``: normalized and
centred anchors, axes and axis_names, per-channel fills, clipping), so the host takes no step per
sample (issue 16); a bad argument reruns ``Erase.boxes`` sample by sample, so the error names the
failing sample as the CPU path does. Per-sample arguments whose samples hold different numbers
of values (a different number of boxes per sample) are planned sample by sample. The device
only tests each element against its sample's boxes. Any element type runs on the kernel (it
moves bit patterns, by element size); samples of more than ``MAX_DIMS`` dimensions take the host
fallback.
"""

from __future__ import annotations

import numpy as np

from stoker.operators.gpu_registry import (
    contiguous_samples,
    flat_output,
    grid_for,
    host_fallback,
    per_sample,
    plan_batch,
    register_gpu,
    upload_tables,
)
from stoker.operators.image.erase import F32

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


def erase_tables_batch(shapes: np.ndarray, dtype, fills, channel: int, lo: np.ndarray, hi: np.ndarray):
    """:func:`erase_tables` from the batch's plan (``Erase.boxes_batch``: ``fills`` (n, f) or None,
    ``channel``, boxes ``lo`` / ``hi`` (n, boxes, ndim)), the same tables, built with NumPy."""
    n, ndim = shapes.shape
    itab = np.zeros((n, _ITAB), np.int64)
    itab[:, 2] = np.prod(shapes, axis=1, dtype=np.int64)
    itab[:, 3] = ndim
    itab[:, 8:8 + ndim] = shapes
    kept = (lo < hi).all(axis=2)  # boxes that hold an element
    count = kept.sum(axis=1)
    itab[:, 4] = np.cumsum(count) - count  # first box: the kept boxes of the samples before
    itab[:, 5] = count
    rows = np.zeros((int(count.sum()), 2 * MAX_DIMS), np.int64)
    rows[:, :2 * ndim] = np.stack([lo[kept], hi[kept]], axis=-1).reshape(-1, 2 * ndim)  # start, stop per axis
    btab = rows if len(rows) else np.zeros((1, 2 * MAX_DIMS), np.int64)
    has = count > 0  # only samples with a box have their fill values in the table
    width = 0 if fills is None else fills.shape[1]
    itab[:, 6] = np.cumsum(has * width) - has * width
    itab[:, 7] = np.where(has & (width > 1), channel, -1)
    fill = fills[has].reshape(-1) if fills is not None and has.any() else np.zeros(1, dtype)
    return itab, btab, np.asarray(fill, dtype)


def _rows(op, arg_inputs, name: str, n: int, dtype, default):
    """Argument ``name`` for every sample as (n, k) ``dtype`` values (what ``Erase.boxes`` reads
    of each sample's value; a static value repeated), None when the samples hold different
    numbers of values, ValueError when they are not numbers."""
    if name not in arg_inputs:
        if dtype == np.float64:  # fill_value: boxes() reads it through a list of Python numbers
            v = np.asarray(np.asarray(op.args.get(name, default)).reshape(-1).tolist(), np.float64)
        else:  # anchor, shape: read directly
            v = np.asarray(op.args.get(name, default), dtype).reshape(-1)
        return np.broadcast_to(v, (n, v.size))
    values = arg_inputs[name]
    try:
        arr = np.asarray(values)
    except ValueError:  # samples of different sizes: sample by sample
        return None
    if arr.dtype.kind not in "biuf":
        raise ValueError(f"argument '{name}' takes numbers per sample, got {arr.dtype} values")
    return np.asarray(values, dtype).reshape(n, -1)  # each sample converted from its own type


def _batch_plan(op, shapes, dtype, layout, arg_inputs):
    """The batch's boxes and fills (``Erase.boxes_batch``), or None where the arguments' samples
    differ in size."""
    n = len(shapes)
    anchor = _rows(op, arg_inputs, "anchor", n, F32, [])
    extent = _rows(op, arg_inputs, "shape", n, F32, [])
    fill = _rows(op, arg_inputs, "fill_value", n, np.float64, [0.0])
    if anchor is None or extent is None or fill is None:
        return None
    return op.boxes_batch(shapes, dtype, layout, anchor, extent, fill)


def _takes(x, shapes, dtype) -> bool:
    """Whether the kernel takes this batch (else the host fallback runs)."""
    return len(x) > 0 and shapes.shape[1] <= MAX_DIMS and dtype.itemsize in _UINT


@register_gpu("erase")
def gpu_erase(op, batch, inputs, arg_inputs):
    """``fn.erase`` on GPU batches: one flat output buffer, one launch."""
    from stoker.backend import cuda

    x = inputs[0]
    dtype = x.element_dtype()
    if len(x) == 0 or not _takes(x, x.geometry()[2], dtype):
        return host_fallback(op, batch, inputs, arg_inputs)
    x = contiguous_samples(x)
    ptrs, _, shapes = x.geometry()
    n = len(ptrs)
    layout = x.layout() or ""

    def one(i):  # the CPU's per-sample rule
        args = {**op.sample_args(arg_inputs, i), "__layout": layout}
        return op.boxes(tuple(shapes[i].tolist()), dtype, args)

    planned = plan_batch(op, batch, n, lambda: _batch_plan(op, shapes, dtype, layout, arg_inputs), one)
    if planned is None:
        itab, btab, fill = erase_tables(shapes.tolist(), dtype, per_sample(op, batch, n, one))
    else:
        itab, btab, fill = erase_tables_batch(shapes, dtype, *planned)
    sizes = itab[:, 2]
    buf, offsets, out = flat_output(shapes, sizes, dtype, layout, x.source_info())
    if not sizes.any():
        return [out]
    itab[:, 0] = ptrs
    itab[:, 1] = buf.data.ptr + offsets * dtype.itemsize
    grid, block = grid_for(int(sizes.max()), n)
    kernel = cuda.load_kernel("erase", f"erase_{dtype.itemsize}")
    kernel(grid, block, tuple(upload_tables(batch, itab, btab, fill.view(_UINT[dtype.itemsize]))))
    return [out]
