"""GPU ``slice``, and the batched window copy it shares with the GPU ``pad``.

Both operators copy a window of each sample into an output of some shape and fill where the
window leaves the sample. The host works out every sample's window with the CPU operator's own
code (``Slice.box`` and ``box_window`` for slice, ``Pad.output_shapes`` for pad), so boxes,
rounding and errors are the CPU's; then one launch of ``kernels/window_copy.cu`` copies the whole
batch into one flat output buffer.

What the kernel does not take goes through the host fallback: elements of a size other than
1, 2, 4 or 8 bytes, and samples whose window still needs more than six dimensions after
neighbouring dimensions are merged. Slice's anchor and shape inputs are a few numbers per sample;
when they live on the GPU they are downloaded (after waiting for the stream), not the images.
"""

from __future__ import annotations

import numpy as np

from stoker.operators.gpu_registry import (
    flat_offsets,
    grid_for,
    host_fallback,
    per_sample,
    register_gpu,
    upload_table,
)
from stoker.operators.image.slice import box_fill, box_window

# Must match WC_MAXD / WC_COLS in kernels/window_copy.cu.
MAX_DIMS = 6
TABLE_COLS = 32


def coalesce_dims(out_shape, in_shape, strides, start, keep: int | None = None) -> list[tuple]:
    """The window as few dimensions as possible: ``(out extent, in extent, in stride, offset,
    holds_keep)`` per dimension, outermost first.

    A dimension the window leaves whole (offset 0, same extent in and out) merges with the one
    outside it when the input's strides allow: the pair is then one dimension whose index is the
    flattened pair, which both saves the kernel a division and lets samples of more dims through.
    Dimensions of extent 1 everywhere are dropped. ``keep`` (the channel axis of per-channel fill
    values) is never merged, so the kernel still sees its coordinate. Assumes no output extent is 0
    (such samples have nothing to copy).
    """
    dims: list[tuple] = []  # innermost first while building
    for ax in reversed(range(len(out_shape))):
        o, i, st, off = int(out_shape[ax]), int(in_shape[ax]), int(strides[ax]), int(start[ax])
        if o == 1 and i == 1 and off == 0:
            continue  # always element 0 of this axis (a kept axis of extent 1 has one fill value)
        k = ax == keep
        if dims and not k:
            go, gi, gs, goff, gk = dims[-1]
            # An input extent of 1 makes the stride irrelevant: only index 0 is ever read.
            if not gk and goff == 0 and go == gi and (i == 1 or st == gs * gi):
                dims[-1] = (o * go, i * gi, gs, off * go, False)
                continue
        dims.append((o, i, st, off, k))
    return dims[::-1]


