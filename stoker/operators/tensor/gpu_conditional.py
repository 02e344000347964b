"""Per-sample conditionals on GPU batches: ``_conditional.split`` and ``_conditional.merge``.

The predicate stays a CPU batch (it comes from the CPU stage: random draws, comparisons of
host values), so the GPU stage knows each branch's samples without waiting for the device.

- split makes no copy: the branch's batch is a ``TensorListGPU.from_flat`` view of the input's
  buffer at the kept samples' offsets.
- merge writes one flat batch in the original sample order with one launch of the batched copy
  kernel (``kernels/window_copy.cu`` with one dimension per sample); when one branch took every
  sample, that branch's batch is the result as it is.
"""

from __future__ import annotations

import numpy as np

from stoker.errors import OperatorError
from stoker.operators.gpu_registry import contiguous_samples, flat_offsets, grid_for, register_gpu, upload_table
from stoker.operators.tensor.conditional import (
    DIRECT_PREDICATE,
    branch_labels,
    case_labels_for_merge,
    check_cases_alike,
    check_merge_counts,
    split_parts,
)


def _placement(x):
    """(element pointers, shapes) of every sample of ``x`` (contiguous samples)."""
    parts = x.flat_parts()
    if parts is not None:
        buf, offsets, shapes = parts
        return buf.data.ptr + offsets * buf.itemsize, shapes
    ptrs, _, shapes = contiguous_samples(x).geometry()
    return ptrs, shapes


@register_gpu("_conditional.split", devices=("gpu",))
def gpu_split(op, batch, inputs, arg_inputs):
    """The samples of a GPU batch whose (CPU) predicate equals the branch, as views (DALI's
    direct form: two outputs, the true part and the false part)."""
    data, pred = inputs
    if len(data) != len(pred):
        raise OperatorError(f"the data has {len(data)} samples but the condition {len(pred)}",
                            operator=op.instance_name, origin=op.origin)
    return [_kept(data, keep) for keep in split_parts(op, pred)]


def _kept(data, keep: np.ndarray):
    """The samples of GPU batch ``data`` at positions ``keep``, as views."""
    from stoker.tensors_gpu import TensorListGPU

    sources = data.source_info()
    kept_sources = [sources[i] for i in keep.tolist()]
    if keep.size == len(data):
        return TensorListGPU(data, data.layout(), kept_sources)
    parts = contiguous_samples(data).flat_parts()
    if parts is None:  # samples in separate buffers: views of the kept ones
        samples = data.samples()
        return TensorListGPU([samples[i] for i in keep.tolist()], data.layout(), kept_sources)
    buf, offsets, shapes = parts
    return TensorListGPU.from_flat(buf, offsets[keep], shapes[keep], data.layout(), kept_sources,
                                   keep_alive=data)


@register_gpu("_conditional.merge", devices=("gpu",))
def gpu_merge(op, batch, inputs, arg_inputs):
    """The two branches' GPU batches back in the original sample order, in one flat buffer."""
    on_true, on_false, pred = inputs
    mask = branch_labels(pred, 0, op.args["what"] or DIRECT_PREDICATE, op.instance_name, op.origin)
    count = int(mask.sum())
    check_merge_counts(op, len(on_true), len(on_false), count, mask.size - count)
    _check_alike(op, on_true, on_false)
    labels = np.where(mask, 0, 1)
    return [_merge(batch, [on_true, on_false], labels)]


@register_gpu("_conditional.merge_cases", devices=("gpu",))
def gpu_merge_cases(op, batch, inputs, arg_inputs):
    """The n cases' GPU batches of a select back in the original sample order, in one flat buffer
    (one copy whatever the number of cases)."""
    *cases, index = inputs
    labels = case_labels_for_merge(op, cases, index)
    check_cases_alike(op, [(np.empty((0,) * c.ndim, c.element_dtype()), c.layout()) if len(c) else None
                           for c in cases])
    if any(len(c) and c.element_dtype().itemsize not in (1, 2, 4, 8) for c in cases):
        raise OperatorError(f"variable '{op.args['variable']}': its element type has no GPU copy",
                            operator=op.instance_name, origin=op.origin)
    return [_merge(batch, cases, labels)]


