"""``fn.valid_mask()``: which samples of the batch are real, under ``on_error="substitute"`` (stoker only)."""

from __future__ import annotations

import numpy as np

from stoker.operators.base import Operator
from stoker.operators.schema import Schema, register
from stoker.tensors import TensorListCPU


@register
class ValidMask(Operator):
    """Per sample, a bool scalar: False where a bad sample was replaced by a substitute.

    With ``on_error="substitute"`` (on the pipeline or on an operator) a sample that fails is
    replaced, in its own position, by a good sample of the same batch and pass. The mask tells
    the training loop which ones, aligned with every other output of the batch::

        @pipeline_def(batch_size=64, on_error="substitute")
        def train():
            jpegs, labels = fn.readers.file(file_root=root, name="Reader")
            images = fn.decoders.image(jpegs)
            return images, labels, fn.valid_mask()

        for b in DALIGenericIterator(train(), ["data", "label", "valid"], reader_name="Reader"):
            loss = (criterion(model(b[0]["data"]), b[0]["label"]) * b[0]["valid"]).sum()

    The mask is known only once the batch is complete, so it must be a pipeline output (or be
    moved with ``.gpu()``), not the input of another CPU operator. Under "raise" and "skip"
    every sample is valid.
    """

    schema = Schema(
        name="valid_mask",
        doc="Per-sample bool: False where on_error='substitute' replaced a bad sample (a pipeline output).",
        inputs=(0, 0),
        devices=("cpu",),
    )
    valid_mask = True  # the executor fills the value once the batch is repaired

    def run_cpu(self, batch, inputs, arg_inputs):
        return [TensorListCPU([np.array(True) for _ in range(batch.batch_size)])]

    def output_layouts(self, input_layouts):
        return [""]
