"""GPU ``color_space_conversion``: uint8 channel-last batches, one kernel launch per batch into
one flat output buffer.

- 3 channels to 3 (RGB <-> BGR, RGB/BGR <-> YCbCr, and a space to itself): the per-pixel 3x3
  matrix and offset of ``kernels/linear_color.cu`` (``matrix_u8_u8``, the kernel of hsv and
  color_twist), whose float32 arithmetic and rounding (half up, saturated) are the CPU's.
- RGB/BGR -> GRAY: ``luma_u8`` of ``kernels/color_convert.cu``, OpenCV's integer formula, so
  the result is exactly the CPU operator's (it calls cv2.cvtColor).
- From or to GRAY otherwise (GRAY -> RGB/BGR/YCbCr, YCbCr -> GRAY, GRAY -> GRAY): ``affine_u8``
  of the same file, the CPU's float32 map for 1 or 3 channels in and out.

Maps come from the CPU module's ``affine_map``. Batches the kernels do not take (types other
than uint8, layouts not channel-last, a channel count that is not the input space's, empty
batches) run through the host fallback, which raises the CPU operator's errors.
"""

from __future__ import annotations

import numpy as np

from stoker import types
from stoker.operators.color.color_space_conversion import CHANNELS, affine_map
from stoker.operators.gpu_registry import (
    contiguous_samples,
    flat_offsets,
    grid_for,
    host_fallback,
    register_gpu,
    upload_table,
    upload_tables,
)

# OpenCV's uint8 RGB -> GRAY weights (0.299, 0.587, 0.114 with 15 fractional bits, summing to
# 1 << 15), in the memory order of the input's channels.
_R, _G, _B = 9798, 19235, 3735
LUMA_Q15 = {types.RGB: (_R, _G, _B), types.BGR: (_B, _G, _R)}


def _ftab(src, dst) -> np.ndarray:
    """One row of the kernels' float32 table: the map's matrix row by row, its offsets from 9."""
    matrix, offset = affine_map(src, dst)
    row = np.zeros(12, np.float32)
    matrix = np.asarray(matrix, np.float64).reshape(-1)
    row[:matrix.size] = matrix
    row[9:9 + np.size(offset)] = np.asarray(offset, np.float64).reshape(-1)
    return row


def _takes(x, shapes, channels: int) -> bool:
    """Whether the kernels take batch ``x`` whose samples have ``shapes`` (N, ndim) (what the CPU
    operator's checks accept, uint8)."""
    if len(x) == 0 or x.element_dtype() != np.uint8:
        return False
    layout = x.layout() or ""
    if layout and layout[-1] != "C":
        return False
    return shapes.shape[1] >= 2 and bool((shapes[:, -1] == channels).all())


@register_gpu("color_space_conversion")
def gpu_color_space_conversion(op, batch, inputs, arg_inputs):
    """``fn.color_space_conversion`` on GPU batches (uint8, channel-last: HWC, FHWC, ...)."""
    from stoker.backend import cuda
    from stoker.tensors_gpu import TensorListGPU

    x = inputs[0]
    src, dst = op.src, op.dst
    cin, cout = CHANNELS[src], CHANNELS[dst]
    if not isinstance(x, TensorListGPU) or len(x) == 0 or not _takes(x, x.geometry()[2], cin):
        return host_fallback(op, batch, inputs, arg_inputs)
    cp = cuda.cupy()
    x = contiguous_samples(x)
    ptrs, _, in_shapes = x.geometry()  # (no per-sample view: issue 16)
    n = len(x)
    pixels = np.prod(in_shapes[:, :-1], axis=1, dtype=np.int64)
    offsets = flat_offsets(pixels * cout)
    buf = cp.empty(max(int(pixels.sum()) * cout, 1), np.uint8)
    shapes = in_shapes.copy()
    shapes[:, -1] = cout
    out = TensorListGPU.from_flat(buf, offsets, shapes, x.layout(), x.source_info())
    if not pixels.any():
        return [out]
    itab = np.empty((n, 3), np.int64)
    itab[:, 0] = ptrs
    itab[:, 1] = buf.data.ptr + offsets  # uint8: element offsets are byte offsets
    itab[:, 2] = pixels
    grid, block = grid_for(int(pixels.max()), n)
    if dst == types.GRAY and src in LUMA_Q15:
        w = LUMA_Q15[src]
        cuda.load_kernel("color_convert", "luma_u8")(grid, block, (upload_table(itab, batch), np.int32(w[0]),
                                                                   np.int32(w[1]), np.int32(w[2])))
        return [out]
    # the same map for every sample; the tables keep linear_color's one row per sample
    it, ft = upload_tables(batch, itab, np.tile(_ftab(src, dst), (n, 1)))
    if cin == 3 and cout == 3:
        cuda.load_kernel("linear_color", "matrix_u8_u8")(grid, block, (it, ft))
    else:
        cuda.load_kernel("color_convert", "affine_u8")(grid, block, (it, ft, np.int32(cin), np.int32(cout)))
    return [out]
