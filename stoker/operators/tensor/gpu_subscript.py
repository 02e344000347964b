"""GPU ``_subscript``: indexing and slicing a GPU batch (``x[..., 0]``, ``x[1:3, :, ::-2]``), with
NumPy's semantics, as the CPU operator (issue 16).

An index or a slice of a sample is a strided view of it: a start (a pointer offset), and for
each output axis an extent and a stride (the input axis's stride times the step; zero for a new
axis). The host works these out for the whole batch at once from the samples' shapes and
strides (NumPy over the batch axis, per-sample indices as columns), and the view is copied out:

* a dense batch with a static subscript in one CuPy copy of the ``(N, ...)`` view (it stays one
  dense array);
* any other batch in one launch of the window copy (``kernels/window_copy.cu`` through
  ``gpu_slice.copy_window_batch``, as ``transpose`` does), which reads its input at any element
  strides, negative ones included;
* what the window copy does not take (elements of another size, more than six dimensions after
  merging) sample by sample with CuPy views.

An index out of range, a zero step, or more indices than axes raise for the first sample they
apply to, as the CPU raises them.
"""

from __future__ import annotations

import numpy as np

from stoker.operators.gpu_registry import register_gpu

_MAX_GRID_Y = 65535  # the window copy runs one grid row per sample


def part_values(part, arg_inputs: dict, n: int):
    """One number of the subscript for every sample: None (absent), an int (static), or an
    int64 (n,) array of a per-sample argument, truncated towards zero as the CPU's ``int()``."""
    if part is None or not isinstance(part, str):
        return None if part is None else int(part)
    values = arg_inputs[part]
    try:
        arr = np.asarray(values).reshape(n)
    except ValueError:  # not one value per sample: as the CPU reads them
        arr = np.asarray([int(np.asarray(v).reshape(-1)[0]) for v in values], np.int64)
    if arr.dtype.kind == "f" and not np.isfinite(arr).all():
        raise ValueError(f"argument {part!r} holds a value that is not a finite number")
    return arr.astype(np.int64)


