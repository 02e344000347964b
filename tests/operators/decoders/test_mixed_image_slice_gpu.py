"""decoders.image_slice with device="mixed" (anchor and shape inputs, or named arguments)
against the CPU decoder: the same windows, pixels within the JPEG decoders' difference."""

import numpy as np
import pytest

import stoker.fn as fn
import stoker.types as types
from stoker import pipeline_def

pytestmark = pytest.mark.gpu


def _decode(root, device, positional: bool):
    @pipeline_def(batch_size=8, num_threads=4, device_id=0, seed=3)
    def pipe():
        jpegs, _ = fn.readers.file(file_root=root)
        if positional:
            anchor = fn.random.uniform(range=(0.0, 0.3), shape=(2,))
            shape = fn.random.uniform(range=(0.4, 0.7), shape=(2,))
            return fn.decoders.image_slice(jpegs, anchor, shape, device=device, output_type=types.RGB)
        return fn.decoders.image_slice(jpegs, rel_start=(0.1, 0.2), rel_shape=(0.5, 0.6), device=device,
                                       output_type=types.RGB)

    p = pipe()
    p.build()
    outs = []
    for _ in range(2):
        (out,) = p.run()
        outs += [np.asarray(s) for s in (out.as_cpu() if device == "mixed" else out).samples()]
    p.close()
    return outs


@pytest.mark.parametrize("positional", [True, False], ids=["anchor_shape_inputs", "named_args"])
def test_mixed_image_slice_cuts_the_cpu_window(sample_jpeg_dir, positional):
    from stoker.operators import gpu_registry

    before = gpu_registry.FALLBACKS["decoders.image_slice"]
    got = _decode(sample_jpeg_dir, "mixed", positional)
    assert gpu_registry.FALLBACKS["decoders.image_slice"] == before, "the host path ran"
    want = _decode(sample_jpeg_dir, "cpu", positional)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        assert np.abs(g.astype(int) - w.astype(int)).mean() < 4.0
