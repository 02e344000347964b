"""GPU placements that need no pixel kernel: ``shapes``, ``get_property``, ``permute_batch``,
``per_frame``, ``copy`` and ``constant`` (issue 16).

Each used to be refused on the GPU or to run through the host fallback (download, the CPU
operator, upload). Here:

* ``shapes`` and ``get_property`` read what the host already knows about a GPU batch (its
  sample shapes, layout and sources) and upload it in one copy per batch: the output is a GPU
  batch, as DALI's GPU ``Shapes`` and ``GetProperty`` give.
* ``permute_batch`` reorders a batch on the device: a dense batch is gathered in one CuPy
  ``take`` (it stays one dense array), a batch in one flat buffer becomes views of that buffer
  at permuted offsets (no copy).
* ``per_frame`` only relabels the layout: the samples are passed on as they are.
* ``copy`` is one device-to-device copy of the batch's buffer.
* ``constant`` is uploaded once per operator instance and handed out as views of that array;
  the output is never marked ``fresh``, so the executor never donates it to an operator that
  writes in place (which would change the constant for every later batch).
"""

from __future__ import annotations

import weakref

import numpy as np

from stoker.errors import OperatorError
from stoker.operators.gpu_registry import flat_offsets, per_sample, register_gpu, upload_table
from stoker.operators.tensor.gpu_cast import flat_span
from stoker.tensors import TensorListCPU


def sample_shapes(x) -> np.ndarray:
    """The shapes of the samples of ``x`` (a TensorListGPU) as an (N, ndim) int64 array, read
    from the batch's one array or buffer where it has one (no step per sample)."""
    n = len(x)
    d = x.dense()
    if d is not None:
        return np.tile(np.asarray(d.shape[1:], np.int64), (n, 1))
    parts = x.flat_parts()
    if parts is not None:
        return np.asarray(parts[2], np.int64).reshape(n, -1)
    return np.asarray(x.shape(), np.int64).reshape(n, -1)


def shape_stand_ins(x, shapes: np.ndarray | None = None) -> TensorListCPU:
    """A host batch shaped as ``x`` (a TensorListGPU) whose samples hold no memory (broadcast
    views of one zero of ``x``'s dtype): for CPU rules that only read their input's shapes."""
    shapes = sample_shapes(x) if shapes is None else shapes
    zero = np.zeros((), x.element_dtype())
    samples = [np.broadcast_to(zero, tuple(s)) for s in shapes.tolist()]
    return TensorListCPU(samples, x.layout(), x.source_info())


def _shape_rows(op, batch, shapes: np.ndarray) -> np.ndarray:
    """``shapes`` in the operator's output type, as the CPU's ``np.asarray(shape, dtype)``: an
    extent the type cannot hold raises for its sample as the CPU does (NumPy refuses it)."""
    dtype = np.dtype(op.dtype)
    if dtype.kind in "iu" and shapes.size and shapes.max() > np.iinfo(dtype).max:
        per_sample(op, batch, len(shapes), lambda i: np.asarray(shapes[i].tolist(), dtype))
    return shapes.astype(dtype)


@register_gpu("shapes")
def gpu_shapes(op, batch, inputs, arg_inputs):
    """``fn.shapes`` of a GPU batch: the shapes the host holds, uploaded as one (N, ndim) array."""
    from stoker.tensors_gpu import TensorListGPU

    x = inputs[0]
    if op.device == "cpu":  # DALI's CPU form on a GPU batch: the CPU operator on stand-ins, host output
        return op.run_cpu(batch, [shape_stand_ins(x)], arg_inputs)
    if not len(x):
        return [TensorListGPU([], "", [])]
    rows = _shape_rows(op, batch, sample_shapes(x))
    return [_fresh(TensorListGPU(upload_table(rows, batch), "", x.source_info()))]


@register_gpu("get_property")
def gpu_get_property(op, batch, inputs, arg_inputs):
    """``fn.get_property`` of a GPU batch: each sample's layout or source as UTF-8 bytes, on the
    device (one upload for the batch)."""
    from stoker.tensors_gpu import TensorListGPU

    x = inputs[0]
    if op.device == "cpu":  # (as gpu_shapes)
        return op.run_cpu(batch, [shape_stand_ins(x)], arg_inputs)
    n = len(x)
    vals = [x.layout()] * n if op.args["key"] == "layout" else list(x.source_info())
    encoded = [v.encode() for v in vals]
    if not encoded:
        return [TensorListGPU([], "", [])]
    data = np.frombuffer(b"".join(encoded), np.uint8)
    sizes = np.fromiter(map(len, encoded), np.int64, n)
    if (sizes == sizes[0]).all():  # the layout, or sources of one length: one dense array
        return [_fresh(TensorListGPU(upload_table(data.reshape(n, int(sizes[0])), batch), ""))]
    buf = upload_table(data, batch)
    return [_fresh(TensorListGPU.from_flat(buf, flat_offsets(sizes), sizes.reshape(n, 1), ""))]


