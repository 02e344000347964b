"""GPU ``_arithmetic`` (``a + b``, ``x / 255``, ``stoker.math`` functions on GPU batches).

The CPU operator's own :func:`~stoker.operators.math.arithmetic.evaluate` runs with CuPy as the
array module, so the types and semantics are the CPU's. Where every input lies in one device
buffer (a decoded, resized or cast batch, a dense one) and the inputs place their samples alike,
the expression runs once over the part of the buffer the samples occupy (a few CuPy kernel
launches per batch, and no host step per sample: issue 16). An input that holds one value per
sample (a per-sample scalar, e.g. ``x * fn.random.uniform()``) joins that pass: its values are
spread over the other inputs' elements on the device. Otherwise (inputs whose samples broadcast
against each other in other ways, e.g. an image times a per-channel vector, or samples in
separate arrays) the expression runs once per sample.
"""

from __future__ import annotations

import numpy as np

from stoker.operators.gpu_registry import register_gpu
from stoker.operators.math.arithmetic import evaluate


def _same_place(a, b) -> bool:
    """Whether two inputs' flat buffers place their samples alike (same offsets and shapes)."""
    return a[1].shape == b[1].shape and a[2].shape == b[2].shape and np.array_equal(a[1], b[1]) \
        and np.array_equal(a[2], b[2])


def flat_plan(parts):
    """How the inputs (their ``flat_parts``) run as one pass: ``(reference, roles)`` where
    ``reference`` indexes the input whose placement the result takes and ``roles[k]`` is "same"
    (input ``k`` places its samples as the reference does) or "spread" (one value per sample, of
    no more dimensions than the reference's samples: broadcast over them); None when the inputs
    need the per-sample path."""
    if any(p is None for p in parts):
        return None
    single = [bool((np.prod(p[2], axis=1, dtype=np.int64) == 1).all()) for p in parts]
    ref = next((k for k, s in enumerate(single) if not s), 0)
    roles = []
    for k, p in enumerate(parts):
        if _same_place(p, parts[ref]):
            roles.append("same")
        elif single[k] and p[2].shape[1] <= parts[ref][2].shape[1]:
            roles.append("spread")
        else:
            return None
    return ref, roles


def _sample_of_element(cp, offsets, sizes, start: int, end: int):
    """For every element of ``[start, end)`` of the reference's buffer, the sample (index) whose
    elements it lies among (gaps take the sample before them); None when non-empty samples
    overlap (their elements would need two values)."""
    keep = np.flatnonzero(sizes > 0)
    order = keep[np.argsort(offsets[keep], kind="stable")]
    starts = offsets[order]
    if (starts[1:] < starts[:-1] + sizes[order][:-1]).any():
        return None
    pos = cp.arange(start, end, dtype=cp.int64)
    seg = cp.searchsorted(cp.asarray(starts), pos, side="right") - 1  # >= 0: start is the first offset
    return cp.asarray(order)[seg]


def _rows_of_samples(offsets, sizes, start: int, end: int):
    """When every non-empty sample has one size ``s`` and starts at ``start + k * s`` (a dense
    batch, or a branch's samples taken from one): ``(s, row_sample)``, the sample whose value each
    row of ``s`` elements of ``[start, end)`` takes (a row between samples takes the one before).
    A per-sample value then spreads as a ``(rows, 1)`` column: no per-element index arrays.
    None otherwise."""
    keep = np.flatnonzero(sizes > 0)
    if not keep.size:
        return None
    s = int(sizes[keep[0]])
    rel = offsets[keep] - start
    if (sizes[keep] != s).any() or (rel % s).any() or (end - start) % s:
        return None
    rows = (end - start) // s
    row_sample = np.full(rows, -1, np.int64)
    row_sample[rel // s] = keep
    srt = np.sort(rel)  # (not np.unique: in NumPy 2 it imports numpy.ma, 0.35 s of a first batch)
    if (srt[1:] == srt[:-1]).any() or row_sample[0] < 0:
        return None
    taken = np.where(row_sample >= 0, np.arange(rows), 0)
    return s, row_sample[np.maximum.accumulate(taken)]


@register_gpu("_arithmetic")
def gpu_arithmetic(op, batch, inputs, arg_inputs):
    """``_arithmetic`` on GPU batches."""
    from stoker.backend import cuda
    from stoker.tensors_gpu import TensorListGPU

    cp = cuda.cupy()
    layout = op.output_layouts([x.layout() for x in inputs])[0]
    source = inputs[0].source_info()
    n = len(inputs[0])
    if n == 0:
        return [TensorListGPU([], layout, source)]
    parts = [x.flat_parts() for x in inputs]
    plan = flat_plan(parts)
    if plan is not None:
        ref, roles = plan
        _, offsets, shapes = parts[ref]
        sizes = np.prod(shapes, axis=1, dtype=np.int64)
        start = int(offsets.min())
        end = int((offsets + sizes).max()) if sizes.any() else start
        rows = _rows_of_samples(offsets, sizes, start, end) if "spread" in roles and end > start else None
        if rows is not None:  # every sample one size, on a grid: values spread as a column
            size, row_sample = rows
            count = row_sample.size
            flat = [buf[start:end].reshape(count, size) if role == "same" else
                    buf[cp.asarray(off)][cp.asarray(row_sample)].reshape(count, 1)
                    for (buf, off, _), role in zip(parts, roles)]
            result = evaluate(op.args, flat, cp, out=_donated(batch, flat, roles)).reshape(-1)
            return [_fresh(TensorListGPU.from_flat(result, offsets - start, shapes, layout, source))]
        sample = _sample_of_element(cp, offsets, sizes, start, end) if "spread" in roles and end > start else None
        if sample is not None or end == start or "spread" not in roles:
            flat = []
            for (buf, off, _), role in zip(parts, roles):
                if role == "same":
                    flat.append(buf[start:end])
                elif sample is None:  # no elements to spread over
                    flat.append(buf[:0])
                else:  # each sample's one value, then every element takes its sample's
                    flat.append(buf[cp.asarray(off)][sample])
            result = evaluate(op.args, flat, cp, out=_donated(batch, flat, roles))
            return [_fresh(TensorListGPU.from_flat(result, offsets - start, shapes, layout, source))]
    samples = [x.samples() for x in inputs]
    outs = [evaluate(op.args, [s[i] for s in samples], cp) for i in range(n)]
    return [_fresh(TensorListGPU(outs, layout, source))]


def _donated(batch, flat: list, roles) -> object:
    """The first whole-buffer operand whose memory the executor donated (BatchContext.donated):
    the result may be written into it. None when there is none."""
    for i in sorted(batch.donated):
        if i < len(flat) and roles[i] == "same":
            return flat[i]
    return None


def _fresh(out):
    """The result owns its memory (new, or a donated input's that nothing else reads)."""
    out.fresh = True
    return out
