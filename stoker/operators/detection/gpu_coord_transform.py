"""GPU ``coord_transform``: one launch per batch (stoker/kernels/coord_transform.cu).

The host plans the batch with NumPy in a few steps whatever its size: the input's shapes come from
the batch's flat layout, and the (out_dim, in_dim + 1) matrices are built for every sample at once
with the CPU's rules (``CoordTransform.matrix``: scalar M or MT as a uniform scale, T broadcast,
M / T / MT per sample); one matrix serves the whole batch when none of them is an argument input.
The plan (one row per sample, then the float32 matrices) goes up in one table. Anything the batch
path does not cover (samples of different in_dim, per-sample values of different sizes, an invalid
argument or shape) is planned sample by sample with the CPU's own code, which raises the CPU's
error for the first failing sample.

The kernel does the CPU's float32 arithmetic in its order (see the .cu), so the outputs equal the
CPU's to the bit; integer outputs are rounded and saturated as the CPU's ``np.clip`` intends (the
CPU differs only where its float32 clip bounds round past the type: 32- and 64-bit outputs of
2^31 (2^32, 2^63, 2^64) or more, and NaN). Per-frame M / T / MT (``fn.per_frame``) take the host
fallback (the CPU operator on the host, counted in ``gpu_registry.FALLBACKS``) for now.
"""

from __future__ import annotations

import numpy as np

from stoker.operators.gpu_registry import (
    flat_offsets,
    flat_output,
    grid_for,
    host_fallback,
    per_sample,
    register_gpu,
    upload_table,
)
from stoker.operators.per_frame import has_frame_values

COLS = 6  # the kernel's CT_COLS: in offset, out offset, out elements, in_dim, out_dim, matrix offset
# The kernel's type codes (CT_F32 ...); other input types are converted to float32 first.
TYPE_CODES = {np.dtype(t): k for k, t in enumerate(
    (np.float32, np.float64, np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64))}
MATRIX_ARGS = ("M", "T", "MT")


def one_buffer(x):
    """``(buffer, element offsets, shapes (n, ndim))`` of device batch ``x`` with every sample in
    one 1-D buffer: its own when it has one, else its samples packed back to back (one copy).
    Raises ValueError when the samples differ in number of dimensions (a list-backed batch)."""
    from stoker.backend import cuda

    parts = x.flat_parts()
    if parts is not None:
        return parts
    cp = cuda.cupy()
    samples = x.samples()
    shapes = np.asarray([s.shape for s in samples], np.int64).reshape(len(samples), -1)
    buf = cp.concatenate([s.reshape(-1) for s in samples]) if samples else cp.empty(0, x.element_dtype())
    return buf, flat_offsets([s.size for s in samples]), shapes


def _values(op, arg_inputs, name: str, n: int):
    """Argument ``name`` as float64 rows: (n, size) from an argument input, (1, size) from a
    static value, None where not given. Ragged or non-numeric values raise ValueError."""
    if name in arg_inputs:
        v = np.asarray(arg_inputs[name])
        if v.dtype.kind not in "biuf" or v.shape[:1] != (n,):
            raise ValueError(f"argument '{name}': not one numeric array of a size per batch")
        return v.astype(np.float64).reshape(n, -1)
    if op.args.get(name) is None:
        return None
    return np.asarray(op.args[name], np.float64).reshape(1, -1)


def _eye_times(in_dim: int, v):
    """``np.eye(in_dim) * v`` for each row of one value, as the CPU scales by a scalar M / MT."""
    return np.eye(in_dim) * v[:, :1, None]


