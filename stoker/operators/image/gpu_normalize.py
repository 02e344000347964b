"""GPU ``normalize``: ``(x - mean) / stddev * scale + shift`` with given or computed statistics.

Each sample's reduced axes and given mean/stddev come from the CPU operator's own checks
(``Normalize._params``), so a bad argument fails as it does on the CPU. The statistics that are
not given are reduced in float64 with CuPy, over the whole ``(N, ...)`` array at once when the
samples share a shape and lie back to back in one buffer, else sample by sample. Every sample's
mean and ``scale / stddev`` then sit in two flat float64 tables (one entry per element of the
sample's kept extents; one entry set for the whole batch with ``batch=True``), and the map runs
as a few CuPy calls over the dense array, or as one launch of ``kernels/normalize.cu`` over a
ragged batch. Both follow the CPU's float64 arithmetic, round to float32 and then to the output
type, so results differ from the CPU's only through the summation order of the statistics.

What runs through the host fallback instead: 64-bit integer outputs, non-numeric inputs, on
ragged batches also the types the kernel has no variant for (64-bit integer inputs, bool
outputs), empty or repeated ``axes``, given mean/stddev tensors with no values or whose reduced
axes differ from sample to sample, and ragged batches of more than 65535 samples.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from stoker import types
from stoker.errors import OperatorError
from stoker.operators.gpu_registry import (
    contiguous_samples,
    dense_view,
    flat_offsets,
    flat_output,
    grid_for,
    host_fallback,
    per_sample,
    register_gpu,
    upload_table,
)

# Element types the kernel has a variant for, by the suffix of its name (normalize_<in>_<out>).
_SUFFIX = {np.dtype(t): s for t, s in ((np.uint8, "u8"), (np.int8, "i8"), (np.uint16, "u16"), (np.int16, "i16"),
                                       (np.int32, "i32"), (np.float16, "f16"), (np.float32, "f32"),
                                       (np.float64, "f64"))}
_MAXD = 8  # as in normalize.cu: the most (merged) dims a kernel row describes
_ROW = 6 + 2 * _MAXD
_MAX_GRID_Y = 65535  # one grid row per sample


# --- per-sample parameters, from the CPU operator's checks ---------------------------------

def _shape_stub(shape):
    """What ``Normalize._params`` reads of a sample (rank and extents), without its data."""
    return SimpleNamespace(shape=tuple(int(d) for d in shape), ndim=len(shape))


def _check_batch(op, shapes, layout, arg_inputs) -> None:
    """The checks the CPU runs before batch-wide statistics: sample 0's parameters resolve, and
    every sample has sample 0's extents on the axes that are not reduced (ValueError if not)."""
    axes, _, _ = op._params(_shape_stub(shapes[0]), op.sample_args(arg_inputs, 0), layout)
    kept = [d for d in range(len(shapes[0])) if d not in axes]
    for s in shapes[1:]:
        if [s[d] for d in kept] != [shapes[0][d] for d in kept]:
            raise ValueError(f"normalize: with batch=True the non-reduced extents must agree across the "
                             f"batch; shapes {tuple(shapes[0])} and {tuple(s)} differ on axes {kept}")


def sample_params(op, batch, shapes, layout: str, arg_inputs) -> list:
    """Per sample ``(axes, given mean or None, given stddev or None)`` as ``Normalize._params``
    gives them (float64 arrays shaped to broadcast). Errors are raised as the CPU path raises
    them: the batch check without a sample, a sample's own argument naming its source."""
    if op.args["batch"]:
        try:
            _check_batch(op, shapes, layout, arg_inputs)
        except ValueError as e:
            raise OperatorError(str(e), operator=op.instance_name, origin=op.origin) from None
    return per_sample(op, batch, len(shapes),
                      lambda i: op._params(_shape_stub(shapes[i]), op.sample_args(arg_inputs, i), layout))


