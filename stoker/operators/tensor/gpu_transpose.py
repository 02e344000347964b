"""GPU ``transpose``: CuPy's transposing copy. A batch whose samples share one shape and lie back
to back in one buffer is permuted as one (N, ...) array in one copy; other batches sample by
sample."""

from __future__ import annotations

import numpy as np

from stoker.operators.gpu_registry import register_gpu


def _dense_view(x):
    """The batch as one (N, ...) CuPy array without a copy, when its samples allow; else None."""
    parts = x.flat_parts()
    if parts is None or len(x) == 0:
        return None
    buf, offsets, shapes = parts
    if not (shapes == shapes[0]).all():
        return None
    per = int(np.prod(shapes[0], dtype=np.int64))
    if not np.array_equal(offsets, np.arange(len(x), dtype=np.int64) * per):
        return None
    return buf[:per * len(x)].reshape((len(x), *shapes[0].tolist()))


@register_gpu("transpose")
def gpu_transpose(op, batch, inputs, arg_inputs):
    """``fn.transpose`` on GPU batches."""
    from stoker.backend import cuda
    from stoker.tensors_gpu import TensorListGPU

    cp = cuda._cupy()
    x = inputs[0]
    perm = [int(p) for p in op.args["perm"]]
    layout = op.output_layouts([x.layout()])[0]
    dense = _dense_view(x)
    if dense is not None:
        out = cp.ascontiguousarray(cp.transpose(dense, [0] + [p + 1 for p in perm]))
        return [TensorListGPU(out, layout, x.source_info())]
    outs = [cp.ascontiguousarray(cp.transpose(s, perm)) for s in x.samples()]
    return [TensorListGPU(outs, layout, x.source_info())]
