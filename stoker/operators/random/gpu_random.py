"""``random.uniform``, ``random.normal`` and ``random.coin_flip`` with ``device="gpu"`` (issue 16).

The values are the CPU form's, to the bit: stoker's generators are counter-based (a value is a
function of seed, operator, iteration and sample), so the GPU placement draws them on the host
with the CPU operator's own code and uploads the batch in one copy. What a ported DALI pipeline
needs from these is the values on the device (to feed GPU operators); a few numbers per sample
cost less to copy than a kernel launch. A GPU input (DALI's ``__shape_like``) is read for its
samples' shapes only, which the host knows: its data stays on the device.
"""

from __future__ import annotations

from stoker.operators.gpu_registry import register_gpu
from stoker.operators.tensor.gpu_metadata import shape_stand_ins


def draw_on_device(op, batch, inputs, arg_inputs):
    """The batch the CPU operator draws, uploaded to the device in one copy."""
    from stoker.operators.transfer import upload_batch
    from stoker.tensors_gpu import TensorListGPU

    host_inputs = [shape_stand_ins(x) if isinstance(x, TensorListGPU) else x for x in inputs]
    (values,) = op.run_cpu(batch, host_inputs, arg_inputs)
    out = upload_batch(values, batch)
    out.fresh = True  # (a new allocation that only this batch holds: a later operator may write into it)
    return [out]


for _name in ("random.uniform", "random.normal", "random.coin_flip"):
    register_gpu(_name)(draw_on_device)
