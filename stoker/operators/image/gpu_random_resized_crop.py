"""GPU ``random_resized_crop``: the CPU operator's random windows (the same counter-based stream
per sample, so both devices crop alike), resampled by the GPU ``resize`` kernel in one launch per
batch. Filters other than linear/triangular with antialiasing, a type change, or samples that
are not HWC uint8 take the host fallback."""

from __future__ import annotations

import numpy as np

from stoker.operators.gpu_registry import host_fallback, register_gpu
from stoker.operators.image.gpu_resize import resize_batch
from stoker.operators.random.crop_window import draws_needed, sample_crop_windows
from stoker.random_state import batch_uniforms

_KERNEL_FILTERS = ("INTERP_LINEAR", "INTERP_TRIANGULAR")


def _kernel_takes(op, x, arg_inputs) -> bool:
    from stoker import types

    a = op.args
    filters = [a.get(k) for k in ("interp_type", "min_filter", "mag_filter")]
    return (not set(arg_inputs) & {"interp_type", "min_filter", "mag_filter"}
            and all(f is None or getattr(f, "name", str(f)) in _KERNEL_FILTERS for f in filters)
            and a.get("antialias") is not False and (a.get("dtype") is None or np.dtype(a["dtype"]) == np.uint8)
            and len(x) > 0 and x.dtype == types.UINT8 and x.ndim == 3
            and (x.layout() or "HWC") == "HWC")


@register_gpu("random_resized_crop")
def gpu_random_resized_crop(op, batch, inputs, arg_inputs):
    """``fn.random_resized_crop`` on GPU batches (HWC uint8)."""
    from stoker.tensors_gpu import TensorListGPU

    x = inputs[0]
    if not _kernel_takes(op, x, arg_inputs):
        return host_fallback(op, batch, inputs, arg_inputs)
    shapes = x.geometry()[2]
    oh, ow = op.size
    # Each sample's stream (SampleContext.rng on the CPU) drawn for the whole batch at once:
    # sample_crop_windows gives the per-sample sampler's windows, so both devices crop alike.
    attempts = int(op.args["num_attempts"])
    u = batch_uniforms(op.op_seed, batch.iteration, batch.sample_indices(len(x)), draws_needed(attempts))
    win = np.asarray(sample_crop_windows(u, shapes[:, 0], shapes[:, 1], op.area, op.aspect, attempts), np.float64)
    plans = np.empty((len(x), 6), np.float64)
    plans[:, 0], plans[:, 1], plans[:, 2:4] = oh, ow, win[:, :2]
    plans[:, 4], plans[:, 5] = win[:, 2] / oh, win[:, 3] / ow
    dense, _ = resize_batch(x, plans, batch)  # one output size: always dense
    return [TensorListGPU(dense, x.layout() or "HWC", x.source_info())]
