"""GPU ``bb_flip`` and ``coord_flip``: one CuPy elementwise launch per batch each.

What flips comes from the CPU operators' own helpers, sample by sample on the host (``BbFlip.flips``:
the horizontal / vertical flags; ``CoordFlip.columns``: the layout, per column 2 * center in
float32 or no flip), which raise the CPU's errors for the failing sample. The device computes
every output element from its sample's row of that table with the CPU's float32 operations:
the input cast to float32 as ``astype`` casts it, then only sums and differences (``1 - hi``,
``x + w``, ``hi - lo``, ``2c - x``), which round alike on both devices; the outputs equal the
CPU's to the bit.

Boxes and points are small, so the elementwise kernel finds each element's sample by a binary
search over the output offsets instead of a per-element table. A batch whose samples lie in one
buffer (dense, or a GPU operator's flat output) is read in place; a list of separate arrays is
packed into one buffer first (one copy). A host batch (only in a direct call: a pipeline
uploads it) takes the host fallback.
"""

from __future__ import annotations

import numpy as np

from stoker.operators.gpu_registry import (
    flat_offsets,
    flat_output,
    host_fallback,
    per_sample,
    register_gpu,
    upload_table,
)

# The sample holding output element i: the last one whose output starts at or before i (an empty
# sample starts where the next one does, so it is never the last such one).
_FIND_SAMPLE = """
template <typename Offsets>
__device__ int stoker_sample_of(long long i, const Offsets& out_off, int n) {
  int lo = 0, hi = n - 1;
  while (lo < hi) {
    int mid = (lo + hi + 1) >> 1;
    if (out_off[mid] <= i) lo = mid; else hi = mid - 1;
  }
  return lo;
}
"""

# Element k of a sample is coordinate k % 4 of box k / 4. lo / hi are a box's corners along the
# element's axis d (0: x, 1: y); [x, y, w, h] boxes go through corners as the CPU does, so an
# unflipped width comes back as (x + w) - x.
_BB_FLIP = """
int s = stoker_sample_of(i, out_off, n);
long long k = i - out_off[s];
long long box = in_off[s] + k - (k & 3);
int c = (int)(k & 3), d = c & 1;
float a = (float)src[box + d], b = (float)src[box + d + 2];
float lo = a, hi = ltrb ? b : a + b;
if (flags[2 * s + d]) { float t = 1.0f - hi; hi = 1.0f - lo; lo = t; }
y = c < 2 ? lo : (ltrb ? hi : hi - lo);
"""

# Element k of a sample is column k % ndim of its point; cols[4 * s] is the sample's ndim, then
# one flip flag per column; twice[3 * s + col] is 2 * center of that column, in float32.
_COORD_FLIP = """
int s = stoker_sample_of(i, out_off, n);
long long k = i - out_off[s];
int col = (int)(k % cols[4 * s]);
float x = (float)src[in_off[s] + k];
y = cols[4 * s + 1 + col] ? twice[3 * s + col] - x : x;
"""


def _elementwise(name: str, in_params: str, body: str):
    """A cached ``cupy.ElementwiseKernel`` writing ``float32 y``, with the sample search."""
    from stoker.backend import cuda

    return cuda.elementwise_kernel(name, in_params, "float32 y", body, _FIND_SAMPLE)


def _one_buffer(x):
    """``(buffer, element offsets, shapes)`` of device batch ``x`` with every sample in one 1-D
    buffer: its own when it has one, else its samples packed back to back (one copy)."""
    from stoker.backend import cuda

    parts = x.flat_parts()
    if parts is not None:
        return parts
    cp = cuda.cupy()
    samples = x.samples()
    shapes = np.asarray([s.shape for s in samples], np.int64).reshape(len(samples), -1)
    buf = cp.concatenate([s.reshape(-1) for s in samples])
    return buf, flat_offsets([s.size for s in samples]), shapes


def _float_output(op, batch, inputs, arg_inputs, plan, run):
    """The frame both operators share: the host fallback for a host batch, an empty batch as is,
    ``plan(shape, args)`` per sample (the CPU's checks), then ``run(buffer, in_offsets,
    out_offsets, plans, out)`` over a float32 flat output of the input's shapes."""
    from stoker.tensors_gpu import TensorListGPU

    x = inputs[0]
    if not isinstance(x, TensorListGPU):
        return host_fallback(op, batch, inputs, arg_inputs)
    layout = op.output_layouts([x.layout()])[0]
    if len(x) == 0:
        return [TensorListGPU([], layout, [])]
    shapes = [tuple(int(e) for e in s) for s in x.shape()]
    plans = per_sample(op, batch, len(x), lambda i: plan(shapes[i], op.sample_args(arg_inputs, i)))
    sizes = np.asarray([int(np.prod(s, dtype=np.int64)) for s in shapes], np.int64)
    out_buf, out_offsets, out = flat_output(shapes, sizes, np.float32, layout, x.source_info())
    if sizes.any():
        buf, in_offsets, _ = _one_buffer(x)
        run(buf, in_offsets, out_offsets, plans, out_buf[:int(sizes.sum())])
    return [out]


@register_gpu("bb_flip")
def gpu_bb_flip(op, batch, inputs, arg_inputs):
    """``fn.bb_flip`` on GPU batches: float32 boxes of the input's shapes, one launch."""
    kernel = _elementwise(
        "bb_flip", "raw T src, raw int64 in_off, raw int64 out_off, raw int32 flags, int32 n, int32 ltrb", _BB_FLIP)

    def run(buf, in_offsets, out_offsets, plans, out):
        flags = np.asarray(plans, np.int32).reshape(-1)  # (horizontal, vertical) per sample
        kernel(buf, upload_table(in_offsets, batch), upload_table(out_offsets, batch), upload_table(flags, batch),
               np.int32(len(plans)), np.int32(bool(op.args["ltrb"])), out)

    return _float_output(op, batch, inputs, arg_inputs, op.flips, run)


@register_gpu("coord_flip")
def gpu_coord_flip(op, batch, inputs, arg_inputs):
    """``fn.coord_flip`` on GPU batches: float32 points of the input's shapes, one launch."""
    kernel = _elementwise(
        "coord_flip", "raw T src, raw int64 in_off, raw int64 out_off, raw int32 cols, raw float32 twice, int32 n",
        _COORD_FLIP)

    def run(buf, in_offsets, out_offsets, plans, out):
        n = len(plans)
        cols = np.zeros((n, 4), np.int32)
        twice = np.zeros((n, 3), np.float32)
        for s, columns in enumerate(plans):
            cols[s, 0] = len(columns)
            for k, value in enumerate(columns):
                if value is not None:
                    cols[s, 1 + k] = 1
                    twice[s, k] = value
        kernel(buf, upload_table(in_offsets, batch), upload_table(out_offsets, batch),
               upload_table(cols.reshape(-1), batch), upload_table(twice.reshape(-1), batch), np.int32(n), out)

    return _float_output(op, batch, inputs, arg_inputs, op.columns, run)
