"""GPU ``mel_filter_bank``, ``mfcc`` and ``to_decibels``: one or two kernel launches per batch.

``mel_filter_bank`` and ``mfcc`` are one product along an axis of every sample: each sample is
read as ``(outer, K, inner)`` around that axis and its ``K`` values are taken to ``rows`` outputs
by a ``(rows, K)`` matrix (the mel triangles, or the DCT basis with liftering). One kernel does
it for the whole batch; output row r reads only the columns where its matrix row is non-zero
(a mel band spans a few bins: ~2 products per bin instead of ``nfilter``). No BLAS call, no
transposes, any layout. Samples must share ``K`` (one matrix); a batch that does not takes the
host fallback, as do bad arguments (so that the CPU raises its error, naming the sample).

``to_decibels``: one block per sample finds its maximum where ``reference`` is 0, then one
kernel writes ``multiplier * log10(max(x / reference, floor))`` in float64, as the CPU does.
"""

from __future__ import annotations

import numpy as np

from stoker.operators.audio._gpu_common import grid, one_buffer, raw_kernel
from stoker.operators.audio.mel_filter_bank import freq_axis, mel_weights
from stoker.operators.audio.mfcc import dct_matrix
from stoker.operators.gpu_registry import flat_offsets, host_fallback, register_gpu, upload_table

_KERNELS = r"""
// Sample s: stab[4s] = input offset, stab[4s+1] = output offset, stab[4s+2] = outer, stab[4s+3]
// = inner. Output (outer, rows, inner); row r sums w[r, k] * x[o, k, i] for k in [lo[r], hi[r]).
extern "C" __global__ void stoker_audio_axis_product(
        const float* x, float* out, const long long* stab, const float* w, const int* band,
        int rows, int k_in) {
    const int s = blockIdx.y;
    const long long in_off = stab[4 * s], out_off = stab[4 * s + 1];
    const long long outer = stab[4 * s + 2], inner = stab[4 * s + 3];
    const long long total = outer * rows * inner;
    for (long long q = blockIdx.x * (long long)blockDim.x + threadIdx.x; q < total;
         q += (long long)gridDim.x * blockDim.x) {
        const long long i = q % inner, r = (q / inner) % rows, o = q / (inner * rows);
        const float* src = x + in_off + o * k_in * inner + i;
        const float* wr = w + r * (long long)k_in;
        float acc = 0.f;
        for (int k = band[2 * r]; k < band[2 * r + 1]; k++) acc += wr[k] * src[k * inner];
        out[out_off + q] = acc;
    }
}

// One block per sample: stab[2s] = offset, stab[2s+1] = size; out[s] = the largest value.
extern "C" __global__ void stoker_audio_sample_max(const float* x, const long long* stab, float* out) {
    __shared__ float part[256];
    const int s = blockIdx.x;
    const long long off = stab[2 * s], size = stab[2 * s + 1];
    float m = __int_as_float(0xff800000);  // -inf (NVRTC has no math.h macros)
    for (long long j = threadIdx.x; j < size; j += blockDim.x) m = fmaxf(m, x[off + j]);
    part[threadIdx.x] = m;
    __syncthreads();
    for (int h = blockDim.x / 2; h > 0; h /= 2) {
        if (threadIdx.x < h) part[threadIdx.x] = fmaxf(part[threadIdx.x], part[threadIdx.x + h]);
        __syncthreads();
    }
    if (threadIdx.x == 0) out[s] = part[0];
}

// Sample s: stab[3s] = input offset, stab[3s+1] = output offset, stab[3s+2] = size.
extern "C" __global__ void stoker_audio_decibels(
        const float* x, float* y, const long long* stab, const double* inv_ref, double multiplier,
        double floor_ratio) {
    const int s = blockIdx.y;
    const long long in_off = stab[3 * s], out_off = stab[3 * s + 1], size = stab[3 * s + 2];
    for (long long q = blockIdx.x * (long long)blockDim.x + threadIdx.x; q < size;
         q += (long long)gridDim.x * blockDim.x) {
        double r = (double)x[in_off + q] * inv_ref[s];
        if (!(r != r) && r < floor_ratio) r = floor_ratio;  // NaN stays NaN, as with np.maximum
        y[out_off + q] = (float)(multiplier * log10(r));
    }
}
"""


def _float_buffer(cp, x):
    buf, offsets, shapes = one_buffer(x)
    return buf.astype(cp.float32, copy=False), offsets, shapes


def bands_of(w: np.ndarray) -> np.ndarray:
    """(rows, 2) int32: the first and one past the last non-zero column of each row of ``w``."""
    nz = w != 0
    any_nz = nz.any(axis=1)
    lo = np.where(any_nz, nz.argmax(axis=1), 0)
    hi = np.where(any_nz, w.shape[1] - nz[:, ::-1].argmax(axis=1), 0)
    return np.stack([lo, hi], 1).astype(np.int32)


