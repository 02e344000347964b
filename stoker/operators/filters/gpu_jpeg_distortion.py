"""GPU ``jpeg_compression_distortion``: the CPU operator's pixels (libjpeg-turbo's encode at the
sample's quality, 4:2:0, and decode, through cv2) computed by ``kernels/jpeg_distortion.cu``, a
transcription of ``jpeg_distortion_model`` (the codec's lossy integer steps; the entropy coding
between them is lossless, so it is left out). The model equals the codec bit for bit on the data
its tests and their docstring list; the kernel does the model's integer operations in the same
order.

Per batch: one table upload and two launches, whatever the number of samples.

- The work unit is an image: an HWC sample, or each frame of an FHWC sample. The host plans the
  batch with NumPy over the samples' shapes (:func:`plan_images`, no step per sample): one table row
  per non-empty image with its source, destination and scratch pointers, size, the offset of its
  quantization tables, and the exclusive prefix sums of MCUs and pixels by which the kernels'
  threads find their image (a binary search over the rows). The tables of the batch's distinct
  qualities (``jpeg_distortion_model.quant_table_rows``) follow the rows in the same upload.
- ``jpeg_mcu``: a thread block per 16x16 MCU encodes and decodes its 4 Y and 2 chroma blocks into a
  scratch buffer (the decoded Y plane and the half-size Cb and Cr planes of every image).
- ``jpeg_upsample_rgb``: a thread per pixel upsamples the chroma (it reads across MCU borders,
  hence the second launch) and converts to RGB.

The checks and their messages are the CPU operator's (uint8, HWC or FHWC, 3 channels, a
channel-last layout), raised for the first sample that fails them; empty samples pass through.
Batches on the host take the host path.
"""

from __future__ import annotations

import numpy as np

from stoker.operators.filters import jpeg_distortion_model as model
from stoker.operators.gpu_registry import (
    contiguous_samples,
    flat_offsets,
    flat_output,
    host_fallback,
    register_gpu,
    upload_table,
)
from stoker.operators.image.geometry_batch import plan_rows, sample_scalars

TAB_COLS = 8  # as in jpeg_distortion.cu
SRC, DST, HEIGHT, WIDTH, SCRATCH, QUANT, FIRST_MCU, FIRST_PIXEL = range(TAB_COLS)
MCU_THREADS = 64  # jpeg_mcu's block size (MCU_THREADS in the .cu)
PIXEL_THREADS = 256


def first_failure(shapes: np.ndarray, dtype, layout: str) -> tuple[int, str] | None:
    """(index, message) of the first sample the CPU operator's ``run_sample`` refuses, in the
    order of its checks (layout, channels, then type and rank), or None. ``shapes``: (n, ndim)."""
    shapes = np.asarray(shapes, np.int64)
    n, ndim = shapes.shape
    if n == 0:
        return None
    if layout and layout[-1] != "C":
        return 0, f"expects a channel-last layout such as 'HWC', got '{layout}'"
    channels_bad = np.ones(n, bool) if ndim < 2 else shapes[:, -1] != 3
    type_bad = np.dtype(dtype) != np.uint8 or ndim not in (3, 4)
    bad = np.flatnonzero(channels_bad | type_bad)
    if not bad.size:
        return None
    i = int(bad[0])
    shape = tuple(int(d) for d in shapes[i])
    if channels_bad[i]:
        return i, f"expects 3 channels in the last dimension, got shape {shape}"
    return i, f"expects uint8 HWC or FHWC RGB input, got {np.dtype(dtype)} of shape {shape}"


def quality_rows(op, arg_inputs, n: int) -> tuple[np.ndarray]:
    """``(qualities,)``: every sample's quality as the CPU takes it (the first value, truncated to
    an integer, clamped to 1..100; 50 when not given), int64, for the whole batch at once.
    ValueError for a value that is not finite (the per-sample rule then names the sample)."""
    q = sample_scalars(op, arg_inputs, "quality", n, 50.0)
    if not np.isfinite(q).all():
        raise ValueError("argument 'quality' must be finite")
    return (np.clip(np.trunc(q), 1, 100).astype(np.int64),)


def quality_one(op, arg_inputs, i: int) -> tuple[int]:
    """Sample ``i``'s quality by the CPU operator's own rule."""
    q = op.sample_args(arg_inputs, i).get("quality")
    return (int(np.clip(int(np.asarray(q).reshape(-1)[0]), 1, 100)) if q is not None else 50,)


