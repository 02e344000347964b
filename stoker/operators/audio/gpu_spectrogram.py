"""GPU ``spectrogram``: every window of every sample of a batch in one FFT call.

Plan (NumPy over the batch, no loop over samples and nothing per window): the number of windows
of each sample and where its first window falls in the batch's rows. Device work, three steps per
batch:

1. a kernel writes the windowed frames, ``(windows, nfft)`` float32 with the zero padding past
   ``window_length``, mirroring or zero-filling taps that fall outside their signal (the index
   rule of :func:`.spectrogram.window_indices`). Each row finds its sample by a binary search of
   the samples' first rows, so the host builds and uploads one small row per sample, not one per
   window (a batch of 16 utterances has ~18,000 windows: per-window arrays cost the GPU stage
   several NumPy passes, each of which lets go of the interpreter lock);
2. ``cupy.fft.rfft`` over all rows at once. The row count is rounded up to a size class (at most
   1/16 more rows, all zeros) so that cuFFT's plan, cached by shape, is reused from batch to
   batch instead of planned anew for every batch's count of windows;
3. a kernel takes each bin's power (or magnitude) and writes it in the output layout, "ft"
   (bins, windows) or "tf" (windows, bins), each sample after the other.

Values: cuFFT's float32 transform against NumPy's on the CPU; expect differences of a few 1e-7
of the sample's largest bin.
"""

from __future__ import annotations

import numpy as np

from stoker.operators.audio._gpu_common import element_dtype, grid, one_buffer, raw_kernel
from stoker.operators.gpu_registry import flat_offsets, host_fallback, register_gpu, upload_table

_KERNELS = r"""
// Frame f, tap t of a (rows, nfft) matrix. stab[3s] = sample s's first frame (non-decreasing in
// s), stab[3s+1] = its signal's offset in x, stab[3s+2] = its signal's length. Frames from `used`
// on (the row count's rounding) are zeros. Tap 0 of the sample's k-th frame is at k * step - shift.
extern "C" __global__ void stoker_spectrogram_frames(
        const float* x, const long long* stab, int nsamples, const float* window, float* frames,
        long long total, long long used, long long nfft, long long length, long long step, long long shift,
        int reflect) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
         i += (long long)gridDim.x * blockDim.x) {
        const long long f = i / nfft, t = i - f * nfft;
        float v = 0.f;
        if (t < length && f < used) {
            int lo = 0, hi = nsamples - 1;  // the last sample whose first frame is at or before f
            while (lo < hi) {
                const int mid = (lo + hi + 1) >> 1;
                if (stab[3 * mid] <= f) lo = mid; else hi = mid - 1;
            }
            const long long n = stab[3 * lo + 2];
            long long p = (f - stab[3 * lo]) * step - shift + t;
            if (reflect && n > 0) {  // mirror about both ends, the edge sample not repeated
                if (n == 1) {
                    p = 0;
                } else {
                    const long long period = 2 * n - 2;
                    long long m = p % period;
                    if (m < 0) m += period;
                    p = m < n ? m : period - m;
                }
            }
            if (p >= 0 && p < n) v = x[stab[3 * lo + 1] + p] * window[t];
        }
        frames[i] = v;
    }
}

// Sample s (grid row): stab[4s] = its first frame, stab[4s+1] = its frame count, stab[4s+2] =
// its output offset. Power 2: re^2 + im^2 rounded as NumPy rounds it; power 1: the magnitude.
extern "C" __global__ void stoker_spectrogram_power(
        const float2* spec, const long long* stab, float* out, long long nbins, int power, int freq_major) {
    const int s = blockIdx.y;
    const long long first = stab[4 * s], count = stab[4 * s + 1], off = stab[4 * s + 2];
    const long long total = count * nbins;
    for (long long q = blockIdx.x * (long long)blockDim.x + threadIdx.x; q < total;
         q += (long long)gridDim.x * blockDim.x) {
        long long k, b;
        if (freq_major) { b = q / count; k = q - b * count; } else { k = q / nbins; b = q - k * nbins; }
        const float2 z = spec[(first + k) * nbins + b];
        out[off + q] = power == 2 ? __fadd_rn(__fmul_rn(z.x, z.x), __fmul_rn(z.y, z.y)) : hypotf(z.x, z.y);
    }
}
"""


