"""GPU ``slice``, and the batched window copy it shares with the GPU ``pad``.

Both operators copy a window of each sample into an output of some shape and fill where the
window leaves the sample. The host works out the windows of the whole batch with NumPy
(``Slice.boxes`` and ``box_windows`` for slice, ``Pad.output_shapes_batch`` for pad), the numbers
of the CPU operator's per-sample code (``Slice.box``, ``box_window``, ``Pad.output_shapes``), which
still runs to name a sample whose arguments are refused; then one launch of
``kernels/window_copy.cu`` copies the whole batch into one flat output buffer. Its table is built
from arrays too (:func:`window_table`, the table :func:`window_rows` builds from per-sample views):
no Python step per sample on the host (issue 16). The GPU ``transpose`` uses the same copy.

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
    register_gpu,
    upload_tables,
)
from stoker.operators.image.geometry_batch import plan_rows
from stoker.operators.image.slice import box_fill, box_fill_rows, box_window, box_windows

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


def sample_placement(x):
    """``(pointers, shapes, byte strides)`` of every sample of ``x`` (a non-empty TensorListGPU)
    as int64 arrays (N,), (N, ndim), (N, ndim): read from the batch's one buffer when it has one
    (dense or flat), from the samples only when the batch is a list of arrays (per-sample views
    exist then anyway). Why not ``geometry()``: it gives the row stride only, and the window copy
    takes any strides (strided views, transposes)."""
    n = len(x)
    d = x.dense()
    if d is not None:
        ptrs = d.data.ptr + np.arange(n, dtype=np.int64) * d.strides[0]
        shapes = np.tile(np.asarray(d.shape[1:], np.int64), (n, 1))
        return ptrs, shapes, np.tile(np.asarray(d.strides[1:], np.int64), (n, 1))
    parts = x.flat_parts()
    if parts is not None:
        buf, offsets, shapes = parts
        shapes = np.asarray(shapes, np.int64).reshape(n, -1)
        return buf.data.ptr + offsets * buf.itemsize, shapes, c_strides(shapes) * buf.itemsize
    samples = x.samples()
    ptrs = np.fromiter((s.data.ptr for s in samples), np.int64, n)
    shapes = np.asarray([s.shape for s in samples], np.int64).reshape(n, -1)
    return ptrs, shapes, np.asarray([s.strides for s in samples], np.int64).reshape(n, -1)


def c_strides(shapes) -> np.ndarray:
    """(N, ndim) C-order strides in elements of samples of ``shapes`` (N, ndim)."""
    shapes = np.asarray(shapes, np.int64)
    out = np.ones_like(shapes)
    if shapes.shape[1] > 1:
        out[:, :-1] = np.cumprod(shapes[:, :0:-1], axis=1)[:, ::-1]
    return out


def coalesce_batch(out_shapes, in_shapes, strides, starts, keep):
    """:func:`coalesce_dims` for every sample at once: ``(dims, count)`` where ``dims`` (N, ndim,
    5) holds each sample's dims innermost first (out extent, in extent, in stride, offset, holds
    keep) and ``count`` (N,) how many of them are used. ``keep`` (N,): each sample's kept axis,
    -1 for none. The axes are walked as coalesce_dims walks them (a loop over the few axes, each
    step over the whole batch), so the dims are the same."""
    n, ndim = out_shapes.shape
    dims = np.zeros((n, max(ndim, 1), 5), np.int64)
    count = np.zeros(n, np.int64)
    rows = np.arange(n)
    for ax in reversed(range(ndim)):
        o, i, st, off = out_shapes[:, ax], in_shapes[:, ax], strides[:, ax], starts[:, ax]
        k = keep == ax
        skip = (o == 1) & (i == 1) & (off == 0)
        top = dims[rows, np.maximum(count - 1, 0)]  # the dim just outside this one, if any
        go, gi, gs, goff, gk = top.T
        merge = (~skip & ~k & (count > 0) & (gk == 0) & (goff == 0) & (go == gi)
                 & ((i == 1) | (st == gs * gi)))
        m = rows[merge]
        dims[m, count[merge] - 1] = np.stack([o * go, i * gi, gs, off * go, np.zeros_like(o)], 1)[merge]
        push = ~skip & ~merge
        p = rows[push]
        dims[p, count[push]] = np.stack([o, i, st, off, k.astype(np.int64)], 1)[push]
        count += push
    return dims, count


def window_table(ptrs, in_shapes, in_strides, out_shapes, starts, dtype, fills=None, padded=None, keep=None):
    """:func:`window_rows` for the whole batch from arrays, with no step per sample:
    ``(table, fill_bits, sizes)`` or None where the kernel cannot take the batch.

    ``ptrs`` (N,), ``in_shapes``, ``in_strides`` (bytes), ``out_shapes``, ``starts``: (N, ndim)
    int64. ``fills`` (N, k) or (1, k): each sample's fill values, already in ``dtype``;
    ``padded`` (N,) bool: which samples take them (the others lie inside their sample: no fill);
    ``keep``: the axis the k > 1 fill values run along. The table is the one window_rows builds
    from per-sample views and windows (tests hold them equal)."""
    dtype = np.dtype(dtype)
    item = dtype.itemsize
    in_shapes = np.asarray(in_shapes, np.int64)
    n, ndim = in_shapes.shape
    out_shapes = np.asarray(out_shapes, np.int64).reshape(n, ndim)
    starts = np.asarray(starts, np.int64).reshape(n, ndim)
    in_strides = np.asarray(in_strides, np.int64).reshape(n, ndim)
    sizes = np.prod(out_shapes, axis=1, dtype=np.int64)
    live = sizes != 0  # a sample with no output element keeps the default row (count 0: skipped)
    if (in_strides[live] % item != 0).any():
        return None
    padded = np.zeros(n, bool) if padded is None or fills is None else np.asarray(padded, bool) & live
    k = 0 if fills is None else int(np.shape(fills)[-1])
    # as window_rows: only a sample that takes several fill values keeps their axis unmerged
    keep_of = np.full(n, -1, np.int64) if keep is None or k <= 1 else np.where(padded, int(keep), -1)
    dims, count = coalesce_batch(out_shapes, in_shapes, in_strides // item, starts, keep_of)
    if (count[live] > MAX_DIMS).any():
        return None
    rows = np.zeros((n, TABLE_COLS), np.int64)
    rows[:, 6:6 + MAX_DIMS] = 1  # unused dims: extent 1 (the kernel does not read them anyway)
    rows[:, 12:12 + MAX_DIMS] = 1
    rows[:, 5] = -1
    rows[live, 0] = np.asarray(ptrs, np.int64)[live]
    rows[:, 2] = sizes
    rows[live, 3] = count[live]
    for s in range(min(dims.shape[1], MAX_DIMS)):  # stack entry s (innermost first) -> dim 5 - s
        m = live & (s < count)
        d = MAX_DIMS - 1 - s
        for col, j in ((6, 0), (12, 1), (18, 2), (24, 3)):
            rows[m, col + d] = dims[m, s, j]
        rows[m & (dims[:, s, 4] != 0), 5] = d
    raw = np.dtype(f"u{item}")
    if padded.any():
        per = np.where(padded, k, 0)
        rows[padded, 4] = flat_offsets(per)[padded]
        values = np.broadcast_to(np.asarray(fills, dtype).reshape(-1, k), (n, k))
        fill_bits = np.ascontiguousarray(values[padded]).reshape(-1).view(raw)
    else:
        fill_bits = np.zeros(1, raw)
    return rows, fill_bits, sizes


def copy_window_batch(x, out_shapes, starts, batch, dtype=None, fills=None, padded=None, keep=None,
                      placement=None, layout=None):
    """The batch ``x`` (a non-empty TensorListGPU) cut to windows given as arrays (see
    :func:`window_table`) in one kernel launch, as one flat TensorListGPU with ``x``'s layout,
    converted to ``dtype`` when given. ``placement``: ``(pointers, input shapes, byte strides)``
    to read instead of :func:`sample_placement` (a transpose reads the input's axes permuted);
    ``layout``: the output's (default: the input's). None when the kernel cannot take the batch
    (the caller falls back)."""
    from stoker.backend import cuda
    from stoker.operators.tensor.gpu_cast import cast_array
    from stoker.tensors_gpu import TensorListGPU

    dt = x.element_dtype()
    if dt.itemsize not in (1, 2, 4, 8):
        return None
    ptrs, in_shapes, strides = sample_placement(x) if placement is None else placement
    made = window_table(ptrs, in_shapes, strides, out_shapes, starts, dt, fills, padded, keep)
    if made is None:
        return None
    rows, fill_bits, sizes = made
    cp = cuda.cupy()
    offsets = flat_offsets(sizes)
    buf = cp.empty(max(int(sizes.sum()), 1), dt)
    rows[:, 1] = buf.data.ptr + offsets * dt.itemsize
    if sizes.max() > 0:
        grid, block = grid_for(int(sizes.max()), len(sizes))
        kernel = cuda.load_kernel("window_copy", f"window_copy_{dt.itemsize}")
        kernel(grid, block, tuple(upload_tables(batch, rows, fill_bits)))
    if dtype is not None and np.dtype(dtype) != dt:
        buf = cast_array(buf, dtype)  # elementwise, so the flat buffer converts as the samples would
    shapes = np.asarray(out_shapes, np.int64).reshape(len(sizes), -1)
    return TensorListGPU.from_flat(buf, offsets, shapes, x.layout() if layout is None else layout, x.source_info())


def copy_windows(x, windows, batch, dtype=None):
    """The batch ``x`` (TensorListGPU) cut to ``windows`` (per-sample tuples, see ``window_rows``)
    in one kernel launch, as one flat TensorListGPU with ``x``'s layout; converted to ``dtype``
    when given (the CPU operators' cast). None when the kernel cannot take the batch (the caller
    falls back). The operators call :func:`copy_window_batch` with arrays; this is its form for
    a list of windows (the table is the same)."""
    from stoker.backend import cuda
    from stoker.operators.tensor.gpu_cast import cast_array
    from stoker.tensors_gpu import TensorListGPU

    n = len(windows)
    if n == 0:
        return TensorListGPU([], x.layout(), [])
    dt = x.element_dtype()
    ndim = x.ndim
    out_shapes = np.asarray([w[0] for w in windows], np.int64).reshape(n, ndim)
    starts = np.asarray([w[1] for w in windows], np.int64).reshape(n, ndim)
    given = [np.asarray(w[2], dt) for w in windows if w[2] is not None]
    if not given:
        return copy_window_batch(x, out_shapes, starts, batch, dtype)
    keeps = {int(np.argmax(f.shape)) if f.size > 1 else None for f in given}
    if len({f.size for f in given}) == 1 and len(keeps) == 1:
        padded = np.array([w[2] is not None for w in windows])
        fills = np.zeros((n, given[0].size), dt)
        fills[padded] = np.stack([f.reshape(-1) for f in given])
        return copy_window_batch(x, out_shapes, starts, batch, dtype, fills, padded, keeps.pop())
    # samples with fill values of different sizes: the table sample by sample
    if dt.itemsize not in (1, 2, 4, 8):
        return None
    made = window_rows(x.samples(), windows, dt)
    if made is None:
        return None
    rows, fill_bits, sizes, shapes = made
    cp = cuda.cupy()
    offsets = flat_offsets(sizes)
    buf = cp.empty(max(int(sizes.sum()), 1), dt)
    rows[:, 1] = buf.data.ptr + offsets * dt.itemsize
    if sizes.max() > 0:
        grid, block = grid_for(int(sizes.max()), n)
        kernel = cuda.load_kernel("window_copy", f"window_copy_{dt.itemsize}")
        kernel(grid, block, tuple(upload_tables(batch, rows, fill_bits)))
    if dtype is not None and np.dtype(dtype) != dt:
        buf = cast_array(buf, dtype)
    return TensorListGPU.from_flat(buf, offsets, shapes, x.layout(), x.source_info())


def host_samples(t, batch) -> list:
    """The samples of an auxiliary input (anchors, shapes) as host arrays: a GPU batch is
    waited for on the batch's stream and downloaded (a few numbers per sample)."""
    from stoker.tensors_gpu import TensorListGPU

    if isinstance(t, TensorListGPU):
        if batch.stream is not None:
            batch.stream.synchronize()
        t = t.as_cpu()
    return list(t.samples())