def plan_images(shapes, qualities) -> dict:
    """The batch's images (HWC samples, or FHWC samples' frames) with at least one pixel, from the
    samples' ``shapes`` (n, 3 or 4) and ``qualities`` (n,), with NumPy only: ``sample``, ``frame``,
    ``h``, ``w`` per image, the table without pointers (``tab``: rows of TAB_COLS, then 128 table
    values per distinct quality; SRC, DST and SCRATCH hold byte offsets from the sample's start, the
    output sample's start and the scratch buffer), ``mcus`` and ``pixels`` (batch totals) and
    ``scratch`` (bytes)."""
    shapes = np.asarray(shapes, np.int64)
    n = shapes.shape[0]
    frames = shapes[:, 0] if shapes.shape[1] == 4 else np.ones(n, np.int64)
    h, w = shapes[:, -3], shapes[:, -2]
    frames = np.where(h * w > 0, frames, 0)
    sample = np.repeat(np.arange(n), frames)
    frame = np.arange(sample.size) - np.repeat(flat_offsets(frames), frames)
    h, w = h[sample], w[sample]
    hm, wm = -(-h // 16) * 16, -(-w // 16) * 16
    mcu_count = (hm // 16) * (wm // 16)
    scratch_size = hm * wm * 3 // 2  # Y plane, then two quarter-size chroma planes
    distinct, which = np.unique(np.asarray(qualities, np.int64)[sample], return_inverse=True)
    m = sample.size
    rows = np.zeros((m, TAB_COLS), np.int64)
    rows[:, SRC] = frame * h * w * 3
    rows[:, DST] = rows[:, SRC]
    rows[:, HEIGHT], rows[:, WIDTH] = h, w
    rows[:, SCRATCH] = flat_offsets(scratch_size)
    rows[:, QUANT] = m * TAB_COLS + which.reshape(-1) * 128
    rows[:, FIRST_MCU] = flat_offsets(mcu_count)
    rows[:, FIRST_PIXEL] = flat_offsets(h * w)
    tab = np.concatenate([rows.reshape(-1), model.quant_table_rows(distinct).reshape(-1)])
    return dict(sample=sample, frame=frame, h=h, w=w, tab=tab, mcus=int(mcu_count.sum()),
                pixels=int((h * w).sum()), scratch=int(scratch_size.sum()))


@register_gpu("jpeg_compression_distortion")
def gpu_jpeg_compression_distortion(op, batch, inputs, arg_inputs):
    """``fn.jpeg_compression_distortion`` on GPU batches: one upload, two launches, the CPU's pixels."""
    from stoker.backend import cuda
    from stoker.tensors_gpu import TensorListGPU

    x = inputs[0]
    if not isinstance(x, TensorListGPU) or len(x) == 0:
        return host_fallback(op, batch, inputs, arg_inputs)
    n = len(x)
    dtype = x.element_dtype()
    layout = x.layout() or ""
    x = contiguous_samples(x)
    ptrs, _, shapes = x.geometry()
    failure = first_failure(shapes, dtype, layout)
    if failure is not None:
        i, message = failure
        raise op.sample_failure(op.error(message), batch, i)
    quality, = plan_rows(op, batch, n, lambda: quality_rows(op, arg_inputs, n),
                         lambda i: quality_one(op, arg_inputs, i))
    plan = plan_images(shapes, quality)
    sizes = np.prod(shapes, axis=1, dtype=np.int64)
    buf, offsets, out = flat_output(shapes, sizes, np.dtype(np.uint8), layout, x.source_info())
    m = plan["sample"].size
    if m == 0:  # only empty samples: nothing to compute
        return [out]
    cp = cuda.cupy()
    scratch = cp.empty(plan["scratch"], np.uint8)
    tab = plan["tab"]
    rows = tab[:m * TAB_COLS].reshape(m, TAB_COLS)  # (a view: the pointers go into tab)
    rows[:, SRC] += np.asarray(ptrs, np.int64)[plan["sample"]]
    rows[:, DST] += buf.data.ptr + offsets[plan["sample"]]
    rows[:, SCRATCH] += scratch.data.ptr
    dev_tab = upload_table(tab, batch)
    options = ("-std=c++17",)
    cuda.load_kernel("jpeg_distortion", "jpeg_mcu", options)(
        (plan["mcus"], 1, 1), (MCU_THREADS, 1, 1), (dev_tab, np.int32(m)))
    blocks = -(-plan["pixels"] // PIXEL_THREADS)
    cuda.load_kernel("jpeg_distortion", "jpeg_upsample_rgb", options)(
        (blocks, 1, 1), (PIXEL_THREADS, 1, 1), (dev_tab, np.int32(m), np.int64(plan["pixels"])))
    # the scratch goes back to the pool now: reuse is ordered after these launches on this stream
    return [out]
