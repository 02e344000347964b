"""GPU ``preemphasis_filter``, ``nonsilent_region`` and ``audio_resample`` over whole batches.

Each works on the batch's one flat device buffer (samples back to back, gaps between them
allowed) with tables built by NumPy over the batch, never sample by sample:

* ``preemphasis_filter``: float32 signals in one kernel (``stoker/kernels/preemphasis.cu``);
  other types as the shifted buffer, its first element of each sample replaced by the border
  value, ``x - c * prev`` in CuPy passes. Either way the CPU's float32 operations, so the same
  values.
* ``nonsilent_region``: the batch as an (N, longest) zero-padded matrix of squares, windowed
  sums from a float64 running sum along each row, per-row threshold and first/last loud sample
  with ``argmax``. Outputs begin and length as int32 scalars on the device. The CPU repeats
  DALI's float32 running sum with its rounding; this one sums in float64, so a region whose end is
  decided by that rounding (quiet noise right after a long loud burst) may end elsewhere.
* ``audio_resample``: one kernel, a thread per output sample, with the CPU's filter table and its
  float32 position steps (see :mod:`._resampling`), so outputs agree with the CPU's within float32
  summation order (~1e-6).

Arguments or inputs outside what these handle (bad values included, so that the error is the
CPU's, naming the sample) take the host fallback.
"""

from __future__ import annotations

import numpy as np

from stoker.operators.audio._convert import AUDIO_TYPES
from stoker.operators.audio._gpu_common import (
    cast_saturate,
    element_dtype,
    from_float,
    grid,
    one_buffer,
    raw_kernel,
    to_float,
)
from stoker.operators.audio._resampling import _window, lobes_for_quality
from stoker.operators.gpu_registry import batch_column, flat_offsets, host_fallback, register_gpu, upload_table

_BORDERS = {"zero": 0, "clamp": 1, "reflect": 2}  # (preemphasis.cu's border codes)


def _empty(op, x):
    from stoker.tensors_gpu import TensorListGPU

    return [TensorListGPU([], layout, x.source_info()) for layout in op.output_layouts([x.layout()])]


def _span(offsets, sizes) -> tuple[int, int]:
    """The part ``[start, end)`` of the buffer the samples occupy."""
    if not sizes.any():
        return 0, 0
    return int(offsets.min()), int((offsets + sizes).max())


def _sample_of_element(cp, starts, count: int):
    """For each of ``count`` elements, the index of the sample whose (sorted) start precedes it:
    one binary search per element on the device."""
    order = np.argsort(starts, kind="stable")
    pos = cp.searchsorted(cp.asarray(starts[order]), cp.arange(count, dtype=cp.int64), side="right") - 1
    return cp.asarray(order)[cp.maximum(pos, 0)]


@register_gpu("preemphasis_filter")
def gpu_preemphasis(op, batch, inputs, arg_inputs):
    """``preemphasis_filter`` on a GPU batch: samples read as one sequence in memory order."""
    from stoker.backend import cuda
    from stoker.tensors_gpu import TensorListGPU

    cp = cuda._cupy()
    x = inputs[0]
    n = len(x)
    if n == 0:
        return _empty(op, x)
    buf, offsets, shapes = one_buffer(x)
    sizes = np.prod(shapes, axis=1, dtype=np.int64)
    start, end = _span(offsets, sizes)
    layout = op.output_layouts([x.layout()])[0]
    coef = batch_column(op, arg_inputs, "preemph_coeff", n, 0.97).astype(np.float32)
    if np.dtype(buf.dtype) == np.float32 and np.dtype(op.dtype) == np.float32:
        # float32 in and out (the speech front end): one kernel, one table, instead of the ten
        # CuPy steps below (the most host time of the GPU front end's operators, py-spy on an H100)
        y = cp.empty(max(end - start, 1), cp.float32)
        if end > start:
            table = np.stack([offsets - start, sizes], axis=1).astype(np.int64)
            g, b = grid(int(sizes.max()), n)
            cuda.load_kernel("preemphasis", "preemphasis_f32")(
                g, b, (buf[start:end], y, upload_table(table, batch), upload_table(coef, batch),
                       np.int32(_BORDERS[op.args["border"]])))
        return [TensorListGPU.from_flat(y, offsets - start, shapes, layout, x.source_info())]
    xf = buf[start:end].astype(cp.float32, copy=False)
    prev = cp.empty(end - start, cp.float32)
    if end > start:
        prev[1:] = xf[:-1]
        prev[0] = 0
    first = (offsets - start)[sizes > 0]
    if first.size:
        border = op.args["border"]
        if border == "zero":
            prev[upload_table(first, batch)] = 0
        else:
            # clamp reads x[0], reflect x[1] (x[0] for a one-sample signal), as the CPU does
            src = first + ((sizes[sizes > 0] >= 2) if border == "reflect" else 0)
            prev[upload_table(first, batch)] = xf[upload_table(src, batch)]
    if (coef == coef[0]).all():
        c = coef[0]
    else:  # per-sample coefficients: each element takes its sample's
        c = upload_table(coef, batch)[_sample_of_element(cp, offsets - start, end - start)]
    y = cast_saturate(cp, xf - c * prev, op.dtype)
    return [TensorListGPU.from_flat(y.reshape(-1), offsets - start, shapes, layout, x.source_info())]


