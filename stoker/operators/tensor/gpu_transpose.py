"""GPU ``transpose``. A batch whose samples share one shape and lie back to back in one buffer is
permuted as one (N, ...) array in one CuPy copy. Any other batch (ragged, or a list of views) is
copied in one launch of the window copy (``kernels/window_copy.cu`` through
``gpu_slice.copy_window_batch``): the output is C-contiguous and the kernel reads the input at
any element strides, so reading each sample's axes in the order ``perm`` (extents and strides
permuted, no offset, no fill) is its transpose. Its table comes from arrays (no CuPy transpose
per sample: issue 16). Batches the window copy does not take (elements of another size, more
than six dimensions left after merging, a ``perm`` that is not a permutation) are permuted
sample by sample, as before."""

from __future__ import annotations

import numpy as np

from stoker.operators.gpu_registry import dense_view, register_gpu

_MAX_GRID_Y = 65535  # the window copy runs one grid row per sample


def transposed_placement(placement, perm: list[int]):
    """``(pointers, shapes, byte strides)`` of every sample (``gpu_slice.sample_placement``) read
    with its axes in the order ``perm``: what ``cp.transpose(sample, perm)`` views."""
    ptrs, shapes, strides = placement
    return ptrs, shapes[:, perm], strides[:, perm]


@register_gpu("transpose")
def gpu_transpose(op, batch, inputs, arg_inputs):
    """``fn.transpose`` on GPU batches."""
    from stoker.backend import cuda
    from stoker.operators.image.gpu_slice import copy_window_batch, sample_placement
    from stoker.tensors_gpu import TensorListGPU

    cp = cuda.cupy()
    x = inputs[0]
    perm = [int(p) for p in op.args["perm"]]
    layout = op.output_layouts([x.layout()])[0]
    dense = dense_view(x)
    if dense is not None:
        out = cp.ascontiguousarray(cp.transpose(dense, [0] + [p + 1 for p in perm]))
        return [TensorListGPU(out, layout, x.source_info())]
    ndim = x.ndim
    # negative axes count from the end, as in cp.transpose; anything else is left to it to refuse
    axes = [p % ndim for p in perm if -ndim <= p < ndim]
    if 0 < len(x) <= _MAX_GRID_Y and len(perm) == ndim and sorted(axes) == list(range(ndim)):
        ptrs, shapes, strides = transposed_placement(sample_placement(x), axes)
        out = copy_window_batch(x, shapes, np.zeros_like(shapes), batch, placement=(ptrs, shapes, strides),
                                layout=layout)
        if out is not None:
            return [out]
    outs = [cp.ascontiguousarray(cp.transpose(s, perm)) for s in x.samples()]
    return [TensorListGPU(outs, layout, x.source_info())]
