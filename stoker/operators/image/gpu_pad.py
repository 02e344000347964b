"""GPU ``pad``: each sample copied into the top corner of its padded extent, the rest filled, in
one launch per batch (the window copy of ``gpu_slice``).

The output shapes come from the CPU operator's ``Pad.output_shapes`` (batch maxima, ``shape``,
``axes``/``axis_names``, ``align``) and the fill value from ``Pad.fill``, so shapes, the C cast of
the fill value and the errors are the CPU's. The host fallback takes what the kernel does not:
elements of a size other than 1, 2, 4 or 8 bytes, and samples of more than six dimensions
that cannot be merged.
"""

from __future__ import annotations

from stoker.operators.gpu_registry import host_fallback, per_sample, register_gpu
from stoker.operators.image.gpu_slice import copy_windows


@register_gpu("pad")
def gpu_pad(op, batch, inputs, arg_inputs):
    """``fn.pad`` on GPU batches (any layout and rank; fill_value per sample)."""
    from stoker.tensors_gpu import TensorListGPU

    x = inputs[0]
    if not isinstance(x, TensorListGPU):
        return host_fallback(op, batch, inputs, arg_inputs)
    if len(x) == 0:
        return [x]
    shapes = [tuple(s) for s in x.shape()]
    targets = op.output_shapes(shapes, x.layout(), arg_inputs)
    dtype = x.samples()[0].dtype

    def window(i):
        start = [0] * len(shapes[i])  # padding only grows the end of each axis
        if tuple(targets[i]) == shapes[i]:
            return targets[i], start, None
        return targets[i], start, op.fill(op.sample_args(arg_inputs, i), dtype)

    out = copy_windows(x, per_sample(op, batch, len(x), window), batch)
    if out is None:
        return host_fallback(op, batch, inputs, arg_inputs)
    return [out]
