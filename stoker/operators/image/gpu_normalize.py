"""GPU ``normalize``: ``(x - mean) / stddev * scale + shift`` with given or computed statistics.

Every sample's reduced axes and given mean/stddev are planned for the whole batch at once with
NumPy (:func:`batch_params`: the numbers and the checks of the CPU operator's ``Normalize._params``);
a bad argument reruns ``_params`` sample by sample, so it fails as it does on the CPU, naming the
sample. No host step runs once per sample (issue 16), except for given mean/stddev tensors whose
shapes differ from sample to sample (planned sample by sample) and deviations about given means, or
over the whole batch, on a ragged batch (reduced sample by sample with CuPy). The statistics
that are not given are reduced in float64 with CuPy, over the whole ``(N, ...)`` array at once
when the samples share a shape and lie back to back in one buffer; on a ragged batch, each
sample's own mean and deviation by one launch of ``kernels/ragged_stats.cu`` for the batch
(:mod:`.normalize_stats`), else sample by sample. Every sample's
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

from stoker.errors import OperatorError
from stoker.operators.gpu_registry import (
    contiguous_samples,
    dense_view,
    flat_offsets,
    flat_output,
    grid_for,
    host_fallback,
    per_sample,
    plan_batch,
    register_gpu,
    upload_table,
    upload_tables,
)
from stoker.operators.image.normalize import param_array
from stoker.operators.image.normalize_stats import ragged_stats, stats_rows
from stoker.operators.tensor._axes import resolve_axes

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
    every sample has sample 0's extents on the axes that are not reduced (ValueError if not).
    ``shapes`` is (N, ndim)."""
    shapes = np.asarray(shapes, np.int64).reshape(len(shapes), -1)
    axes, _, _ = op._params(_shape_stub(shapes[0]), op.sample_args(arg_inputs, 0), layout)
    kept = [d for d in range(shapes.shape[1]) if d not in axes]
    bad = np.flatnonzero((shapes[:, kept] != shapes[0, kept]).any(axis=1))
    if bad.size:
        raise ValueError(f"normalize: with batch=True the non-reduced extents must agree across the "
                         f"batch; shapes {tuple(shapes[0].tolist())} and {tuple(shapes[bad[0]].tolist())} "
                         f"differ on axes {kept}")


def _batch_check(op, shapes, layout, arg_inputs) -> None:
    """:func:`_check_batch` where ``batch=True``, its error raised as the CPU raises it (naming
    the operator, no sample)."""
    if op.args["batch"]:
        try:
            _check_batch(op, shapes, layout, arg_inputs)
        except ValueError as e:
            raise OperatorError(str(e), operator=op.instance_name, origin=op.origin) from None


def sample_params(op, batch, shapes, layout: str, arg_inputs) -> list:
    """Per sample ``(axes, given mean or None, given stddev or None)`` as ``Normalize._params``
    gives them (float64 arrays shaped to broadcast), sample by sample (:func:`batch_params` is the
    batch's plan; this one takes what it cannot). Errors are raised as the CPU path raises them:
    the batch check without a sample, a sample's own argument naming its source."""
    _batch_check(op, shapes, layout, arg_inputs)
    return per_sample(op, batch, len(shapes),
                      lambda i: op._params(_shape_stub(shapes[i]), op.sample_args(arg_inputs, i), layout))


_PER_SAMPLE = "per sample"  # a given statistic one NumPy step cannot read (samples differ in shape)