def host_values(t, batch):
    """The samples of an auxiliary input (anchors, shapes) on the host, without a step per
    sample where the batch allows: a GPU batch whose samples share one shape in one buffer comes
    down as one (N, ...) array (each row a sample), any other as :func:`host_samples` gives it."""
    from stoker.tensors_gpu import TensorListGPU

    if isinstance(t, TensorListGPU) and len(t):
        parts = t.flat_parts()
        if parts is not None:
            buf, offsets, shapes = parts
            per = int(np.prod(shapes[0], dtype=np.int64))
            if (shapes == shapes[0]).all() and np.array_equal(offsets, np.arange(len(t)) * per):
                if batch.stream is not None:
                    batch.stream.synchronize()
                return buf[:per * len(t)].get().reshape(len(t), *shapes[0].tolist())
    return host_samples(t, batch)


def slice_windows(op, shapes, box_inputs, arg_inputs, layout: str, dtype) -> tuple[np.ndarray, ...]:
    """``(output shapes, starts, padded)`` of every sample of ``shapes`` (N, ndim) at once: what
    :func:`slice_window_one` gives sample by sample (``Slice.boxes``, ``box_windows``, and the
    fill values' check for the padded samples)."""
    axes, begin, end = op.boxes(shapes, box_inputs, arg_inputs, layout)
    out, start, padded = box_windows(shapes, axes, begin, end, op.args["out_of_bounds_policy"], "slice")
    box_fill_rows(op.args["fill_values"], shapes, out, padded, layout, dtype, "slice")  # raises as box_fill
    return out, start, padded


