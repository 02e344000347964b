"""GPU ``lookup_table``, ``one_hot`` and ``element_extract``.

``lookup_table`` gathers through a device copy of the CPU operator's own table (already in the
output type, with the default value appended for keys outside it): one elementwise launch over a
dense batch or a ragged batch's buffer, else one per sample. ``one_hot`` writes each output
element from the index it encodes, the new axis placed by ``(outer, class, inner)`` arithmetic, in
one launch for a dense batch and for a ragged one in one buffer with the new axis last; other
batches sample by sample; float labels count by their truncated value, as the CPU's int64 cast
(NaN, infinities and values past int64 are no class: what that cast gives on x86). ``element_extract``
returns views of the chosen frames, no copy (they hold the whole input batch's memory while alive).

All three only move or compare values, so the results equal the CPU's to the bit. What runs
through the host fallback instead (and so fails as the CPU fails): inputs of a type the CPU
rejects (lookup_table: not integers), an ``axis`` out of range or a batch whose outputs would
differ in rank (one_hot), scalar samples or an index out of range (element_extract).
"""

from __future__ import annotations

import numpy as np

from stoker import types
from stoker.operators.gpu_registry import DOUBLE_OF_ANY, host_fallback, register_gpu, upload_table


def _elementwise(name: str, in_params: str, out_params: str, body: str, preamble: str = ""):
    """A cached ``cupy.ElementwiseKernel``."""
    from stoker.backend import cuda

    return cuda.elementwise_kernel(name, in_params, out_params, body, preamble)


def _input_dtype(x) -> np.dtype:
    """The element type of device batch ``x`` (non-empty) as a NumPy dtype."""
    return np.dtype(types.to_numpy_type(x.dtype))


def _used(offsets, shapes) -> int:
    """Elements of a flat buffer up to the end of its last sample (the rest is not read)."""
    sizes = np.prod(shapes, axis=1, dtype=np.int64) if shapes.shape[1] else np.ones(len(offsets), np.int64)
    return int((offsets + sizes).max()) if len(offsets) else 0


def _map_batch(x, fn, layout: str):
    """``fn(array) -> array`` (same shape) over batch ``x``: once over a dense array or a ragged
    batch's buffer, else per sample."""
    from stoker.tensors_gpu import TensorListGPU

    dense = x.dense()
    if dense is not None:
        return TensorListGPU(fn(dense), layout, x.source_info())
    parts = x.flat_parts()
    if parts is not None:
        buf, offsets, shapes = parts
        return TensorListGPU.from_flat(fn(buf[:_used(offsets, shapes)]), offsets, shapes, layout, x.source_info())
    return TensorListGPU([fn(s) for s in x.samples()], layout, x.source_info())


# --- lookup_table ----------------------------------------------------------------------------

@register_gpu("lookup_table")
def gpu_lookup_table(op, batch, inputs, arg_inputs):
    """``fn.lookup_table`` on GPU batches: ``table[key]`` for keys in the table, else the default."""
    from stoker.backend import cuda
    from stoker.tensors_gpu import TensorListGPU

    x = inputs[0]
    layout = op.output_layouts([x.layout()])[0]
    if not isinstance(x, TensorListGPU):
        return host_fallback(op, batch, inputs, arg_inputs)
    if len(x) == 0:
        return [TensorListGPU([], layout, [])]
    if _input_dtype(x).kind not in "iu":
        return host_fallback(op, batch, inputs, arg_inputs)  # the CPU's error for other types
    cp = cuda.cupy()
    n = len(op.table)
    # The default after the table: every key outside [0, n) reads entry n.
    table = upload_table(np.append(op.table, op.default.astype(op.table.dtype)), batch)
    # A 64-bit unsigned key past 2**63 turns negative here: outside the table, as on the CPU.
    gather = _elementwise("lookup", "T x, raw O table, int64 n", "O y",
                          "long long k = (long long)x; y = table[(k >= 0 && k < n) ? k : n];")

    def lookup(a):
        out = cp.empty(a.shape, table.dtype)
        return gather(a, table, np.int64(n), out)

    return [_map_batch(x, lookup, layout)]


# --- one_hot ---------------------------------------------------------------------------------

# Output element i = ((o * n) + c) * inner + j encodes input element o * inner + j at class c.
# The CPU compares the index cast to int64 with c: for integers that is the value itself; for
# floats it is trunc(v), and NaN, infinities and values past int64 match no class. Comparing
# trunc(double(v)) with c gives the same for every type (doubles are exact for small integers).
_ONE_HOT_BODY = """
long long j = i % inner;
long long c = (i / inner) % n;
long long o = i / (inner * n);
y = pair[trunc(stoker_dbl(x[o * inner + j])) == (double)c ? 1 : 0];
"""