def _given(op, arg_inputs, name: str, n: int):
    """A given ``mean`` / ``stddev`` for every sample, as ``_params`` reads it (``param_array``): None
    when not given, else float64 ``(n, *P)`` with ``P`` the per-sample shape (``()`` for one value
    per sample; a static value broadcast, no copy); :data:`_PER_SAMPLE` when the samples' values
    differ in shape. ValueError for values that are not numbers (as ``sample_value``)."""
    if name not in arg_inputs:
        p = param_array(op.args.get(name))
        return None if p is None else np.broadcast_to(p, (n, *p.shape))
    try:
        arr = np.asarray(arg_inputs[name])
    except ValueError:
        return _PER_SAMPLE
    if arr.dtype.kind not in "biuf":
        raise ValueError(f"argument '{name}' takes numbers per sample, got {arr.dtype} values")
    arr = arr.astype(np.float64).reshape(n, *arr.shape[1:])
    return arr.reshape(n) if arr[0].size == 1 else arr  # param_array: one value is a 0-d array


def batch_params(op, shapes: np.ndarray, layout: str, arg_inputs):
    """``Normalize._params`` for every sample of ``shapes`` (N, ndim) at once: ``(axes, mean,
    stddev)``, the given ones None or float64 ``(N, *P)`` (sample ``i``'s ``_params`` value is
    ``mean[i]``). None when the given values differ in shape from sample to sample (then
    :func:`sample_params` plans). Raises ValueError when some sample's ``_params`` fails (the
    per-sample rule then names it)."""
    n, ndim = shapes.shape
    mean, std = _given(op, arg_inputs, "mean", n), _given(op, arg_inputs, "stddev", n)
    if mean is _PER_SAMPLE or std is _PER_SAMPLE:
        return None
    a = op.args
    if a["axes"] is not None or a["axis_names"]:
        axes = resolve_axes("normalize", a["axes"], a["axis_names"], layout, ndim)
    else:  # the first given tensor (more than one value, the sample's rank) says which axes reduce
        shaped = [p for p in (mean, std) if p is not None and p.ndim - 1 == ndim and p[0].size > 1]
        axes = [d for d in range(ndim) if shaped[0].shape[d + 1] == 1] if shaped else list(range(ndim))
    kept = [d for d in range(ndim) if d not in axes]
    for name, p in (("mean", mean), ("stddev", std)):
        if p is None or p[0].size <= 1:
            continue
        pshape = p.shape[1:]
        if len(pshape) != ndim or any(pshape[d] != 1 for d in axes) or \
                (shapes[:, kept] != np.asarray([pshape[d] for d in kept], np.int64)).any():
            raise ValueError(f"normalize: argument '{name}' has shape {pshape}, which does not fit the "
                             f"samples reduced over axes {axes}")
    return axes, mean, std


def _from_samples(params):
    """The per-sample plan (:func:`sample_params`) as :func:`batch_params` gives it, with lists of
    per-sample arrays for the given statistics; None when it has no common form (then the host
    fallback runs): axes that differ between samples, statistics given for some samples only."""
    axes = params[0][0]
    if any(p[0] != axes for p in params):
        return None
    given = []
    for k in (1, 2):
        if len({p[k] is None for p in params}) > 1:
            return None
        given.append(None if params[0][k] is None else [p[k] for p in params])
    return list(axes), given[0], given[1]


def _why_host(axes, mean, std, in_type: np.dtype, out_type: np.dtype) -> str | None:
    """Why this batch goes through the host fallback, or None when the GPU path takes it.
    ``mean`` / ``std``: None, a (N, *P) array or a list of per-sample arrays."""
    if not axes or len(set(axes)) != len(axes):
        return "empty or repeated axes"
    for p in (mean, std):
        if isinstance(p, list) and any(v.size == 0 for v in p) or isinstance(p, np.ndarray) and p.size == 0:
            return "given statistics without values"
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