def slice_window(ext: np.ndarray, start, stop, step):
    """Python's ``slice(start, stop, step).indices(ext)`` for a column of extents: (first index,
    count, step) as int64 arrays; parts are None, ints or arrays (n,)."""
    n = ext.shape[0]
    step = np.ones(n, np.int64) if step is None else np.broadcast_to(np.asarray(step, np.int64), (n,))
    neg = step < 0
    lo = np.where(neg, -1, 0)
    hi = np.where(neg, ext - 1, ext)

    def bound(v, default):
        if v is None:
            return default
        v = np.broadcast_to(np.asarray(v, np.int64), (n,))
        return np.clip(np.where(v < 0, v + ext, v), lo, hi)

    first = bound(start, np.where(neg, ext - 1, 0))
    end = bound(stop, np.where(neg, -1, ext))
    safe = np.where(step == 0, 1, step)
    count = np.where(neg, (first - end - 1) // np.maximum(-safe, 1) + 1, (end - first - 1) // safe + 1)
    return first, np.maximum(count, 0), step


def spec_columns(spec, arg_inputs: dict, n: int) -> list:
    """The subscript with every number resolved for the batch (:func:`part_values`): a list of
    (kind, [values]) with one entry per part of each item."""
    return [(item[0], [part_values(p, arg_inputs, n) for p in item[1:]]) for item in spec]


def plan_views(columns: list, ptrs, shapes, strides):
    """The subscripted view of every sample: ``(pointers, shapes, byte strides)`` as arrays (N,),
    (N, k), (N, k); or ``(sample, error)`` for the first sample it fails for (the error NumPy
    raises on the CPU: an index out of range, too many indices, a zero step)."""
    n, ndim = shapes.shape
    used = sum(1 for kind, _ in columns if kind in ("index", "slice"))
    if used > ndim:
        return 0, IndexError(f"too many indices for array: array is {ndim}-dimensional, but {used} were indexed")
    ptrs = np.array(ptrs, np.int64, copy=True)
    out_ext, out_str, ax, errors = [], [], 0, []
    for kind, parts in columns:
        if kind == "ellipsis":
            for _ in range(ndim - used):
                out_ext.append(shapes[:, ax])
                out_str.append(strides[:, ax])
                ax += 1
        elif kind == "newaxis":
            out_ext.append(np.ones(n, np.int64))
            out_str.append(np.zeros(n, np.int64))
        elif kind == "index":
            v = np.broadcast_to(np.asarray(parts[0], np.int64), (n,))
            ext = shapes[:, ax]
            bad = np.flatnonzero((v < -ext) | (v >= ext))
            if bad.size:
                i = int(bad[0])
                message = f"index {int(v[i])} is out of bounds for axis {ax} with size {int(ext[i])}"
                errors.append((i, IndexError(message)))
            ptrs += np.where(v < 0, v + ext, v) * strides[:, ax]
            ax += 1
        else:
            start, stop, step = parts
            zero = np.flatnonzero(np.broadcast_to(np.asarray(1 if step is None else step), (n,)) == 0)
            if zero.size:
                errors.append((int(zero[0]), ValueError("slice step cannot be zero")))
            first, count, step = slice_window(shapes[:, ax], start, stop, step)
            ptrs += np.where(count > 0, first, 0) * strides[:, ax]
            out_ext.append(count)
            out_str.append(strides[:, ax] * step)
            ax += 1
    if errors:  # the first sample that fails, as the CPU meets them
        return min(errors, key=lambda e: e[0])
    out_ext.extend(shapes[:, a] for a in range(ax, ndim))
    out_str.extend(strides[:, a] for a in range(ax, ndim))
    if not out_ext:  # every axis indexed: 0-d samples
        return ptrs, np.zeros((n, 0), np.int64), np.zeros((n, 0), np.int64)
    return ptrs, np.stack(out_ext, 1), np.stack(out_str, 1)


def sample_key(columns: list, i: int) -> tuple:
    """Sample ``i``'s index as a NumPy key (the CPU operator's), from :func:`spec_columns`."""
    key = []
    for kind, parts in columns:
        if kind == "ellipsis":
            key.append(Ellipsis)
        elif kind == "newaxis":
            key.append(None)
        else:
            vals = [v if v is None or isinstance(v, int) else int(v[i]) for v in parts]
            key.append(vals[0] if kind == "index" else slice(*vals))
    return tuple(key)


@register_gpu("_subscript")
def gpu_subscript(op, batch, inputs, arg_inputs):
    """``x[...]`` of a GPU batch (see the module's docstring)."""
    from stoker.errors import SampleError
    from stoker.operators.image.gpu_slice import copy_window_batch, sample_placement
    from stoker.tensors_gpu import TensorListGPU

    x = inputs[0]
    spec = op.args["spec"]
    layout = op.output_layouts([x.layout()])[0]
    n = len(x)
    if n == 0:
        return [TensorListGPU([], layout, [])]
    columns = spec_columns(spec, arg_inputs, n)
    ptrs, shapes, strides = sample_placement(x)
    plan = plan_views(columns, ptrs, shapes, strides)
    if len(plan) == 2:
        i, error = plan
        if isinstance(error, IndexError):  # worded as the CPU operator words it
            error = SampleError(f"index out of range for a sample of shape {tuple(shapes[i].tolist())}: {error}")
        raise op.sample_failure(error, batch, i)
    ptrs, out_shapes, out_strides = plan
    dense = x.dense()
    if dense is not None and not arg_inputs:
        # a static subscript of one (N, ...) array: its view, copied out in one CuPy copy
        out = dense[(slice(None), *sample_key(columns, 0))].copy()
        return [_fresh(TensorListGPU(out, layout, x.source_info()))]
    if n <= _MAX_GRID_Y:
        out = copy_window_batch(x, out_shapes, np.zeros_like(out_shapes), batch,
                                placement=(ptrs, out_shapes, out_strides), layout=layout)
        if out is not None:
            return [_fresh(out)]
    samples = x.samples()
    outs = [samples[i][sample_key(columns, i)].copy() for i in range(n)]
    return [_fresh(TensorListGPU(outs, layout, x.source_info()))]


def _fresh(out):
    out.fresh = True  # (a new copy that only this batch holds: a later operator may write into it)
    return out