def _keep(shape, axes) -> tuple:
    """The extents a sample's statistics have: its shape with the reduced axes set to 1."""
    return tuple(1 if d in axes else int(e) for d, e in enumerate(shape))


def _why_host(params, in_type: np.dtype, out_type: np.dtype) -> str | None:
    """Why this batch goes through the host fallback, or None when the GPU path takes it."""
    axes = params[0][0]
    if not axes or len(set(axes)) != len(axes):
        return "empty or repeated axes"
    if any(p[0] != axes for p in params):
        return "reduced axes differ between samples"
    for k in (1, 2):
        if len({p[k] is None for p in params}) > 1 or any(p[k] is not None and p[k].size == 0 for p in params):
            return "given statistics missing for some samples"
    if in_type.kind not in "iuf" or in_type.itemsize > 8:
        return f"input type {in_type}"
    if out_type.kind not in "biuf" or (out_type.kind in "iu" and out_type.itemsize == 8):
        return f"output type {out_type}"
    return None


# --- statistics (``xp`` is CuPy; NumPy runs the same code) --------------------------------------

def _sq_sum(x, centre, axes):
    d = x - centre  # float64 whatever x holds, since the centre is: no narrow intermediate
    d *= d
    return d.sum(axis=axes, keepdims=True)


def _std(xp, sq, count: int, ddof: int, eps: float):
    denom = count - ddof
    var = sq / denom if denom > 0 else xp.zeros_like(sq)
    return xp.sqrt(var + eps)


def compute_stats(xp, parts, axes, counts, centres, need_std: bool, batch: bool, ddof: int, eps: float):
    """Means and standard deviations of the arrays ``parts`` reduced over ``axes`` (keepdims,
    float64): one per part, or a single one over all parts with ``batch``. ``counts[k]`` is the
    number of elements part ``k`` reduces per entry. With ``centres`` (given means, one per part,
    or one for the batch) no mean is computed and the deviations are taken about them.

    Returns ``(means or None, stds or None)``, lists of arrays."""
    means = None
    if centres is None:
        sums = [x.sum(axis=axes, dtype=xp.float64, keepdims=True) for x in parts]
        if batch:
            total = sums[0]
            for s in sums[1:]:
                total = total + s
            means = [total / max(sum(counts), 1)]
        else:
            means = [s / max(c, 1) for s, c in zip(sums, counts)]
        centres = means
    stds = None
    if need_std:
        if batch:
            sq = _sq_sum(parts[0], centres[0], axes)
            for x in parts[1:]:
                sq = sq + _sq_sum(x, centres[0], axes)
            stds = [_std(xp, sq, sum(counts), ddof, eps)]
        else:
            stds = [_std(xp, _sq_sum(x, c, axes), n, ddof, eps) for x, c, n in zip(parts, centres, counts)]
    return means, stds


def _flat(xp, arrays):
    """The arrays raveled back to back as one contiguous float64 table."""
    if len(arrays) == 1:
        return xp.ascontiguousarray(arrays[0].ravel(), dtype=xp.float64)
    return xp.concatenate([a.ravel() for a in arrays]).astype(xp.float64, copy=False)


def _factor(xp, std, scale: float):
    """``scale / std`` for a computed deviation: 0 where it is 0 (the output is then ``shift``)."""
    positive = std > 0
    return xp.where(positive, scale / xp.where(positive, std, 1.0), 0.0)