def size_class(rows: int) -> int:
    """``rows`` rounded up so that only its top five bits may be set (at most 1/16 more)."""
    if rows <= 32:
        return max(rows, 1)
    shift = rows.bit_length() - 5
    return -(-rows >> shift) << shift


def window_counts(lengths: np.ndarray, length: int, step: int, center: bool):
    """Per sample: its number of windows and the batch row of its first; and the offset of tap 0
    of a sample's window k from ``k * step`` (``shift``)."""
    if center:
        counts = lengths // step + 1
        shift = length // 2
    else:
        counts = np.where(lengths >= length, (lengths - length) // step + 1, 0)
        shift = 0
    return counts, flat_offsets(counts), shift


@register_gpu("spectrogram")
def gpu_spectrogram(op, batch, inputs, arg_inputs):
    """``spectrogram`` on a GPU batch of float32 1D signals ((T,), (T, 1) or (1, T))."""
    from stoker.backend import cuda
    from stoker.tensors_gpu import TensorListGPU

    cp = cuda._cupy()
    x = inputs[0]
    n = len(x)
    layout = op.output_layouts([x.layout()])[0]
    if n == 0:
        return [TensorListGPU([], layout, x.source_info())]
    buf, offsets, shapes = one_buffer(x)
    one_channel = x.ndim == 1 or (x.ndim == 2 and bool((shapes == 1).any(axis=1).all()))
    if not one_channel or element_dtype(x) != np.float32:
        return host_fallback(op, batch, inputs, arg_inputs)  # raises the CPU's error, naming the sample
    a = op.args
    length, step, nfft = a["window_length"], a["window_step"], op.nfft
    nbins = nfft // 2 + 1
    lengths = np.prod(shapes, axis=1, dtype=np.int64)
    counts, first, shift = window_counts(lengths, length, step, a["center_windows"])
    frames_total = int(counts.sum())
    sizes = counts * nbins
    out_offsets = flat_offsets(sizes)
    out = cp.empty(max(int(sizes.sum()), 1), cp.float32)
    if frames_total:
        rows = size_class(frames_total)  # rows past the windows: zero frames
        signals = np.stack([first, offsets, lengths], axis=1).astype(np.int64)
        frames = cp.empty((rows, nfft), cp.float32)
        total = rows * nfft
        g, b = grid(total, 1, cap=65535)
        raw_kernel(_KERNELS, "stoker_spectrogram_frames")(
            (g[0], 1, 1), b, (buf, upload_table(signals, batch), np.int32(n), upload_table(op.window, batch), frames,
                              np.int64(total), np.int64(frames_total), np.int64(nfft), np.int64(length),
                              np.int64(step), np.int64(shift),
                              np.int32(bool(a["reflect_padding"] and a["center_windows"]))))
        spec = cp.fft.rfft(frames, axis=1)
        stab = np.stack([first, counts, out_offsets, counts], axis=1).astype(np.int64)
        g, b = grid(int(sizes.max()), n)
        raw_kernel(_KERNELS, "stoker_spectrogram_power")(
            g, b, (spec, upload_table(stab, batch), out, np.int64(nbins), np.int32(a["power"]),
                   np.int32(a["layout"] == "ft")))
    out_shapes = np.stack([np.full(n, nbins), counts], 1) if a["layout"] == "ft" else \
        np.stack([counts, np.full(n, nbins)], 1)
    return [TensorListGPU.from_flat(out, out_offsets, out_shapes.astype(np.int64), layout, x.source_info())]
