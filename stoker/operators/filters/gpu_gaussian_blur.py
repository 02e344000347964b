"""GPU ``gaussian_blur`` of images (HWC / HW, uint8 or float32): each sample's two 1-D kernels
(per-sample sigma and window) are built for the whole batch at once by the CPU operator's
``GaussianBlur.batch_kernels`` (the per-sample ``kernels``' taps, bit for bit, with its checks: a
bad sample's arguments raise its own error), and the batch is filtered in two launches (rows into
a float32 scratch, then columns; ``kernels/gaussian_blur.cu``) with the CPU's mirrored borders.
Sums run in a different order than OpenCV's, so uint8 results may differ by one level where a
value sits on a rounding tie. Sequences, volumes, other types, more than 4 channels (or channel
counts that differ between samples) and per-frame arguments take the host fallback."""

from __future__ import annotations

import numpy as np

from stoker.operators.gpu_registry import (
    contiguous_samples,
    flat_offsets,
    grid_for,
    host_fallback,
    plan_batch,
    register_gpu,
    upload_table,
)
from stoker.operators.per_frame import FrameArray

_SUFFIX = {np.dtype(np.uint8): "u8", np.dtype(np.float32): "f32"}


def _kernel_takes(op, x, arg_inputs) -> bool:
    """Whether the kernels take batch ``x`` (else the host fallback runs)."""
    layout = x.layout() or ""
    if len(x) == 0 or layout not in ("", "HWC", "HW") or x.ndim not in (2, 3):
        return False
    # per-frame arguments (fn.per_frame) mark every sample; the CPU decides what they mean here
    if any(len(v) and isinstance(v[0], FrameArray) for v in arg_inputs.values()):
        return False
    out_type = np.dtype(op.args.get("dtype") or x.element_dtype())
    if x.element_dtype() not in _SUFFIX or out_type not in _SUFFIX:
        return False
    if x.ndim == 3:
        channels = x.geometry()[2][:, 2]
        return bool(channels[0] <= 4 and (channels == channels[0]).all())
    return True


@register_gpu("gaussian_blur")
def gpu_gaussian_blur(op, batch, inputs, arg_inputs):
    """``fn.gaussian_blur`` on GPU batches of images."""
    from stoker.backend import cuda
    from stoker.tensors_gpu import TensorListGPU

    x = inputs[0]
    if not _kernel_takes(op, x, arg_inputs):
        return host_fallback(op, batch, inputs, arg_inputs)
    in_type = x.element_dtype()
    out_type = np.dtype(op.args.get("dtype") or in_type)
    cp = cuda.cupy()
    x = contiguous_samples(x)
    n = len(x)
    ptrs, row, shapes = x.geometry()
    channels = int(shapes[0, 2]) if x.ndim == 3 else 1
    # (y, x) kernels of every sample; a bad sample's arguments raise that sample's CPU error
    taps_u, lengths, index = plan_batch(op, batch, n, lambda: op.batch_kernels(arg_inputs, n, 2),
                                        lambda i: op.kernels(op.sample_args(arg_inputs, i), 2))
    kmax = taps_u.shape[1]
    taps = np.empty((n, 2 * kmax), np.float32)
    taps[:, :kmax] = taps_u[index[:, 1]]  # x kernel first, y kernel from kmax (as the .cu reads them)
    taps[:, kmax:] = taps_u[index[:, 0]]
    sizes = shapes[:, 0] * shapes[:, 1] * channels
    offsets = flat_offsets(sizes)
    scratch = cp.empty(max(int(sizes.sum()), 1), cp.float32)
    buf = cp.empty(max(int(sizes.sum()), 1), out_type)
    itab = np.zeros((n, 8), np.int64)
    itab[:, 0], itab[:, 1], itab[:, 2:4] = ptrs, row, shapes[:, :2]
    itab[:, 4] = scratch.data.ptr + offsets * 4
    itab[:, 5] = buf.data.ptr + offsets * out_type.itemsize
    itab[:, 6] = (lengths[index[:, 1]] - 1) // 2
    itab[:, 7] = (lengths[index[:, 0]] - 1) // 2
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
