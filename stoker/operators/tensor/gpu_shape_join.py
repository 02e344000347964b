"""GPU ``squeeze``, ``expand_dims``, ``reinterpret``, ``cast_like``, ``cat`` and ``stack``.

The first three only change how the bytes are seen. Each output sample is a view of the input's
device memory (no copy, no launch) with the shape, element type and layout the CPU operator
gives: the host works the shapes out with the CPU operator's own ``output_shape`` (errors
included, raised for the failing sample as the CPU path raises them) from the input's shapes,
never its data. A batch stored in one buffer stays one buffer: dense ``(N, ...)`` when the output
samples share a shape and lie back to back, else a flat batch (``TensorListGPU.from_flat``).
``reinterpret`` copies a sample only where the CPU copies too (a sample that is not C-contiguous)
or where the sample's address is not a multiple of the new element size: a view there would be a
misaligned pointer, which GPU kernels cannot read (NumPy on the host does not care).

``cast_like`` is the GPU ``cast``'s ``cast_array`` (rounding and saturation as the CPU's
``convert``), once over a dense or flat batch's buffer, else per sample.

``cat`` and ``stack`` write one new buffer per batch; shapes and axis come from the CPU
operator's ``plan_rows`` for the whole batch (errors from its per-sample ``plan``, naming the
sample). When every input holds samples of one shape, the output is dense and each
input is written with one strided copy for the whole batch. Otherwise every sample's pieces are
copied into views of one flat output buffer (one small copy per input and sample).

Host fallback: an input that is not a GPU batch, or inputs whose batches differ in length (the
CPU operator then raises or ignores the extra samples; the fallback does the same).
"""

from __future__ import annotations

import numpy as np

from stoker.operators.gpu_registry import (
    contiguous_samples,
    dense_view,
    flat_output,
    host_fallback,
    per_sample,
    plan_batch,
    register_gpu,
)


def _gpu_batches(inputs) -> bool:
    """Whether every input is a GPU batch and all have the same number of samples."""
    from stoker.tensors_gpu import TensorListGPU

    return all(isinstance(x, TensorListGPU) for x in inputs) and len({len(x) for x in inputs}) == 1


def _dtype(x) -> np.dtype:
    """The NumPy element type of a non-empty GPU batch."""
    d = x.dense()
    if d is not None:
        return np.dtype(d.dtype)
    parts = x.flat_parts()
    if parts is not None:
        return np.dtype(parts[0].dtype)
    return np.dtype(x.samples()[0].dtype)


def _keep_alive(x):
    # Views of x's memory must keep whatever owns it (a decoder's buffer) alive, as x does.
    return getattr(x, "_keep_alive", None)


def shape_table(x) -> np.ndarray:
    """The sample shapes of GPU batch ``x`` as one ``(N, ndim)`` int64 array, made without a
    Python step per sample for a dense or flat batch."""
    d = x.dense()
    if d is not None:
        return np.tile(np.asarray(d.shape[1:], np.int64), (len(x), 1))
    parts = x.flat_parts()
    if parts is not None:
        return np.asarray(parts[2], np.int64).reshape(len(x), -1)
    return np.asarray(x.shape(), np.int64).reshape(len(x), -1)


def _empty(layout: str):
    """An output batch of no samples."""
    from stoker.tensors_gpu import TensorListGPU

    return TensorListGPU([], layout, [])


def _check_rank(shapes) -> None:
    # A batch holds samples of one rank; the CPU's TensorListCPU refuses the same way.
    ndims = {len(s) for s in shapes}
    if len(ndims) > 1:
        raise ValueError(f"TensorListGPU: samples differ in number of dimensions {sorted(ndims)}")


