"""GPU ``gaussian_blur`` of images (HWC / HW, uint8 or float32): each sample's two 1-D kernels
come from the CPU operator (``GaussianBlur.kernels``, per-sample sigma and window), and the batch
is filtered in two launches (rows into a float32 scratch, then columns; ``kernels/gaussian_blur.cu``)
with the CPU's mirrored borders. Sums run in a different order than OpenCV's, so uint8 results may
differ by one level where a value sits on a rounding tie. Sequences, volumes, other types and
more than 4 channels take the host fallback."""

from __future__ import annotations

import numpy as np

from stoker.operators.gpu_registry import (
    contiguous_samples,
    flat_offsets,
    grid_for,
    host_fallback,
    per_sample,
    register_gpu,
    upload_table,
)

_SUFFIX = {np.dtype(np.uint8): "u8", np.dtype(np.float32): "f32"}


@register_gpu("gaussian_blur")
def gpu_gaussian_blur(op, batch, inputs, arg_inputs):
    """``fn.gaussian_blur`` on GPU batches of images."""
    from stoker.backend import cuda
    from stoker.tensors_gpu import TensorListGPU

    x = inputs[0]
    layout = x.layout() or ""
    if len(x) == 0 or layout not in ("", "HWC", "HW") or x.ndim not in (2, 3):
        return host_fallback(op, batch, inputs, arg_inputs)
    in_type = np.dtype(x.samples()[0].dtype)
    out_type = np.dtype(op.args.get("dtype") or in_type)
    channels = x.shape()[0][2] if x.ndim == 3 else 1
    if in_type not in _SUFFIX or out_type not in _SUFFIX or channels > 4:
        return host_fallback(op, batch, inputs, arg_inputs)
    cp = cuda._cupy()
    x = contiguous_samples(x)
    n = len(x)
    ptrs, row, shapes = x.geometry()
    kernels = per_sample(op, batch, n, lambda i: op.kernels(op.sample_args(arg_inputs, i), 2))  # (y, x)
    kmax = max(max(len(ky), len(kx)) for ky, kx in kernels)
    taps = np.zeros((n, 2 * kmax), np.float32)
    for i, (ky, kx) in enumerate(kernels):
        taps[i, :len(kx)] = kx
        taps[i, kmax:kmax + len(ky)] = ky
    sizes = shapes[:, 0] * shapes[:, 1] * channels
    offsets = flat_offsets(sizes)
    scratch = cp.empty(max(int(sizes.sum()), 1), cp.float32)
    buf = cp.empty(max(int(sizes.sum()), 1), out_type)
    itab = np.zeros((n, 8), np.int64)
    itab[:, 0], itab[:, 1], itab[:, 2:4] = ptrs, row, shapes[:, :2]
    itab[:, 4] = scratch.data.ptr + offsets * 4
    itab[:, 5] = buf.data.ptr + offsets * out_type.itemsize
    itab[:, 6] = [(len(kx) - 1) // 2 for _, kx in kernels]
    itab[:, 7] = [(len(ky) - 1) // 2 for ky, _ in kernels]
    out = TensorListGPU.from_flat(buf, offsets, shapes, x.layout(), x.source_info())
    if not sizes.any():
        return [out]
    it, tt = upload_table(itab, batch), upload_table(taps, batch)
    grid, block = grid_for(int((shapes[:, 0] * shapes[:, 1]).max()), n)
    args = (it, tt, np.int32(channels), np.int32(kmax))
    cuda.load_kernel("gaussian_blur", f"blur_rows_{_SUFFIX[in_type]}")(grid, block, args)
    cuda.load_kernel("gaussian_blur", f"blur_columns_{_SUFFIX[out_type]}")(grid, block, args)
    # the scratch goes back to the pool now: reuse is ordered after these launches on this stream
    return [out]
