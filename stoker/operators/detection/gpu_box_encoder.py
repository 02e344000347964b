"""GPU ``box_encoder``: SSD matching in two launches per batch (stoker/kernels/box_encoder.cu).

``box_best_anchor`` finds each ground-truth box's best anchor (one block per box, every sample's
boxes in one list); ``box_encode`` then gives each (sample, anchor) its best box over the criteria,
applies the boxes' claims on their best anchors (the last claimant winning, as on the CPU) and
writes the encoded box and the label row. Both use the CPU operator's float32 arithmetic and its
tie rules (see the .cu), so the outputs equal the CPU's to the bit; the one step that may not is
the log of the offsets' width / height ratio, taken in double on both (CUDA's double log is
within 1 ulp of the correctly rounded one, which can change the float32 result only where the
log lies within that of a float32 rounding boundary).

The host plans with NumPy in a few steps whatever the batch size: box and label counts from the
batch's shapes, one table row per sample (uploaded once), the anchors (with the means and stds)
uploaded once per operator and device. Labels of any type and shape are copied as bytes. A batch
that does not pass the CPU's checks is checked sample by sample with the CPU's own code, which
raises its error for the first failing sample.
"""

from __future__ import annotations

import numpy as np

from stoker.operators.detection.gpu_coord_transform import one_buffer
from stoker.operators.gpu_registry import (
    flat_offsets,
    flat_output,
    host_fallback,
    plan_batch,
    register_gpu,
    upload_table,
)

COLS = 5  # the kernel's BE_COLS: first box, box count, label byte offset, label row bytes, output label byte offset
BLOCK = 256  # the kernel's BE_BLOCK (box_best_anchor's shared reduction)


def device_anchors(op, batch):
    """The anchors, then the 4 means and the 4 stds, float32 on the device: uploaded once per
    operator and device (they are static arguments)."""
    from stoker.backend import cuda

    cache = op.__dict__.setdefault("_gpu_anchors", {})
    dev = batch.device_id or 0
    if dev not in cache:
        host = np.concatenate([op.anchors.reshape(-1), op.means, op.stds]).astype(np.float32)
        cache[dev] = cuda.cupy().asarray(host)
    return cache[dev]


def check_shapes(box_shapes, label_shapes) -> np.ndarray:
    """Boxes per sample from the batch's (n, ndim) shape arrays, as the CPU reads them (an empty
    sample of any shape has no boxes; else (N, 4) with N label rows, a scalar label being one
    row). Raises ValueError where a sample does not pass."""
    n, ndim = box_shapes.shape
    sizes = np.prod(box_shapes, axis=1, dtype=np.int64)
    ok = sizes == 0
    if ndim == 2:
        ok |= box_shapes[:, 1] == 4
    if not ok.all():
        raise ValueError("boxes not (N, 4)")
    counts = sizes // 4
    label_rows = label_shapes[:, 0] if label_shapes.shape[1] else np.ones(n, np.int64)
    if not (label_rows == counts).all():
        raise ValueError("labels do not match the boxes")
    return counts


def plan(op, batch, box_shapes, label_shapes, label_dtype, arg_inputs):
    """``(table rows (n, COLS), boxes per sample, label output shapes)`` for the batch, the label
    byte offsets into a flat output left to the caller (column 4: output label byte offsets)."""
    n = box_shapes.shape[0]

    def one(i):
        # the CPU's checks (and its errors) on arrays of the sample's shapes
        boxes = np.zeros(tuple(box_shapes[i].tolist()), np.float32)
        op.run_sample((boxes, np.zeros(tuple(label_shapes[i].tolist()), label_dtype)), op.sample_args(arg_inputs, i),
                      None)

    counts = plan_batch(op, batch, n, lambda: check_shapes(box_shapes, label_shapes), one)
    m = op.anchors.shape[0]
    rest = label_shapes[:, 1:]
    row = np.prod(rest, axis=1, dtype=np.int64) * np.dtype(label_dtype).itemsize
    table = np.zeros((n, COLS), np.int64)
    table[:, 0], table[:, 1], table[:, 3] = flat_offsets(counts), counts, row
    label_out = np.concatenate([np.full((n, 1), m, np.int64), rest], 1)
    return table, counts, label_out