def build_tables(xp, upload, op, params, keeps, parts, axes, counts, dense_n):
    """The mean and factor (``scale / stddev``) tables of a batch.

    ``parts`` are the arrays statistics are reduced over: ``[X]`` with ``X`` the dense ``(N, ...)``
    batch (``dense_n`` = N, ``axes`` counted with the batch axis, and including it with
    ``batch=True``), or the samples (``dense_n`` None). ``upload`` puts a host array on the device.
    Returns ``((mean, shared), (factor, shared))``: flat float64 device tables where sample ``i``'s
    entries start at its offset among the kept sizes, or, ``shared``, one entry set for all."""
    a = op.args
    batch = bool(a["batch"])
    sizes = [int(np.prod(k, dtype=np.int64)) for k in keeps]
    mean_tab = factor_tab = None
    if params[0][1] is not None:
        host = np.concatenate([np.broadcast_to(p[1], k).ravel() for p, k in zip(params, keeps)])
        mean_tab = (upload(np.ascontiguousarray(host, np.float64)), False)
    if params[0][2] is not None:
        with np.errstate(divide="ignore"):  # a given stddev of 0 divides as on the CPU
            host = np.concatenate([np.broadcast_to(a["scale"] / np.asarray(op._given_std(p[2]), np.float64), k).ravel()
                                   for p, k in zip(params, keeps)])
        factor_tab = (upload(np.ascontiguousarray(host, np.float64)), False)
    if mean_tab is not None and factor_tab is not None:
        return mean_tab, factor_tab
    centres = None
    if mean_tab is not None:  # deviations about the given means (sample 0's for the batch, as the CPU)
        table = mean_tab[0]
        if dense_n is not None:
            table = table.reshape((dense_n, *keeps[0]))
            centres = [table[:1] if batch else table]
        elif batch:
            centres = [table[:sizes[0]].reshape(keeps[0])]
        else:
            offs = flat_offsets(sizes).tolist()
            centres = [table[o:o + s].reshape(k) for o, s, k in zip(offs, sizes, keeps)]
    means, stds = compute_stats(xp, parts, axes, counts, centres, factor_tab is None, batch,
                                int(a["ddof"]), float(a["epsilon"]))
    if mean_tab is None:
        mean_tab = (_flat(xp, means), batch)
    if factor_tab is None:
        factor_tab = (_factor(xp, _flat(xp, stds), float(a["scale"])), batch)
    return mean_tab, factor_tab


# --- the map ----------------------------------------------------------------------------

def to_type(xp, v32, out_type: np.dtype):
    """float32 results in ``out_type`` as the CPU converts them: integers round halves away from
    zero and saturate."""
    if out_type.kind in "iu":
        info = np.iinfo(out_type)
        x64 = v32.astype(xp.float64)
        r = xp.trunc(x64 + xp.copysign(0.5, x64))
        return xp.clip(r, info.min, info.max).astype(out_type)
    return v32.astype(out_type, copy=False)


def dense_map(xp, x, mean, factor, shift: float, out_type: np.dtype):
    """``(x - mean) * factor + shift`` in float64 over a dense batch (tables broadcast against
    it), rounded to float32, then to ``out_type``."""
    t = x - mean  # float64, as the tables are
    t *= factor
    t += shift
    return to_type(xp, t.astype(xp.float32), out_type)


def kernel_rows(shapes, axes) -> np.ndarray | None:
    """The kernel's per-sample rows (see normalize.cu) with the element counts and dims filled
    in (pointers and table offsets left 0); None when a sample needs more than ``_MAXD`` dims
    after merging."""
    rows = np.zeros((len(shapes), _ROW), np.int64)
    red = set(axes)
    for i, shape in enumerate(shapes):
        keep = _keep(shape, red)
        strides = np.ones(len(keep), np.int64)  # row-major strides of the sample's table
        for d in range(len(keep) - 2, -1, -1):
            strides[d] = strides[d + 1] * keep[d + 1]
        dims = []  # [extent, table stride, reduced]
        for d, ext in enumerate(shape):
            if ext == 1:
                continue  # one coordinate: adds nothing to the entry
            reduced = d in red
            stride = 0 if reduced else int(strides[d])
            if dims and dims[-1][2] == reduced:
                # kept neighbours are adjacent in the table, so (outer, inner) folds into one
                # dim with the inner stride; reduced ones stay at stride 0
                dims[-1][0] *= int(ext)
                dims[-1][1] = stride
            else:
                dims.append([int(ext), stride, reduced])
        if len(dims) > _MAXD:
            return None
        rows[i, 2] = int(np.prod(shape, dtype=np.int64))
        rows[i, 5] = len(dims)
        for k, (ext, stride, _) in enumerate(dims):
            rows[i, 6 + k] = ext
            rows[i, 6 + _MAXD + k] = stride
    return rows


