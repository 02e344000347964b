"""GPU ``_arithmetic`` (``a + b``, ``x / 255``, ``stoker.math`` functions on GPU batches).

The CPU operator's own :func:`~stoker.operators.math.arithmetic.evaluate` runs with CuPy as the
array module, so the types and semantics are the CPU's. Where every input lies in one device
buffer with the same sample layout (a decoded or resized batch, a dense one), the expression runs
once over the whole buffer (a few CuPy kernel launches per batch); otherwise (inputs whose
samples broadcast against each other, e.g. an image times a per-channel vector) once per sample.
"""

from __future__ import annotations

import numpy as np

from stoker.operators.gpu_registry import register_gpu
from stoker.operators.math.arithmetic import evaluate


def _shared_layout(parts) -> bool:
    """Whether the inputs' flat buffers place their samples alike (same offsets and shapes)."""
    if any(p is None for p in parts):
        return False
    _, off0, shp0 = parts[0]
    return all(np.array_equal(off, off0) and np.array_equal(shp, shp0) for _, off, shp in parts[1:])


@register_gpu("_arithmetic")
def gpu_arithmetic(op, batch, inputs, arg_inputs):
    """``_arithmetic`` on GPU batches."""
    from stoker.backend import cuda
    from stoker.tensors_gpu import TensorListGPU

    cp = cuda._cupy()
    layout = op.output_layouts([x.layout() for x in inputs])[0]
    source = inputs[0].source_info()
    n = len(inputs[0])
    if n == 0:
        return [TensorListGPU([], layout, source)]
    parts = [x.flat_parts() for x in inputs]
    if _shared_layout(parts):
        _, offsets, shapes = parts[0]
        sizes = np.prod(shapes, axis=1, dtype=np.int64) if shapes.shape[1] else np.ones(n, np.int64)
        end = int((offsets + sizes).max())
        result = evaluate(op.args, [buf[:end] for buf, _, _ in parts], cp)
        return [TensorListGPU.from_flat(result, offsets, shapes, layout, source)]
    samples = [x.samples() for x in inputs]
    outs = [evaluate(op.args, [s[i] for s in samples], cp) for i in range(n)]
    return [TensorListGPU(outs, layout, source)]