def axis_product(op, batch, x, axis: int, w: np.ndarray, layout: str):
    """Every sample of device batch ``x`` with its ``axis`` taken through matrix ``w`` (rows, K):
    a flat float32 TensorListGPU, ``rows`` in place of ``K`` along ``axis``."""
    from stoker.backend import cuda
    from stoker.tensors_gpu import TensorListGPU

    cp = cuda._cupy()
    buf, offsets, shapes = _float_buffer(cp, x)
    n = len(x)
    rows, k_in = w.shape
    outer = np.prod(shapes[:, :axis], axis=1, dtype=np.int64)
    inner = np.prod(shapes[:, axis + 1:], axis=1, dtype=np.int64)
    out_shapes = shapes.copy()
    out_shapes[:, axis] = rows
    sizes = outer * rows * inner
    out_offsets = flat_offsets(sizes)
    out = cp.empty(max(int(sizes.sum()), 1), cp.float32)
    if sizes.any():
        stab = np.stack([offsets, out_offsets, outer, inner], 1).astype(np.int64)
        g, b = grid(int(sizes.max()), n)
        raw_kernel(_KERNELS, "stoker_audio_axis_product")(
            g, b, (buf, out, upload_table(stab, batch), upload_table(np.ascontiguousarray(w, np.float32), batch),
                   upload_table(bands_of(w), batch), np.int32(rows), np.int32(k_in)))
    return TensorListGPU.from_flat(out, out_offsets, out_shapes, layout, x.source_info())


def _empty(op, x):
    from stoker.tensors_gpu import TensorListGPU

    return [TensorListGPU([], op.output_layouts([x.layout()])[0], x.source_info())]


@register_gpu("mel_filter_bank")
def gpu_mel_filter_bank(op, batch, inputs, arg_inputs):
    """``mel_filter_bank`` on a GPU batch of spectrograms (frequency axis from the layout)."""
    x = inputs[0]
    if len(x) == 0:
        return _empty(op, x)
    if x.ndim == 0:
        return host_fallback(op, batch, inputs, arg_inputs)
    axis = freq_axis(x.layout(), x.ndim)
    shapes = x.geometry()[2] if x.flat_parts() is None else x.flat_parts()[2]
    nbins = shapes[:, axis]
    if (nbins != nbins[0]).any():
        return host_fallback(op, batch, inputs, arg_inputs)
    a = op.args
    w = mel_weights(a["nfilter"], int(nbins[0]), a["sample_rate"], a["freq_low"], op.freq_high, a["mel_formula"],
                    a["normalize"])
    return [axis_product(op, batch, x, axis, w, op.output_layouts([x.layout()])[0])]


@register_gpu("mfcc")
def gpu_mfcc(op, batch, inputs, arg_inputs):
    """``mfcc`` on a GPU batch: the DCT along ``axis`` (liftering folded into the matrix)."""
    x = inputs[0]
    if len(x) == 0:
        return _empty(op, x)
    a = op.args
    axis = a["axis"]
    if not 0 <= axis < x.ndim:
        return host_fallback(op, batch, inputs, arg_inputs)
    shapes = x.geometry()[2] if x.flat_parts() is None else x.flat_parts()[2]
    n_in = shapes[:, axis]
    if (n_in != n_in[0]).any() or a["n_mfcc"] > int(n_in[0]):
        return host_fallback(op, batch, inputs, arg_inputs)
    m = dct_matrix(a["dct_type"], int(n_in[0]), a["n_mfcc"], a["normalize"], a["lifter"])
    return [axis_product(op, batch, x, axis, m, op.output_layouts([x.layout()])[0])]


@register_gpu("to_decibels")
def gpu_to_decibels(op, batch, inputs, arg_inputs):
    """``to_decibels`` on a GPU batch (float32 out, the input's shapes and layout)."""
    from stoker.backend import cuda
    from stoker.tensors_gpu import TensorListGPU

    cp = cuda._cupy()
    x = inputs[0]
    n = len(x)
    if n == 0:
        return _empty(op, x)
    a = op.args
    buf, offsets, shapes = _float_buffer(cp, x)
    sizes = np.prod(shapes, axis=1, dtype=np.int64)
    out_offsets = flat_offsets(sizes)
    out = cp.empty(max(int(sizes.sum()), 1), cp.float32)
    if sizes.any():
        if float(a["reference"]) == 0.0:
            peaks = cp.empty(n, cp.float32)
            raw_kernel(_KERNELS, "stoker_audio_sample_max")(
                (n, 1, 1), (256, 1, 1), (buf, upload_table(np.stack([offsets, sizes], 1), batch), peaks))
            ref = peaks.astype(cp.float64)
            inv_ref = cp.where(ref != 0, 1.0 / cp.where(ref != 0, ref, 1.0), 0.0)
        else:
            inv_ref = cp.full(n, 1.0 / float(a["reference"]), cp.float64)
        stab = np.stack([offsets, out_offsets, sizes], 1).astype(np.int64)
        g, b = grid(int(sizes.max()), n)
        raw_kernel(_KERNELS, "stoker_audio_decibels")(
            g, b, (buf, out, upload_table(stab, batch), inv_ref, np.float64(a["multiplier"]),
                   np.float64(10.0 ** (a["cutoff_db"] / a["multiplier"]))))
    layout = op.output_layouts([x.layout()])[0]
    return [TensorListGPU.from_flat(out, out_offsets, shapes, layout, x.source_info())]