@register_gpu("nonsilent_region")
def gpu_nonsilent_region(op, batch, inputs, arg_inputs):
    """``nonsilent_region`` on a GPU batch of 1D signals: (begin, length), int32 scalars."""
    from stoker.backend import cuda
    from stoker.tensors_gpu import TensorListGPU

    cp = cuda._cupy()
    x = inputs[0]
    n = len(x)
    a = op.args
    window, ri = a["window_length"], a["reset_interval"]
    if n == 0:
        return _empty(op, x)
    is_float = element_dtype(x).kind == "f"
    if x.ndim != 1 or a["reference_power"] < 0 or (is_float and ri != -1 and (ri < 1 or ri % window)):
        return host_fallback(op, batch, inputs, arg_inputs)  # raises the CPU's error, naming the sample
    buf, offsets, shapes = one_buffer(x)
    lengths = shapes[:, 0]
    longest = int(lengths.max())
    if longest == 0:
        zeros = cp.zeros(n, cp.int32)
        return [TensorListGPU(zeros, "", x.source_info()), TensorListGPU(zeros.copy(), "", x.source_info())]
    col = cp.arange(longest, dtype=cp.int64)
    inside = col[None, :] < upload_table(lengths, batch)[:, None]
    idx = cp.minimum(upload_table(offsets, batch)[:, None] + col[None, :], buf.size - 1)
    squares = cp.where(inside, buf[idx].astype(cp.float64) ** 2, 0.0)
    sums = cp.cumsum(squares, axis=1)
    if longest > window:  # the window's sum: the running sum less the one `window` samples back
        sums[:, window:] -= sums[:, :longest - window].copy()
    power = (sums * (1.0 / window)).astype(cp.float32)
    power = cp.where(inside, power, cp.float32(-np.inf))
    factor = np.float32(10.0 ** (a["cutoff_db"] / 10.0))
    if a["reference_power"]:
        ref = cp.full(n, np.float32(a["reference_power"]), cp.float32)
    else:
        ref = power.max(axis=1)
    loud = power >= (ref * factor).astype(cp.float32)[:, None]  # float32 products, as on the CPU
    found = loud.any(axis=1)
    first = cp.argmax(loud, axis=1)
    last = longest - 1 - cp.argmax(loud[:, ::-1], axis=1)
    begin = cp.maximum(first - (window - 1), 0)
    length = cp.where(found, last + 1 - begin, 0).astype(cp.int32)
    begin = cp.where(found, begin, 0).astype(cp.int32)
    return [TensorListGPU(begin, "", x.source_info()), TensorListGPU(length, "", x.source_info())]


# One thread per output sample (and channel loop). The input position is the CPU's: a float64
# restart every 256 outputs, then float32 steps (rounded as the CPU rounds them, hence the
# explicit _rn operations, which the compiler may not fuse into multiply-adds).
_RESAMPLE = r"""
extern "C" __global__ void stoker_audio_resample(
        const float* in, float* out, const long long* itab, const double* scales,
        const float* table, int table_size, int lobes, float wscale, float wcenter) {
    const int s = blockIdx.y;
    const long long in_off = itab[5 * s], n_in = itab[5 * s + 1], out_off = itab[5 * s + 2];
    const long long out_len = itab[5 * s + 3], C = itab[5 * s + 4];
    const double scale = scales[s];
    const float step = (float)scale;
    for (long long o = blockIdx.x * (long long)blockDim.x + threadIdx.x; o < out_len;
         o += (long long)gridDim.x * blockDim.x) {
        const long long block = o / 256;
        const double start = (double)(block * 256) * scale;
        const double base = floor(start);
        float frac = (float)(start - base);
        for (int j = 0; j < (int)(o % 256); j++) frac = __fadd_rn(frac, step);
        const long long ibase = (long long)base;
        const int rel0 = (int)ceilf(frac) - lobes;
        for (long long c = 0; c < C; c++) {
            float acc = 0.f;
            for (int t = 0; t < 2 * lobes; t++) {
                const int rel = rel0 + t;
                const long long idx = ibase + rel;
                if (idx < 0 || idx >= n_in) continue;
                const float fi = __fadd_rn(__fmul_rn(__fsub_rn((float)rel, frac), wscale), wcenter);
                const float fl = floorf(fi);
                int i = (int)fl;
                i = i < 0 ? 0 : (i > table_size - 2 ? table_size - 2 : i);
                const float lo = table[i];
                const float w = __fadd_rn(lo, __fmul_rn(__fsub_rn(fi, fl), __fsub_rn(table[i + 1], lo)));
                acc += w * in[in_off + idx * C + c];
            }
            out[out_off + o * C + c] = acc;
        }
    }
}
"""