def window_rows(samples, windows, dtype):
    """What ``kernels/window_copy.cu`` needs for a batch: ``(table, fill_bits, sizes, out_shapes)``
    -- the per-sample table (n, TABLE_COLS) int64 still without output pointers (column 1), the
    fill values of all samples as raw bits, each output's element count and the output shapes
    (n, ndim). None when a sample's window needs more than MAX_DIMS dimensions or a stride is not
    a whole number of elements.

    ``windows[i]`` is ``(out_shape, start, fill)``: output element ``j`` is sample element
    ``j + start`` where that lies inside the sample, else ``fill`` (None when the window lies
    inside; else the fill values, already cast to the samples' ``dtype``: 0D, or one per channel
    along one axis).
    """
    dtype = np.dtype(dtype)
    itemsize = dtype.itemsize
    n = len(samples)
    ndim = samples[0].ndim if n else 0
    out_shapes = np.asarray([w[0] for w in windows], np.int64).reshape(n, ndim)
    sizes = np.prod(out_shapes, axis=1, dtype=np.int64)
    rows = np.zeros((n, TABLE_COLS), np.int64)
    rows[:, 6:6 + MAX_DIMS] = 1  # unused dims: extent 1 (the kernel does not read them anyway)
    rows[:, 12:12 + MAX_DIMS] = 1
    rows[:, 5] = -1
    fills, nfill = [], 0
    for r, s, (shape, start, fill), size in zip(rows, samples, windows, sizes):
        if size == 0:
            continue  # no output element: the row's count stays 0 and the kernel skips it
        if any(st % itemsize for st in s.strides):
            return None
        keep = None
        if fill is not None:
            fill = np.asarray(fill, dtype)
            if fill.size > 1:
                keep = int(np.argmax(fill.shape))
            r[4] = nfill
            fills.append(np.ascontiguousarray(fill).reshape(-1))
            nfill += fill.size
        dims = coalesce_dims(shape, s.shape, [st // itemsize for st in s.strides], start, keep)
        if len(dims) > MAX_DIMS:
            return None
        nd = len(dims)
        r[0], r[2], r[3] = s.data.ptr, size, nd
        for j, (o, i, st, off, k) in enumerate(dims):
            d = MAX_DIMS - nd + j  # right-aligned: the kernel walks dims innermost first
            r[6 + d], r[12 + d], r[18 + d], r[24 + d] = o, i, st, off
            if k:
                r[5] = d
    raw = np.dtype(f"u{itemsize}")
    fill_bits = (np.concatenate([f.view(raw) for f in fills]) if fills else np.zeros(1, raw))
    return rows, fill_bits, sizes, out_shapes


def copy_windows(x, windows, batch, dtype=None):
    """The batch ``x`` (TensorListGPU) cut to ``windows`` (see ``window_rows``) in one kernel
    launch, as one flat TensorListGPU with ``x``'s layout; converted to ``dtype`` when given (the
    CPU operators' cast). None when the kernel cannot take the batch (the caller falls back)."""
    from stoker.backend import cuda
    from stoker.operators.tensor.gpu_cast import cast_array
    from stoker.tensors_gpu import TensorListGPU

    cp = cuda._cupy()
    samples = x.samples()
    dt = np.dtype(samples[0].dtype)
    if dt.itemsize not in (1, 2, 4, 8):
        return None
    made = window_rows(samples, windows, dt)
    if made is None:
        return None
    rows, fill_bits, sizes, out_shapes = made
    offsets = flat_offsets(sizes)
    buf = cp.empty(max(int(sizes.sum()), 1), dt)
    rows[:, 1] = buf.data.ptr + offsets * dt.itemsize
    if sizes.max() > 0:
        grid, block = grid_for(int(sizes.max()), len(samples))
        kernel = cuda.load_kernel("window_copy", f"window_copy_{dt.itemsize}")
        kernel(grid, block, (upload_table(rows, batch), upload_table(fill_bits, batch)))
    if dtype is not None and np.dtype(dtype) != dt:
        buf = cast_array(buf, dtype)  # elementwise, so the flat buffer converts as the samples would
    return TensorListGPU.from_flat(buf, offsets, out_shapes, x.layout(), x.source_info())


def host_samples(t, batch) -> list:
    """The samples of an auxiliary input (anchors, shapes) as host arrays: a GPU batch is
    waited for on the batch's stream and downloaded (a few numbers per sample)."""
    from stoker.tensors_gpu import TensorListGPU

    if isinstance(t, TensorListGPU):
        if batch.stream is not None:
            batch.stream.synchronize()
        t = t.as_cpu()
    return list(t.samples())


@register_gpu("slice")
def gpu_slice(op, batch, inputs, arg_inputs):
    """``fn.slice`` on GPU batches: boxes from arguments or from anchor/shape inputs (host or
    device), every out_of_bounds_policy, fill_values one or per channel, optional dtype."""
    from stoker.tensors_gpu import TensorListGPU

    x = inputs[0]
    if not isinstance(x, TensorListGPU):
        return host_fallback(op, batch, inputs, arg_inputs)
    if len(x) == 0:
        return [TensorListGPU([], x.layout(), [])]
    samples = x.samples()
    layout = x.layout()
    box_inputs = [host_samples(t, batch) for t in inputs[1:]]
    policy = op.args["out_of_bounds_policy"]

    def window(i):
        s = samples[i]
        axes, begin, end = op.box(s.shape, [b[i] for b in box_inputs], op.sample_args(arg_inputs, i), layout)
        shape, start, padded = box_window(s.shape, axes, begin, end, policy, "slice")
        fill = None
        if padded:  # only for samples the CPU fills too: its errors must match
            fill = box_fill(op.args["fill_values"], s, shape, layout, "slice")
        return shape, start, fill

    out = copy_windows(x, per_sample(op, batch, len(x), window), batch, op.dtype)
    if out is None:
        return host_fallback(op, batch, inputs, arg_inputs)
    return [out]