# No fused multiply-adds: the IoUs and offsets are rounded step by step, in the CPU's order
# (with contraction, scale=300 offsets came out an ulp off the CPU's on the H100).
_OPTIONS = ("-std=c++17", "--fmad=false")


@register_gpu("box_encoder")
def gpu_box_encoder(op, batch, inputs, arg_inputs):
    """``fn.box_encoder`` on GPU batches: encoded boxes (anchors, 4) float32 and labels (anchors,
    ...) of the labels' type per sample."""
    from stoker.backend import cuda
    from stoker.tensors_gpu import TensorListGPU

    boxes_in, labels_in = inputs
    if not (isinstance(boxes_in, TensorListGPU) and isinstance(labels_in, TensorListGPU)):
        return host_fallback(op, batch, inputs, arg_inputs)
    n = len(boxes_in)
    if n == 0:
        return [TensorListGPU([], "", []), TensorListGPU([], "", [])]
    try:
        bbuf, boffsets, bshapes = one_buffer(boxes_in)
        lbuf, loffsets, lshapes = one_buffer(labels_in)
    except ValueError:  # samples of different numbers of dimensions: the CPU judges them
        return host_fallback(op, batch, inputs, arg_inputs)
    cp = cuda.cupy()
    ldtype = np.dtype(lbuf.dtype)
    table, counts, label_shapes = plan(op, batch, bshapes, lshapes, ldtype, arg_inputs)
    m = op.anchors.shape[0]
    source_info = boxes_in.source_info()
    out_buf, _, out = flat_output(np.tile([m, 4], (n, 1)), np.full(n, 4 * m), np.float32, "", source_info)
    lsizes = np.prod(label_shapes, axis=1, dtype=np.int64)
    lout_buf, lout_offsets, lout = flat_output(label_shapes, lsizes, ldtype, "", source_info)
    table[:, 2] = loffsets * ldtype.itemsize
    table[:, 4] = lout_offsets * ldtype.itemsize
    boxes = _compact_boxes(cp, bbuf, boffsets, counts, batch)
    anchors = device_anchors(op, batch)
    total = int(counts.sum())
    best = cp.empty(max(total, 1), np.int32)
    if total:
        cuda.load_kernel("box_encoder", "box_best_anchor", _OPTIONS)((total, 1, 1), (BLOCK, 1, 1),
                                                           (boxes, anchors, np.int32(m), best))
    encode = cuda.load_kernel("box_encoder", "box_encode", _OPTIONS)
    encode(((m + BLOCK - 1) // BLOCK, n, 1), (BLOCK, 1, 1),
           (boxes, anchors, best, upload_table(table.reshape(-1), batch), _bytes(lbuf), np.int32(m),
            np.float32(op.args["criteria"]), np.int32(bool(op.args["offset"])), np.float32(op.args["scale"]),
            out_buf, _bytes(lout_buf)))
    return [out, lout]


def _bytes(buf):
    """A contiguous 1-D device buffer as its bytes (the kernel copies label rows byte for byte)."""
    return buf.reshape(-1).view(np.uint8)


def _compact_boxes(cp, buf, offsets, counts, batch):
    """Every sample's boxes back to back as float32 (the kernels index boxes by their place in
    that list): the buffer itself where it is float32 without gaps, else gathered / converted
    (float32 as NumPy's astype converts, which the CPU does first)."""
    sizes = counts * 4
    total = int(sizes.sum())
    if not np.array_equal(offsets, flat_offsets(sizes)):
        idx = np.repeat(offsets - flat_offsets(sizes), sizes) + np.arange(total, dtype=np.int64)
        buf = cp.take(buf, upload_table(idx, batch))
    buf = buf[:total]
    return buf if buf.dtype == np.float32 else buf.astype(np.float32)