def _given_host(values, keeps: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """A given statistic's host table: sample ``i``'s values broadcast to its kept extents
    ``keeps[i]``, raveled, back to back (float64). ``values`` as :func:`batch_params` gives
    them, or a list of per-sample arrays."""
    if isinstance(values, list):
        host = np.concatenate([np.broadcast_to(v, tuple(k)).ravel() for v, k in zip(values, keeps.tolist())])
    elif values.ndim == 1:  # one value per sample, repeated over its kept entries
        host = np.repeat(values, sizes)
    else:  # a tensor per sample: batch_params checked that it has the sample's kept extents
        host = values.reshape(len(values), -1).ravel()
    return np.ascontiguousarray(host, np.float64)


def _given_factor(op, std):
    """``scale / sqrt(stddev^2 + epsilon)`` of given deviations (a given 0 divides as on the CPU)."""
    scale = op.args["scale"]
    with np.errstate(divide="ignore"):
        if isinstance(std, list):
            return [scale / np.asarray(op._given_std(v), np.float64) for v in std]
        return scale / np.asarray(op._given_std(std), np.float64)


def build_tables(xp, upload, op, given, keeps, parts, axes, counts, dense_n, batch_stats=None):
    """The mean and factor (``scale / stddev``) tables of a batch.

    ``given`` is ``(mean, stddev)`` as :func:`batch_params` gives them (None, a (N, *P) array or
    a list of per-sample arrays); ``keeps`` (N, ndim) the samples' kept extents. ``parts`` are
    the arrays statistics are reduced over: ``[X]`` with ``X`` the dense ``(N, ...)`` batch
    (``dense_n`` = N, ``axes`` counted with the batch axis, and including it with
    ``batch=True``), or the samples (``dense_n`` None). ``upload`` puts a host array on the device.
    ``batch_stats(need_std)``, given for a ragged batch, computes every sample's own mean (and
    deviation) for the whole batch at once, as ``compute_stats`` would (then ``parts`` is unused
    when no mean is given and ``batch`` is off).
    Returns ``((mean, shared), (factor, shared))``: flat float64 device tables where sample ``i``'s
    entries start at its offset among the kept sizes, or, ``shared``, one entry set for all."""
    a = op.args
    batch = bool(a["batch"])
    keeps = np.asarray(keeps, np.int64).reshape(len(keeps), -1)
    sizes = np.prod(keeps, axis=1, dtype=np.int64)
    keep0 = tuple(keeps[0].tolist())
    mean_tab = factor_tab = None
    if given[0] is not None:
        mean_tab = (upload(_given_host(given[0], keeps, sizes)), False)
    if given[1] is not None:
        factor_tab = (upload(_given_host(_given_factor(op, given[1]), keeps, sizes)), False)
    if mean_tab is not None and factor_tab is not None:
        return mean_tab, factor_tab
    centres = None
    if mean_tab is not None:  # deviations about the given means (sample 0's for the batch, as the CPU)
        table = mean_tab[0]
        if dense_n is not None:
            table = table.reshape((dense_n, *keep0))
            centres = [table[:1] if batch else table]
        elif batch:
            centres = [table[:int(sizes[0])].reshape(keep0)]
        else:  # statistics reduced sample by sample (a ragged batch): one centre each
            offs = flat_offsets(sizes).tolist()
            centres = [table[o:o + s].reshape(k) for o, s, k in zip(offs, sizes.tolist(), map(tuple, keeps.tolist()))]
    if batch_stats is not None and centres is None and not batch:
        means, stds = batch_stats(factor_tab is None)
    else:
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
    after merging. ``shapes`` is (N, ndim); the rows are built a dim at a time for every sample
    at once (no step per sample)."""
    shapes = np.asarray(shapes, np.int64).reshape(len(shapes), -1)
    n, ndim = shapes.shape
    red = set(axes)
    keep = shapes.copy()
    keep[:, sorted(red)] = 1  # the extents each sample's table has: the reduced axes are 1
    strides = np.ones((n, ndim), np.int64)  # row-major strides of each sample's table
    for d in range(ndim - 2, -1, -1):
        strides[:, d] = strides[:, d + 1] * keep[:, d + 1]
    width = max(ndim, _MAXD)
    exts = np.zeros((n, width), np.int64)
    tstrides = np.zeros((n, width), np.int64)
    count = np.zeros(n, np.int64)  # dims so far
    last = np.full(n, -1, np.int64)  # whether the last dim is reduced (1) or kept (0); -1: none yet
    for d in range(ndim):
        ext = shapes[:, d]
        reduced = d in red
        stride = np.zeros(n, np.int64) if reduced else strides[:, d]
        active = ext != 1  # an extent of 1 adds nothing to the entry
        # kept neighbours are adjacent in the table, so (outer, inner) folds into one dim with the
        # inner stride; reduced ones stay at stride 0
        merge = active & (last == int(reduced))
        i = np.flatnonzero(merge)
        exts[i, count[i] - 1] *= ext[i]
        tstrides[i, count[i] - 1] = stride[i]
        i = np.flatnonzero(active & ~merge)
        exts[i, count[i]] = ext[i]
        tstrides[i, count[i]] = stride[i]
        count[i] += 1
        last[i] = int(reduced)
    if n and count.max() > _MAXD:
        return None
    rows = np.zeros((n, _ROW), np.int64)
    rows[:, 2] = np.prod(shapes, axis=1, dtype=np.int64)
    rows[:, 5] = count
    rows[:, 6:6 + _MAXD] = exts[:, :_MAXD]
    rows[:, 6 + _MAXD:6 + 2 * _MAXD] = tstrides[:, :_MAXD]
    return rows


def _ragged_tables(xp, upload, op, x, ptrs, given, keeps, shapes, axes, counts):
    """:func:`build_tables` for a ragged batch ``x`` (contiguous samples at ``ptrs``): each
    sample's own statistics, when no mean is given, in one launch for the batch (host work that
    does not grow with it); deviations about given means, and ``batch=True``, sample by sample."""
    a = op.args
    rows = stats_rows(shapes, axes) if given[0] is None and not a["batch"] else None
    batch_stats = None
    if rows is not None:
        suffix, ddof, eps = _SUFFIX[x.element_dtype()], int(a["ddof"]), float(a["epsilon"])

        def batch_stats(need_std):
            return ragged_stats(xp, upload, ptrs, rows, suffix, need_std, ddof, eps)

    # the per-sample views, only where the statistics are reduced sample by sample
    samples = x.samples() if rows is None and (given[0] is None or given[1] is None) else None
    return build_tables(xp, upload, op, given, keeps, samples, tuple(axes), counts, None, batch_stats)


def _offsets(table, sizes) -> np.ndarray:
    """Where each sample's entries start in a table (all at 0 in a shared one)."""
    return np.zeros(len(sizes), np.int64) if table[1] else flat_offsets(sizes)


