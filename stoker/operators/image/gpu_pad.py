"""GPU ``pad``: each sample copied into the top corner of its padded extent, the rest filled, in
one launch per batch (the window copy of ``gpu_slice``).

The output shapes and fill values of the whole batch come from NumPy (``Pad.output_shapes_batch``,
``Pad.fill_values``): the numbers of the CPU operator's ``Pad.output_shapes`` (batch maxima,
``shape``, ``axes``/``axis_names``, ``align``) and ``Pad.fill`` (the C cast of the fill value),
whose per-sample rules still run where NumPy cannot read the arguments at once, and raise their
errors. No Python step per sample on the host (issue 16). The host fallback takes what the kernel
does not: elements of a size other than 1, 2, 4 or 8 bytes, and samples of more than six
dimensions that cannot be merged.
"""

from __future__ import annotations

import numpy as np

from stoker.operators.gpu_registry import host_fallback, register_gpu
from stoker.operators.image.geometry_batch import plan_rows
from stoker.operators.image.gpu_slice import copy_window_batch, sample_placement


def pad_fills(op, arg_inputs, n: int, dtype, padded) -> tuple[np.ndarray]:
    """``(fills,)``: every sample's fill value in ``dtype`` (n, 1), :meth:`Pad.fill` for the
    whole batch (0 where a sample is not padded: its value is not read)."""
    values = op.fill_values(arg_inputs, n, dtype)
    return (np.where(padded, values, np.zeros((), dtype)).astype(dtype).reshape(n, 1),)


def pad_fill_one(op, arg_inputs, i: int, dtype, padded: bool) -> tuple:
    """Sample ``i``'s ``(fill,)`` by the per-sample rule (``Pad.fill``, only for a padded sample,
    as the CPU computes it: a bad value of a sample that is not padded is never read)."""
    if not padded:
        return (np.zeros(1, dtype),)
    return (op.fill(op.sample_args(arg_inputs, i), dtype).reshape(1),)


@register_gpu("pad")
def gpu_pad(op, batch, inputs, arg_inputs):
    """``fn.pad`` on GPU batches (any layout and rank; fill_value per sample)."""
    from stoker.tensors_gpu import TensorListGPU

    x = inputs[0]
    if not isinstance(x, TensorListGPU):
        return host_fallback(op, batch, inputs, arg_inputs)
    n = len(x)
    if n == 0:
        return [x]
    placement = sample_placement(x)
    shapes = placement[1]
    targets = op.output_shapes_batch(shapes, x.layout(), arg_inputs)
    dtype = x.element_dtype()
    padded = (targets != shapes).any(axis=1)
    fills, = plan_rows(op, batch, n, lambda: pad_fills(op, arg_inputs, n, dtype, padded),
                       lambda i: pad_fill_one(op, arg_inputs, i, dtype, bool(padded[i])))
    starts = np.zeros_like(shapes)  # padding only grows the end of each axis
    out = copy_window_batch(x, targets, starts, batch, None, fills.reshape(n, 1).astype(dtype), padded, None,
                            placement)
    if out is None:
        return host_fallback(op, batch, inputs, arg_inputs)
    return [out]
