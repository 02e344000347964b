"""GPU crop_mirror_normalize of a ragged batch with no crop gives a ragged batch, as DALI does
(the kernel writes one size per batch, so such batches take the host path); run on the null
device, where the host path's values are real."""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
import null_device  # noqa: E402


def test_ragged_batch_without_crop_keeps_each_sample_size():
    rng = np.random.default_rng(5)
    images = [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for h, w in [(20, 30), (25, 18), (16, 16)]]
    with null_device.installed():
        import stoker.fn as fn
        import stoker.types as types
        from stoker import pipeline_def

        def build(x):
            return fn.crop_mirror_normalize(x, dtype=types.FLOAT, output_layout="CHW", mean=[10.0, 20.0, 30.0],
                                            std=[2.0, 4.0, 8.0], mirror=fn.random.coin_flip(seed=3))

        outs = {}
        for gpu in (True, False):
            @pipeline_def(batch_size=3, num_threads=1, device_id=0, seed=1)
            def pipe(on_gpu=gpu):
                x = fn.external_source(source=[images], cycle=True, layout="HWC")
                return build(x.gpu() if on_gpu else x)

            p = pipe()
            p.build()
            (out,) = p.run()
            outs[gpu] = [np.asarray(s) for s in (out.as_cpu() if gpu else out).samples()]
            p.close()
    assert [o.shape for o in outs[True]] == [(3, 20, 30), (3, 25, 18), (3, 16, 16)]
    for g, c in zip(outs[True], outs[False]):
        np.testing.assert_array_equal(g, c)