def _ratio_plan(op, arg_inputs, n_in):
    """(in_rate, out_rate, out_len) per sample, as the CPU computes them, or None where an
    argument is missing, doubled or out of range (the host fallback then raises the CPU's error)."""
    n = n_in.size
    given = {k for k in ("in_rate", "out_rate", "scale", "out_length")
             if op.args.get(k) is not None or k in arg_inputs}
    if ("in_rate" in given) != ("out_rate" in given) or \
            ("in_rate" in given) + ("scale" in given) + ("out_length" in given) != 1:
        return None

    def f32(name):  # DALI holds these as float32 (see resample._f32)
        return batch_column(op, arg_inputs, name, n, 0.0).astype(np.float32).astype(np.float64)

    if "in_rate" in given:
        in_rate, out_rate = f32("in_rate"), f32("out_rate")
        if not ((in_rate > 0).all() and (out_rate >= 0).all()):
            return None
    elif "scale" in given:
        in_rate, out_rate = np.ones(n), f32("scale")
        if not (out_rate >= 0).all():
            return None
    else:
        out_len = batch_column(op, arg_inputs, "out_length", n, 0.0).astype(np.int64)
        if (out_len < 0).any() or ((n_in == 0) & (out_len > 0)).any():
            return None
        return np.where(n_in > 0, n_in, 1).astype(np.float64), np.where(out_len > 0, out_len, 1).astype(
            np.float64), out_len
    out_len = np.ceil(n_in * out_rate / in_rate).astype(np.int64)
    return in_rate, out_rate, np.where(out_rate == 0, 0, out_len)


@register_gpu("audio_resample")
def gpu_audio_resample(op, batch, inputs, arg_inputs):
    """``audio_resample`` on a GPU batch of (T,) or (T, C) signals: one kernel launch."""
    from stoker.backend import cuda
    from stoker.tensors_gpu import TensorListGPU

    cp = cuda._cupy()
    x = inputs[0]
    n = len(x)
    if n == 0:
        return _empty(op, x)
    in_dtype = element_dtype(x)
    dtype = op.dtype or in_dtype
    if x.ndim not in (1, 2) or np.dtype(dtype) not in AUDIO_TYPES:
        return host_fallback(op, batch, inputs, arg_inputs)
    buf, offsets, shapes = one_buffer(x)
    n_in = shapes[:, 0]
    plan = _ratio_plan(op, arg_inputs, n_in)
    if plan is None:
        return host_fallback(op, batch, inputs, arg_inputs)
    in_rate, out_rate, out_len = plan
    channels = shapes[:, 1] if x.ndim == 2 else np.ones(n, np.int64)
    sizes = out_len * channels
    out_offsets = flat_offsets(sizes)
    out = cp.zeros(max(int(sizes.sum()), 1), cp.float32)
    src = to_float(cp, buf)
    if sizes.any():
        lobes = lobes_for_quality(op.args["quality"])
        table, wscale, wcenter = _window(lobes)
        itab = np.stack([offsets, n_in, out_offsets, out_len, channels], axis=1).astype(np.int64)
        scales = np.where(out_rate > 0, in_rate / np.where(out_rate > 0, out_rate, 1.0), 1.0)
        kern = raw_kernel(_RESAMPLE, "stoker_audio_resample")
        g, b = grid(int(out_len.max()), n)
        kern(g, b, (src, out, upload_table(itab, batch), upload_table(scales.astype(np.float64), batch),
                    upload_table(table, batch), np.int32(table.size), np.int32(lobes), np.float32(wscale),
                    np.float32(wcenter)))
    result = from_float(cp, out, dtype)
    out_shapes = np.stack([out_len, channels], 1) if x.ndim == 2 else out_len[:, None]
    layout = op.output_layouts([x.layout()])[0]
    return [TensorListGPU.from_flat(result, out_offsets, out_shapes, layout, x.source_info())]