def permutation(op, arg_inputs: dict, n: int) -> np.ndarray:
    """The source index of every output sample of ``permute_batch`` (int64 (n,)), checked as the
    CPU operator checks it (the same errors)."""
    if "indices" in arg_inputs:
        values = arg_inputs["indices"]
        try:  # one step when every sample holds one value (batch_permutation's scalars)
            idx = np.asarray(values).reshape(len(values), -1)[:, 0].astype(np.int64)
        except (ValueError, IndexError):  # ragged, or a sample with no value: as the CPU reads them
            idx = np.asarray([int(np.asarray(v).reshape(-1)[0]) for v in values], np.int64)
    elif op.args.get("indices") is not None:
        idx = np.asarray(list(op.args["indices"]), np.int64).reshape(-1)
    else:
        from stoker.errors import arg_error

        raise arg_error("permute_batch", "indices", "is required")
    if idx.size != n:
        raise OperatorError(f"argument 'indices' has {idx.size} entries for a batch of {n}",
                            operator=op.instance_name, origin=op.origin)
    bad = idx[(idx < 0) | (idx >= n)]
    if bad.size:
        raise OperatorError(f"argument 'indices': {int(bad[0])} is out of range for a batch of {n}",
                            operator=op.instance_name, origin=op.origin)
    return idx


@register_gpu("permute_batch")
def gpu_permute_batch(op, batch, inputs, arg_inputs):
    """``fn.permute_batch`` on a GPU batch: one gather of a dense batch, views of a flat one."""
    from stoker.backend import cuda
    from stoker.tensors_gpu import TensorListGPU

    x = inputs[0]
    idx = permutation(op, arg_inputs, len(x))
    sources = np.asarray(x.source_info(), dtype=object)[idx].tolist() if idx.size else []
    dense = x.dense()
    if dense is not None and idx.size:
        out = cuda.cupy().take(dense, upload_table(idx, batch), axis=0)
        return [_fresh(TensorListGPU(out, x.layout(), sources))]
    parts = x.flat_parts()
    if parts is not None:
        # Views of the input's buffer at the permuted places (a sample taken twice is two views
        # of it); not fresh: the memory is the input's, which other operators may read.
        buf, offsets, shapes = parts
        return [TensorListGPU.from_flat(buf, offsets[idx], shapes[idx], x.layout(), sources, keep_alive=x)]
    samples = x.samples()
    return [TensorListGPU([samples[i] for i in idx.tolist()], x.layout(), sources)]


@register_gpu("per_frame")
def gpu_per_frame(op, batch, inputs, arg_inputs):
    """``fn.per_frame`` on a GPU batch: the same samples under the frame layout."""
    from stoker.tensors_gpu import TensorListGPU

    x = inputs[0]
    if not len(x):
        return [TensorListGPU([], op.output_layouts([x.layout()])[0], [])]
    # The CPU rule on the first sample's shape (every sample has the batch's ndim): it refuses
    # a scalar or a layout that does not start with F (without replace) as the CPU does, and
    # gives the layout (F, and '*' for the other axes of an input without one).
    one = TensorListCPU([np.broadcast_to(np.zeros((), x.element_dtype()), tuple(sample_shapes(x)[0]))],
                        x.layout(), x.source_info()[:1])
    (marked,) = op.run_cpu(batch, [one], arg_inputs)
    return [TensorListGPU(x, marked.layout())]


@register_gpu("copy")
def gpu_copy(op, batch, inputs, arg_inputs):
    """``fn.copy`` on a GPU batch: one device-to-device copy of its array or buffer."""
    from stoker.tensors_gpu import TensorListGPU

    x = inputs[0]
    dense = x.dense()
    if dense is not None:
        out = TensorListGPU(dense.copy(), x.layout(), x.source_info())
    else:
        parts = x.flat_parts()
        if parts is not None and len(x):
            # the span of the buffer the samples occupy, in one copy (gaps between them too)
            buf, offsets, shapes = parts
            start, end = flat_span(offsets, shapes)
            out = TensorListGPU.from_flat(buf[start:end].copy(), offsets - start, shapes, x.layout(),
                                          x.source_info())
        else:
            out = TensorListGPU([s.copy() for s in x.samples()], x.layout(), x.source_info())
    return [_fresh(out)]


# op -> (device id, (N, ...) device array): the constant for the largest batch seen so far
_constants: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


@register_gpu("constant")
def gpu_constant(op, batch, inputs, arg_inputs):
    """``fn.constant(device="gpu")``: the value is uploaded once (for the largest batch seen) and
    every batch gets a view of its first N rows."""
    from stoker.tensors_gpu import TensorListGPU

    n = batch.batch_size
    v = op.value
    cached = _constants.get(op)
    if cached is None or cached[0] != batch.device_id or len(cached[1]) < n:
        tiled = np.broadcast_to(v, (max(n, 1), *v.shape))
        cached = _constants[op] = (batch.device_id, upload_table(tiled, batch))
    # (not fresh: every batch shares this memory, so no later operator may write into it)
    return [TensorListGPU(cached[1][:n], op.args["layout"] or "")]


def _fresh(out):
    """``out`` owns new memory that nothing else reads: a later operator may write into it."""
    out.fresh = True
    return out