def slice_window_one(op, shape, box_inputs, arg_inputs, i: int, layout: str, dtype) -> tuple:
    """Sample ``i``'s ``(output shape, start, padded)`` by the CPU operator's per-sample rule
    (``Slice.box``, ``box_window``, ``box_fill``): raises that sample's error."""
    shape = tuple(int(e) for e in shape)
    axes, begin, end = op.box(shape, [b[i] for b in box_inputs], op.sample_args(arg_inputs, i), layout)
    out, start, padded = box_window(shape, axes, begin, end, op.args["out_of_bounds_policy"], "slice")
    if padded:  # only for samples the CPU fills too: its errors must match
        # box_fill reads only the shape, ndim and dtype of the sample: a zero-strided stand-in will do
        box_fill(op.args["fill_values"], np.broadcast_to(np.zeros((), dtype), shape), out, layout, "slice")
    return tuple(out), tuple(start), padded


@register_gpu("slice")
def gpu_slice(op, batch, inputs, arg_inputs):
    """``fn.slice`` on GPU batches: boxes from arguments or from anchor/shape inputs (host or
    device), every out_of_bounds_policy, fill_values one or per channel, optional dtype. The
    windows of the whole batch come from NumPy (:func:`slice_windows`); the per-sample rule
    runs only to name a failing sample or for values NumPy cannot take at once."""
    from stoker.tensors_gpu import TensorListGPU

    x = inputs[0]
    if not isinstance(x, TensorListGPU):
        return host_fallback(op, batch, inputs, arg_inputs)
    n = len(x)
    if n == 0:
        return [TensorListGPU([], x.layout(), [])]
    layout = x.layout()
    dtype = x.element_dtype()
    placement = sample_placement(x)
    shapes = placement[1]
    box_inputs = [host_values(t, batch) for t in inputs[1:]]
    out_shapes, starts, padded = plan_rows(
        op, batch, n, lambda: slice_windows(op, shapes, box_inputs, arg_inputs, layout, dtype),
        lambda i: slice_window_one(op, shapes[i], box_inputs, arg_inputs, i, layout, dtype))
    fills, keep = box_fill_rows(op.args["fill_values"], shapes, out_shapes, padded, layout, dtype, "slice")
    out = copy_window_batch(x, out_shapes, starts, batch, op.dtype, fills, padded, keep, placement)
    if out is None:
        return host_fallback(op, batch, inputs, arg_inputs)
    return [out]