def _assemble(buf, offsets, shapes, layout: str, source_info, keep_alive=None):
    """A batch of samples at element ``offsets`` of the 1-D device array ``buf`` with ``shapes``:
    a dense ``(N, ...)`` view when they share a shape and lie back to back, else a flat batch."""
    from stoker.tensors_gpu import TensorListGPU

    n = len(shapes)
    table = np.asarray(shapes, np.int64).reshape(n, len(shapes[0]))
    offsets = np.asarray(offsets, np.int64)
    per = int(np.prod(table[0]))
    if (table == table[0]).all() and np.array_equal(offsets, np.arange(n, dtype=np.int64) * per):
        return TensorListGPU(buf[:n * per].reshape((n, *table[0].tolist())), layout, source_info, keep_alive)
    return TensorListGPU.from_flat(buf, offsets, table, layout, source_info, keep_alive)


def reshaped_views(x, shapes, layout: str):
    """The samples of GPU batch ``x`` with new ``shapes`` of the same element counts, as views
    (squeeze and expand_dims only add or drop extents of 1, which any strides allow)."""
    from stoker.tensors_gpu import TensorListGPU

    _check_rank(shapes)
    n = len(x)
    d = x.dense()
    if d is not None and all(s == shapes[0] for s in shapes):
        return TensorListGPU(d.reshape((n, *shapes[0])), layout, x.source_info(), _keep_alive(x))
    parts = x.flat_parts()
    if parts is not None:
        return _assemble(parts[0], parts[1], shapes, layout, x.source_info(), _keep_alive(x))
    return TensorListGPU([s.reshape(shape) for s, shape in zip(x.samples(), shapes)], layout,
                         x.source_info(), _keep_alive(x))


