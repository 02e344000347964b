"""GPU ``_auto_aug.warp_group``: every sample's matrix from the planners of ``warp_affine`` and
``rotate`` (``gpu_warp``), the batch in one launch of their warp kernel. The same matrices as the
separate operators, so the same pixels as the GPU's separate branches; the CPU's within the warp
kernel's bilinear rounding (see ``stoker.operators.image.gpu_warp``). Batches the kernel does not
take (sequences, volumes, other types) and argument values the planners refuse go through the host
fallback, whose CPU operator raises naming the sample."""

from __future__ import annotations

import numpy as np

from stoker import types
from stoker.auto_aug.warp_group import ROTATION
from stoker.operators.gpu_registry import batch_column, host_fallback, register_gpu
from stoker.operators.image.geometry_batch import PerSample
from stoker.operators.image.gpu_warp import rotate_plans, warp_affine_plans, warp_batch, warp_kernel_takes


def warp_group_plans(op, arg_inputs: dict, in_hw: np.ndarray, nearest: bool):
    """``(matrices (n, 6) float64, output sizes (n, 2))`` of the batch: rotations by ``rotate``'s
    planner, shears and translations by ``warp_affine``'s on their ``transforms.*`` matrices."""
    n = len(in_hw)
    kinds, params = op.choices(batch_column(op, arg_inputs, "op_index", n, np.nan),
                               batch_column(op, arg_inputs, "row", n, 0.0))
    matrices, out_hw = np.empty((n, 6)), np.empty((n, 2), np.int64)
    rot = kinds == ROTATION
    if rot.any():
        matrices[rot], out_hw[rot] = rotate_plans(op.rotate, {"angle": params[rot, 0]}, in_hw[rot], nearest)
    warp = ~rot
    if warp.any():
        m = op.matrices(kinds[warp], params[warp]).reshape(-1, 6)
        matrices[warp], out_hw[warp] = warp_affine_plans(op.warp, {"matrix": m}, in_hw[warp], nearest)
    return matrices, out_hw


@register_gpu("_auto_aug.warp_group")
def gpu_warp_group(op, batch, inputs, arg_inputs):
    """The geometric branch of an auto_aug ``select`` on GPU batches, one warp launch."""
    x = inputs[0]
    interp = op.args["interp_type"]
    if interp not in (types.INTERP_NN, types.INTERP_LINEAR) or not warp_kernel_takes(op.warp, x):
        return host_fallback(op, batch, inputs, arg_inputs)
    nearest = interp == types.INTERP_NN
    try:
        matrices, out_hw = warp_group_plans(op, arg_inputs, x.geometry()[2][:, :2], nearest)
    except (ValueError, PerSample):  # the CPU operator raises it, naming the sample
        return host_fallback(op, batch, inputs, arg_inputs)
    return [warp_batch(x, matrices, out_hw, nearest, op.args["fill_value"], batch)]