@register_gpu("normalize")
def gpu_normalize(op, batch, inputs, arg_inputs):
    """``fn.normalize`` on GPU batches (same types, shapes and values as the CPU operator)."""
    from stoker.backend import cuda
    from stoker.tensors_gpu import TensorListGPU

    cp = cuda.cupy()
    x = inputs[0]
    n = len(x)
    if n == 0:
        return [x]  # as the CPU: an empty batch passes through
    layout = x.layout()
    shapes = x.geometry()[2]
    _batch_check(op, shapes, layout, arg_inputs)
    planned = plan_batch(op, batch, n, lambda: batch_params(op, shapes, layout, arg_inputs),
                         lambda i: op._params(_shape_stub(shapes[i]), op.sample_args(arg_inputs, i), layout))
    if planned is None:  # given statistics whose shapes differ from sample to sample
        planned = _from_samples(sample_params(op, batch, shapes, layout, arg_inputs))
    in_type = x.element_dtype()
    out_type = np.dtype(op.args["dtype"])
    if planned is None or _why_host(*planned, in_type, out_type) is not None:
        return host_fallback(op, batch, inputs, arg_inputs)
    axes, mean, std = planned
    given = (mean, std)
    keeps = shapes.copy()
    keeps[:, axes] = 1
    sizes = np.prod(keeps, axis=1, dtype=np.int64)
    counts = np.prod(shapes[:, axes], axis=1, dtype=np.int64).tolist()
    shift = float(op.args["shift"])

    # Both statistics given: their tables stay on the host until the kernel's rows join them in one
    # copy (nothing reads them on the device before the map).
    deferred = given[0] is not None and given[1] is not None and in_type in _SUFFIX and out_type in _SUFFIX

    def upload(host):
        return host if deferred else upload_table(host, batch)

    dense = dense_view(x)
    if dense is not None:
        red = tuple(d + 1 for d in axes)
        if op.args["batch"]:
            red = (0, *red)
        count = int(np.prod([dense.shape[d] for d in red], dtype=np.int64))
        (mean, m_shared), (factor, f_shared) = build_tables(cp, upload, op, given, keeps, [dense], red,
                                                            [count], n)
        rows = kernel_rows(shapes, axes) if in_type in _SUFFIX and out_type in _SUFFIX and n <= _MAX_GRID_Y else None
        if rows is not None:  # the map in one launch (CuPy's float64 steps: 2-4 passes and a float64 temporary)
            return [_map(cuda, batch, x, rows, (mean, m_shared), (factor, f_shared), sizes, shift, out_type)]
        mean, factor = (upload_table(t, batch) if _on_host(t) else t for t in (mean, factor))
        keep0 = tuple(keeps[0].tolist())
        mean = mean.reshape((1 if m_shared else n, *keep0))
        factor = factor.reshape((1 if f_shared else n, *keep0))
        out = dense_map(cp, dense, mean, factor, shift, out_type)
        return [TensorListGPU(out, layout, x.source_info())]

    if in_type not in _SUFFIX or out_type not in _SUFFIX or n > _MAX_GRID_Y:
        return host_fallback(op, batch, inputs, arg_inputs)
    rows = kernel_rows(shapes, axes)
    if rows is None:
        return host_fallback(op, batch, inputs, arg_inputs)
    x = contiguous_samples(x)
    ptrs = x.geometry()[0]
    mean_tab, factor_tab = _ragged_tables(cp, upload, op, x, ptrs, given, keeps, shapes, axes, counts)
    return [_map(cuda, batch, x, rows, mean_tab, factor_tab, sizes, shift, out_type)]