def _retyped_buffer(parts, dtype):
    """``(buffer, offsets)``: the flat batch ``parts`` (buffer, element offsets, shapes) with its
    buffer viewed as ``dtype``; None where some sample would not start on a whole element of
    ``dtype`` (the caller then goes sample by sample). Every sample's byte count is a multiple of
    the new element size (``Reinterpret.output_shape`` checked it)."""
    buf, offsets, in_shapes = parts
    if not buf.flags.c_contiguous or buf.ndim != 1:
        return None
    item_in, item_out = buf.itemsize, dtype.itemsize
    if item_in == item_out:
        return buf.view(dtype), offsets
    starts = offsets * item_in  # in bytes
    nbytes = np.prod(in_shapes, axis=1, dtype=np.int64) * item_in
    used = nbytes > 0  # an empty sample's offset is never read
    if buf.data.ptr % item_out or (starts[used] % item_out).any():
        return None
    end = int((starts + nbytes)[used].max()) if used.any() else 0
    # Only up to the last sample's end, a whole number of new elements: the buffer may run on by
    # a part of one, which the view would refuse.
    view = buf[:end // item_in].view(dtype)
    return view, np.where(used, starts // item_out, 0)


def retyped_views(x, dtype, shapes, layout: str):
    """The bytes of GPU batch ``x``'s samples read as ``dtype`` with ``shapes`` (what
    ``Reinterpret.output_shape`` gave), as views where possible (see the module's docstring)."""
    from stoker.backend import cuda
    from stoker.tensors_gpu import TensorListGPU

    cp = cuda.cupy()
    _check_rank(shapes)
    dtype = np.dtype(dtype)
    parts = x.flat_parts()
    if parts is None and x.dense() is not None:  # a strided dense batch: copied, as the CPU copies it
        parts = TensorListGPU(cp.ascontiguousarray(x.dense())).flat_parts()
    if parts is not None:
        made = _retyped_buffer(parts, dtype)
        if made is not None:
            return _assemble(made[0], made[1], shapes, layout, x.source_info(), _keep_alive(x))
    out = []
    for s, shape in zip(x.samples(), shapes):
        if not s.flags.c_contiguous or s.data.ptr % dtype.itemsize:
            s = s.copy()  # C order, at an aligned address
        out.append(s.reshape(-1).view(dtype).reshape(shape))
    return TensorListGPU(out, layout, x.source_info(), _keep_alive(x))


@register_gpu("squeeze")
def gpu_squeeze(op, batch, inputs, arg_inputs):
    """``fn.squeeze`` on GPU batches: views with the extents of 1 removed."""
    x = inputs[0]
    if not _gpu_batches(inputs):
        return host_fallback(op, batch, inputs, arg_inputs)
    layout = op.output_layouts([x.layout()])[0]
    if len(x) == 0:
        return [_empty(layout)]
    in_shapes = x.shape()
    shapes = per_sample(op, batch, len(x),
                        lambda i: op.output_shape(in_shapes[i], op.sample_args(arg_inputs, i), x.layout()))
    return [reshaped_views(x, shapes, layout)]


@register_gpu("expand_dims")
def gpu_expand_dims(op, batch, inputs, arg_inputs):
    """``fn.expand_dims`` on GPU batches: views with extents of 1 inserted."""
    x = inputs[0]
    if not _gpu_batches(inputs):
        return host_fallback(op, batch, inputs, arg_inputs)
    layout = op.output_layouts([x.layout()])[0]
    if len(x) == 0:
        return [_empty(layout)]
    in_shapes = x.shape()
    return [reshaped_views(x, per_sample(op, batch, len(x), lambda i: op.output_shape(in_shapes[i])), layout)]


@register_gpu("reinterpret")
def gpu_reinterpret(op, batch, inputs, arg_inputs):
    """``fn.reinterpret`` on GPU batches: the same bytes viewed with another type and/or shape. The
    shape input, when given, is a few numbers per sample: downloaded (after the stream's work)."""
    from stoker.operators.image.gpu_slice import host_samples

    x = inputs[0]
    if not _gpu_batches(inputs):
        return host_fallback(op, batch, inputs, arg_inputs)
    n = len(x)
    if n == 0:
        return [_empty(op.output_layout(x.layout(), 0, 0))]
    in_shapes, in_dtype = x.shape(), _dtype(x)
    shape_inputs = host_samples(inputs[1], batch) if len(inputs) > 1 else [None] * n
    plans = per_sample(op, batch, n, lambda i: op.output_shape(
        in_shapes[i], in_dtype, op.sample_args(arg_inputs, i), shape_inputs[i]))
    shapes = [shape for _, shape in plans]
    layout = op.output_layout(x.layout(), n, len(shapes[0]))
    return [retyped_views(x, plans[0][0], shapes, layout)]


@register_gpu("cast_like")
def gpu_cast_like(op, batch, inputs, arg_inputs):
    """``fn.cast_like`` on GPU batches: the first input cast to the second's element type."""
    from stoker.operators.tensor.gpu_cast import cast_array
    from stoker.tensors_gpu import TensorListGPU

    x, like = inputs
    if not _gpu_batches(inputs):
        return host_fallback(op, batch, inputs, arg_inputs)
    layout = op.output_layouts([x.layout(), like.layout()])[0]
    if len(x) == 0:
        return [_empty(layout)]
    dtype = _dtype(like)
    d = x.dense()
    if d is not None:
        return [TensorListGPU(cast_array(d, dtype), layout, x.source_info())]
    parts = x.flat_parts()
    if parts is not None:
        buf, offsets, shapes = parts
        # Element-wise, so the buffer converts as its samples would; only up to the last sample's end.
        end = int((offsets + np.prod(shapes, axis=1, dtype=np.int64)).max())
        return [TensorListGPU.from_flat(cast_array(buf[:end], dtype), offsets, shapes, layout, x.source_info())]
    return [TensorListGPU([cast_array(s, dtype) for s in x.samples()], layout, x.source_info())]


def _write_joined(out, parts, axis: int, stack: bool) -> None:
    """Copy ``parts`` into ``out`` joined along ``axis`` (a new axis there when ``stack``): one
    strided copy per part."""
    lead = (slice(None),) * axis
    start = 0
    for p in parts:
        if stack:
            out[(*lead, start)] = p
            start += 1
        else:
            extent = p.shape[axis]
            out[(*lead, slice(start, start + extent))] = p
            start += extent


def _join(op, batch, inputs, arg_inputs, stack: bool):
    """``cat`` (``stack=False``) or ``stack`` on GPU batches, as the module's docstring says."""
    from stoker.backend import cuda
    from stoker.tensors_gpu import TensorListGPU

    cp = cuda.cupy()
    if not _gpu_batches(inputs):
        return host_fallback(op, batch, inputs, arg_inputs)
    first = inputs[0]
    n = len(first)
    layout = op.output_layouts([x.layout() for x in inputs])[0]
    if n == 0:
        return [_empty(layout)]
    tables = [shape_table(x) for x in inputs]
    dtypes = [_dtype(x) for x in inputs]
    lay = first.layout()
    # (the axis depends only on the rank and the layout, the same for every sample)
    axis, shapes = plan_batch(op, batch, n, lambda: op.plan_rows(tables, dtypes, lay),
                              lambda i: op.plan([t[i].tolist() for t in tables], dtypes, lay))
    whole = [x.dense() if x.dense() is not None else dense_view(x) for x in inputs]
    if all(w is not None for w in whole):  # each input one shape: so is the output
        out = cp.empty((n, *shapes[0].tolist()), dtypes[0])
        _write_joined(out, whole, axis + 1, stack)
        return [TensorListGPU(out, layout, first.source_info())]
    # A ragged batch: one small copy per input and sample (a batched copy would need a new kernel).
    sizes = np.prod(shapes, axis=1, dtype=np.int64)
    buf, offsets, out = flat_output(shapes, sizes, dtypes[0], layout, first.source_info())
    samples = [x.samples() for x in inputs]
    for i, (off, size, shape) in enumerate(zip(offsets.tolist(), sizes.tolist(), shapes.tolist())):
        if size:
            _write_joined(buf[off:off + size].reshape(shape), [s[i] for s in samples], axis, stack)
    return [out]


@register_gpu("cat")
def gpu_cat(op, batch, inputs, arg_inputs):
    """``fn.cat`` on GPU batches."""
    return _join(op, batch, inputs, arg_inputs, stack=False)


@register_gpu("stack")
def gpu_stack(op, batch, inputs, arg_inputs):
    """``fn.stack`` on GPU batches."""
    return _join(op, batch, inputs, arg_inputs, stack=True)


@register_gpu("reshape")
def gpu_reshape(op, batch, inputs, arg_inputs):
    """``fn.reshape`` on GPU batches: the same memory with new shapes, no copy (the samples of a
    dense or flat batch are contiguous). Static arguments are planned for the whole batch
    (``Reshape.output_shapes``); per-sample ones, and a sample that does not fit, sample by
    sample. A shape given as a second input takes the host path."""
    from stoker.tensors_gpu import TensorListGPU

    x = inputs[0]
    if len(inputs) > 1 or not _gpu_batches(inputs):
        return host_fallback(op, batch, inputs, arg_inputs)
    layout = op.output_layouts([x.layout()])[0]
    n = len(x)
    if n == 0:
        return [_empty(layout)]
    in_shapes = x.geometry()[2]
    out = op.output_shapes(in_shapes, arg_inputs)
    if out is None:
        rows = per_sample(op, batch, n, lambda i: op.output_shape(in_shapes[i].tolist(), op.sample_args(arg_inputs, i)))
        _check_rank(rows)
        out = np.asarray(rows, np.int64).reshape(n, -1)
    d = x.dense()
    if d is not None and d.flags.c_contiguous and (out == out[0]).all():
        return [TensorListGPU(d.reshape((n, *out[0].tolist())), layout, x.source_info(), _keep_alive(x))]
    parts = contiguous_samples(x).flat_parts()
    if parts is not None:
        return [_assemble(parts[0], parts[1], out, layout, x.source_info(), _keep_alive(x))]
    return [reshaped_views(x, [tuple(r) for r in out.tolist()], layout)]