def _merge(batch, branches: list, labels: np.ndarray):
    """``branches[k]`` holds, in order, the samples whose label is k: one flat batch of them all in
    label order, written by one launch of the batched copy kernel (no copy when one branch took
    every sample)."""
    from stoker.backend import cuda
    from stoker.tensors_gpu import TensorListGPU

    present = [k for k, b in enumerate(branches) if len(b)]
    layout = next((branches[k].layout() for k in present if branches[k].layout()), "")
    sources = np.empty(labels.size, object)
    for k in present:
        sources[labels == k] = branches[k].source_info()[:len(branches[k])]
    if len(present) <= 1:
        whole = branches[present[0]] if present else branches[0]
        return TensorListGPU(whole, layout, sources.tolist())
    dtype = branches[present[0]].element_dtype()
    shapes = src = None
    for k in present:
        ptrs, part_shapes = _placement(branches[k])
        if shapes is None:
            shapes = np.empty((labels.size, part_shapes.shape[1]), np.int64)
            src = np.empty(labels.size, np.int64)
        sel = labels == k
        shapes[sel], src[sel] = part_shapes, ptrs
    sizes = np.prod(shapes, axis=1, dtype=np.int64)
    offsets = flat_offsets(sizes)
    cp = cuda.cupy()
    buf = cp.empty(max(int(sizes.sum()), 1), dtype)
    if sizes.any():
        dst = buf.data.ptr + offsets * dtype.itemsize
        nbytes = sizes * dtype.itemsize
        # Copy in the widest unit every address and size allows (8 bytes for whole images): a
        # thread per unit, so byte-sized elements would take 8 times the threads.
        unit = next(u for u in (8, 4, 2, 1) if not ((src | dst | nbytes) % u).any())
        count = nbytes // unit
        # window_copy's table, one dimension per sample: a plain copy of `count[i]` units
        tab = np.zeros((labels.size, 32), np.int64)
        tab[:, 0], tab[:, 1], tab[:, 2], tab[:, 3] = src, dst, count, 1
        tab[:, 5] = -1
        tab[:, 11] = tab[:, 17] = count  # output and input extents of the innermost dimension
        tab[:, 23] = 1  # its stride
        grid, block = grid_for(int(count.max()), labels.size)
        fills = np.zeros(1, np.dtype(f"u{unit}"))
        kernel = cuda.load_kernel("window_copy", f"window_copy_{unit}")
        kernel(grid, block, (upload_table(tab, batch), upload_table(fills, batch)))
    return TensorListGPU.from_flat(buf, offsets, shapes, layout, sources.tolist())


def _check_alike(op, a, b) -> None:
    """Both branches give one element type and dimensionality (the CPU merge's rule)."""
    if not len(a) or not len(b):
        return
    problem = None
    if a.element_dtype() != b.element_dtype():
        problem = f"types differ: {a.element_dtype()} in the if branch, {b.element_dtype()} in the else branch"
    elif a.ndim != b.ndim:
        problem = f"numbers of dimensions differ: {a.ndim} in the if branch, {b.ndim} in the else branch"
    elif a.layout() and b.layout() and a.layout() != b.layout():
        problem = f"layouts differ: '{a.layout()}' in the if branch, '{b.layout()}' in the else branch"
    elif a.element_dtype().itemsize not in (1, 2, 4, 8):
        problem = f"element type {a.element_dtype()} has no GPU copy"
    if problem:
        raise OperatorError(
            f"variable '{op.args['variable']}' of {op.args['what'] or 'a per-sample if'} is merged from both "
            f"branches into one batch, but its {problem}. Make both branches produce the same type and "
            "dimensionality (e.g. fn.cast, fn.reshape)", operator=op.instance_name, origin=op.origin)
