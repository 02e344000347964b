"""GPU ``transpose``: CuPy's transposing copy. A batch whose samples share one shape and lie back
to back in one buffer is permuted as one (N, ...) array in one copy; other batches sample by
sample."""

from __future__ import annotations

from stoker.operators.gpu_registry import dense_view, register_gpu


@register_gpu("transpose")
def gpu_transpose(op, batch, inputs, arg_inputs):
    """``fn.transpose`` on GPU batches."""
    from stoker.backend import cuda
    from stoker.tensors_gpu import TensorListGPU

    cp = cuda._cupy()
    x = inputs[0]
    perm = [int(p) for p in op.args["perm"]]
    layout = op.output_layouts([x.layout()])[0]
    dense = dense_view(x)
    if dense is not None:
        out = cp.ascontiguousarray(cp.transpose(dense, [0] + [p + 1 for p in perm]))
        return [TensorListGPU(out, layout, x.source_info())]
    outs = [cp.ascontiguousarray(cp.transpose(s, perm)) for s in x.samples()]
    return [TensorListGPU(outs, layout, x.source_info())]