def _on_host(table) -> bool:
    """A table still in host memory (exactly NumPy's array: the tests' null device subclasses it)."""
    return type(table) is np.ndarray


def _map(cuda, batch, x, rows, mean_tab, factor_tab, sizes, shift: float, out_type: np.dtype):
    """``(x - mean) * factor + shift`` by one launch of ``normalize.cu`` over the batch ``x``
    (contiguous samples) with the flat tables and the rows of :func:`kernel_rows`; tables still on
    the host (NumPy) go up in the rows' copy."""
    shapes = x.geometry()[2]
    rows[:, 3] = _offsets(mean_tab, sizes)
    rows[:, 4] = _offsets(factor_tab, sizes)
    sample_sizes = rows[:, 2]
    buf, offsets, out = flat_output(shapes, sample_sizes, out_type, x.layout(), x.source_info())
    if not sample_sizes.any():
        return out
    rows[:, 0] = x.geometry()[0]
    rows[:, 1] = buf.data.ptr + offsets * out_type.itemsize
    grid, block = grid_for(int(sample_sizes.max()), len(x))
    kernel = cuda.load_kernel("normalize", f"normalize_{_SUFFIX[x.element_dtype()]}_{_SUFFIX[out_type]}")
    stats = [mean_tab[0], factor_tab[0]]
    on_host = [k for k, t in enumerate(stats) if _on_host(t)]
    *uploaded, rows_d = upload_tables(batch, *(stats[k] for k in on_host), rows)
    for k, table in zip(on_host, uploaded):
        stats[k] = table
    kernel(grid, block, (rows_d, *stats, np.float64(shift)))
    return out