def batch_matrices(op, arg_inputs, n: int, in_dim: int) -> np.ndarray:
    """``CoordTransform.matrix`` for every sample at once, as (k, out_dim, in_dim + 1) float64
    (k = 1: one for all samples, else n). Raises ValueError where the rules need a sample by
    sample look (sizes that do not fit; the CPU's rule then names the sample and the fault)."""
    mt = _values(op, arg_inputs, "MT", n)
    if mt is not None:
        k, size = mt.shape
        if size == 1:
            return np.concatenate([_eye_times(in_dim, mt), np.zeros((k, in_dim, 1))], 2)
        if size % (in_dim + 1):
            raise ValueError("MT: rows do not fit")
        return mt.reshape(k, size // (in_dim + 1), in_dim + 1)
    mv = _values(op, arg_inputs, "M", n)
    if mv is None:
        m = np.eye(in_dim)[None]
    elif mv.shape[1] == 1:
        m = _eye_times(in_dim, mv)
    elif mv.shape[1] % in_dim:
        raise ValueError("M: rows do not fit")
    else:
        m = mv.reshape(mv.shape[0], mv.shape[1] // in_dim, in_dim)
    out_dim = m.shape[1]
    tv = _values(op, arg_inputs, "T", n)
    if tv is None:
        t = np.zeros((1, out_dim))
    elif tv.shape[1] == 1:
        t = np.broadcast_to(tv, (tv.shape[0], out_dim))
    elif tv.shape[1] != out_dim:
        raise ValueError("T: size does not match out_dim")
    else:
        t = tv
    k = max(m.shape[0], t.shape[0])
    return np.concatenate([np.broadcast_to(m, (k, out_dim, in_dim)), np.broadcast_to(t, (k, out_dim))[..., None]], 2)


def _sample_plan(op, shape, dtype, args):
    """One sample's (in_dim, float32 matrix) by the CPU's own code: ``run_sample`` on an empty
    array of the sample's dimensions makes the CPU's checks (raising its errors), then
    ``matrix``."""
    shape = tuple(int(e) for e in shape)
    op.run_sample((np.zeros((0, *shape[1:]) if shape else (), dtype),), args, None)
    in_dim = shape[-1] if len(shape) > 1 else 1
    return in_dim, op.matrix(args, in_dim).astype(np.float32)


def plan(op, batch, shapes, dtype, arg_inputs):
    """The batch's kernel table and output shapes: ``(table int64, out_shapes (n, ndim), out
    sizes)``. ``shapes`` is the input's (n, ndim) array."""
    n, ndim = shapes.shape
    mats = None
    in_dims = shapes[:, -1] if ndim > 1 else np.ones(n, np.int64)
    if ndim and n and (in_dims == in_dims[0]).all() and in_dims[0] >= 1 and \
            op.out_dtype in (np.dtype(np.float32), np.dtype(dtype)):
        in_dim = int(in_dims[0])
        try:
            if any(k in arg_inputs for k in MATRIX_ARGS):
                mats = batch_matrices(op, arg_inputs, n, in_dim).astype(np.float32)
            else:
                mats = op.matrix(op.args, in_dim).astype(np.float32)[None]
        except (ValueError, TypeError):  # the per-sample rules below say whose fault, or cope
            mats = None
    if mats is not None:
        out_dims = np.full(n, mats.shape[1], np.int64)
        mat_offsets = np.arange(mats.shape[0], dtype=np.int64) * mats[0].size if mats.shape[0] > 1 \
            else np.zeros(n, np.int64)
        floats = mats.reshape(-1)
    else:
        plans = per_sample(op, batch, n, lambda i: _sample_plan(op, shapes[i], dtype, op.sample_args(arg_inputs, i)))
        in_dims = np.array([p[0] for p in plans], np.int64)
        out_dims = np.array([p[1].shape[0] for p in plans], np.int64)
        mat_offsets = flat_offsets([p[1].size for p in plans])
        floats = np.concatenate([p[1].reshape(-1) for p in plans]) if plans else np.zeros(0, np.float32)
    points = np.prod(shapes, axis=1, dtype=np.int64) // in_dims
    if ndim > 1:
        out_shapes = np.concatenate([shapes[:, :-1], out_dims[:, None]], 1)
    else:
        out_shapes = np.stack([shapes[:, 0], out_dims], 1)
    out_sizes = points * out_dims
    table = np.zeros(n * COLS + (floats.size + 1) // 2, np.int64)
    rows = table[:n * COLS].reshape(n, COLS)
    rows[:, 1], rows[:, 2], rows[:, 3], rows[:, 4], rows[:, 5] = (
        flat_offsets(out_sizes), out_sizes, in_dims, out_dims, mat_offsets)
    table[n * COLS:].view(np.float32)[:floats.size] = floats
    return table, out_shapes, out_sizes


@register_gpu("coord_transform")
def gpu_coord_transform(op, batch, inputs, arg_inputs):
    """``fn.coord_transform`` on GPU batches: one launch for the whole batch."""
    from stoker.backend import cuda
    from stoker.tensors_gpu import TensorListGPU

    x = inputs[0]
    if not isinstance(x, TensorListGPU) or has_frame_values(arg_inputs):
        return host_fallback(op, batch, inputs, arg_inputs)  # per-frame matrices: on the host for now
    layout = op.output_layouts([x.layout()])[0]
    if len(x) == 0:
        return [TensorListGPU([], layout, [])]
    try:
        buf, in_offsets, shapes = one_buffer(x)
    except ValueError:  # samples of different numbers of dimensions: the CPU copes
        return host_fallback(op, batch, inputs, arg_inputs)
    dtype = np.dtype(buf.dtype)
    table, out_shapes, out_sizes = plan(op, batch, shapes, dtype, arg_inputs)
    table[0:len(x) * COLS:COLS] = in_offsets
    out_dtype = op.out_dtype
    out_buf, _, out = flat_output(out_shapes, out_sizes, out_dtype, layout, x.source_info())
    total = int(out_sizes.sum())
    if total:
        cp = cuda.cupy()
        if dtype not in TYPE_CODES:  # float16, bool: to float32 first, exactly as astype
            buf, dtype = buf.astype(np.float32), np.dtype(np.float32)
        direct = out_dtype in TYPE_CODES
        dst = out_buf if direct else cp.empty(total, np.float32)  # float16 out: cast after
        grid, block = grid_for(int(out_sizes.max()), len(x))
        kernel = cuda.load_kernel("coord_transform", "coord_transform")
        kernel(grid, block, (buf, np.int32(TYPE_CODES[dtype]), dst, np.int32(TYPE_CODES.get(out_dtype, 0)),
                             upload_table(table, batch), np.int32(len(x))))
        if not direct:
            out_buf[:total] = dst.astype(out_dtype)
    return [out]