def _offsets(table, sizes) -> np.ndarray:
    """Where each sample's entries start in a table (all at 0 in a shared one)."""
    return np.zeros(len(sizes), np.int64) if table[1] else flat_offsets(sizes)


@register_gpu("normalize")
def gpu_normalize(op, batch, inputs, arg_inputs):
    """``fn.normalize`` on GPU batches (same types, shapes and values as the CPU operator)."""
    from stoker.backend import cuda
    from stoker.tensors_gpu import TensorListGPU

    cp = cuda._cupy()
    x = inputs[0]
    n = len(x)
    if n == 0:
        return [x]  # as the CPU: an empty batch passes through
    layout = x.layout()
    shapes = [tuple(int(e) for e in s) for s in x.shape()]
    params = sample_params(op, batch, shapes, layout, arg_inputs)
    in_type = np.dtype(types.to_numpy_type(x.dtype))
    out_type = np.dtype(op.args["dtype"])
    if _why_host(params, in_type, out_type) is not None:
        return host_fallback(op, batch, inputs, arg_inputs)
    axes = list(params[0][0])
    keeps = [_keep(s, axes) for s in shapes]
    sizes = [int(np.prod(k, dtype=np.int64)) for k in keeps]
    counts = [int(np.prod([s[d] for d in axes], dtype=np.int64)) for s in shapes]
    shift = float(op.args["shift"])

    def upload(host):
        return upload_table(host, batch)

    dense = dense_view(x)
    if dense is not None:
        red = tuple(d + 1 for d in axes)
        if op.args["batch"]:
            red = (0, *red)
        count = int(np.prod([dense.shape[d] for d in red], dtype=np.int64))
        (mean, m_shared), (factor, f_shared) = build_tables(cp, upload, op, params, keeps, [dense], red,
                                                            [count], n)
        mean = mean.reshape((1 if m_shared else n, *keeps[0]))
        factor = factor.reshape((1 if f_shared else n, *keeps[0]))
        out = dense_map(cp, dense, mean, factor, shift, out_type)
        return [TensorListGPU(out, layout, x.source_info())]

    if in_type not in _SUFFIX or out_type not in _SUFFIX or n > _MAX_GRID_Y:
        return host_fallback(op, batch, inputs, arg_inputs)
    rows = kernel_rows(shapes, axes)
    if rows is None:
        return host_fallback(op, batch, inputs, arg_inputs)
    x = contiguous_samples(x)
    samples = x.samples() if params[0][1] is None or params[0][2] is None else None
    mean_tab, factor_tab = build_tables(cp, upload, op, params, keeps, samples, tuple(axes), counts, None)
    rows[:, 3] = _offsets(mean_tab, sizes)
    rows[:, 4] = _offsets(factor_tab, sizes)

    sample_sizes = rows[:, 2]
    buf, offsets, out = flat_output(shapes, sample_sizes, out_type, layout, x.source_info())
    if not sample_sizes.any():
        return [out]
    rows[:, 0] = x.geometry()[0]
    rows[:, 1] = buf.data.ptr + offsets * out_type.itemsize
    grid, block = grid_for(int(sample_sizes.max()), n)
    kernel = cuda.load_kernel("normalize", f"normalize_{_SUFFIX[in_type]}_{_SUFFIX[out_type]}")
    kernel(grid, block, (upload(rows), mean_tab[0], factor_tab[0], np.float64(shift)))
    return [out]