def _one_hot_shape(op, shape) -> tuple | None:
    """A sample's ``(effective shape, position of the new axis)`` as the CPU treats it (a
    one-element sample counts as a scalar), or None when the CPU rejects the axis."""
    shape = tuple(int(d) for d in shape)
    if int(np.prod(shape)) == 1:
        shape = ()
    axis = int(op.args["axis"])
    if not -1 <= axis <= len(shape):
        return None
    return shape, len(shape) if axis == -1 else axis


@register_gpu("one_hot")
def gpu_one_hot(op, batch, inputs, arg_inputs):
    """``fn.one_hot`` on GPU batches: ``num_classes`` values per index along a new axis."""
    from stoker.backend import cuda
    from stoker.tensors_gpu import TensorListGPU

    x = inputs[0]
    layout = op.output_layouts([x.layout()])[0]
    if not isinstance(x, TensorListGPU):
        return host_fallback(op, batch, inputs, arg_inputs)
    if len(x) == 0:
        return [TensorListGPU([], layout, [])]
    plans = [_one_hot_shape(op, s) for s in x.shape()]
    if any(p is None for p in plans) or len({len(p[0]) for p in plans}) > 1:
        return host_fallback(op, batch, inputs, arg_inputs)  # the CPU's error, or mixed ranks
    cp = cuda.cupy()
    n = int(op.args["num_classes"])
    pair = upload_table(np.stack([op.off, op.on]).astype(op.on.dtype), batch)
    encode = _elementwise("one_hot", "raw T x, raw O pair, int64 n, int64 inner", "O y", _ONE_HOT_BODY,
                          DOUBLE_OF_ANY)

    def run(flat, out_shape, inner):
        out = cp.empty(out_shape, pair.dtype)
        return encode(flat, pair, np.int64(n), np.int64(inner), out)

    def out_shape(shape, pos):
        return (*shape[:pos], n, *shape[pos:])

    shapes = [p[0] for p in plans]
    dense = x.dense()
    if dense is not None:
        shape, pos = plans[0]
        flat = cp.ascontiguousarray(dense).reshape(-1)
        out = run(flat, (len(x), *out_shape(shape, pos)), int(np.prod(shape[pos:])))
        return [TensorListGPU(out, layout, x.source_info())]
    parts = x.flat_parts()
    if parts is not None and all(pos == len(shape) for shape, pos in plans):
        buf, offsets, in_shapes = parts  # new axis last: each buffer element becomes n, gaps included
        used = _used(offsets, in_shapes)
        out = run(buf[:used], (used * n,), 1)
        return [TensorListGPU.from_flat(out, offsets * n, [out_shape(s, len(s)) for s in shapes], layout,
                                        x.source_info())]
    outs = []
    for a, (shape, pos) in zip(x.samples(), plans):
        outs.append(run(cp.ascontiguousarray(a).reshape(-1), out_shape(shape, pos), int(np.prod(shape[pos:]))))
    return [TensorListGPU(outs, layout, x.source_info())]


# --- element_extract -------------------------------------------------------------------------

@register_gpu("element_extract")
def gpu_element_extract(op, batch, inputs, arg_inputs):
    """``fn.element_extract`` on GPU batches: for each index in ``element_map``, that element of
    every sample's outermost axis, as a view of the input (the input batch is kept alive by it)."""
    from stoker.tensors_gpu import TensorListGPU

    x = inputs[0]
    layouts = op.output_layouts([x.layout()])
    emap = [int(e) for e in op.args["element_map"]]
    if not isinstance(x, TensorListGPU):
        return host_fallback(op, batch, inputs, arg_inputs)
    if len(x) == 0:
        return [TensorListGPU([], lay, []) for lay in layouts]
    if x.ndim < 1:
        return host_fallback(op, batch, inputs, arg_inputs)  # the CPU's error for scalars
    shapes = np.asarray(x.shape(), np.int64).reshape(len(x), -1)
    if any(not 0 <= e < int(shapes[:, 0].min()) for e in emap):
        return host_fallback(op, batch, inputs, arg_inputs)  # the CPU's error, naming the sample
    src = x.source_info()
    dense = x.dense()
    if dense is not None:
        return [TensorListGPU(dense[:, e], lay, src, keep_alive=x) for e, lay in zip(emap, layouts)]
    parts = x.flat_parts()
    if parts is not None:
        buf, offsets, _ = parts
        frame = np.prod(shapes[:, 1:], axis=1).astype(np.int64)  # elements of one outer element
        return [TensorListGPU.from_flat(buf, offsets + e * frame, shapes[:, 1:], lay, src, keep_alive=x)
                for e, lay in zip(emap, layouts)]
    samples = x.samples()
    return [TensorListGPU([s[e] for s in samples], lay, src, keep_alive=x) for e, lay in zip(emap, layouts)]
