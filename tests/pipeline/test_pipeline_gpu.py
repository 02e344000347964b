"""Whole pipelines on the GPU: the training pipeline against its CPU twin, and stream ordering."""

import numpy as np
import pytest

import stoker.fn as fn
import stoker.types as types
from stoker import pipeline_def

pytestmark = pytest.mark.gpu


def _need(*names):
    from stoker.operators.schema import registered

    missing = [n for n in names if n not in registered()]
    if missing:
        pytest.skip(f"operators not written yet: {missing}")


def test_train_pipeline_gpu_matches_cpu(sample_jpeg_dir):
    """Same seed: the same crop windows and mirrors on both devices; pixels differ only by decoder rounding."""
    pytest.importorskip("nvidia.nvimgcodec")
    _need("readers.file", "decoders.image_random_crop", "resize", "crop_mirror_normalize", "random.coin_flip")

    def build(device):
        @pipeline_def(batch_size=8, num_threads=2, device_id=0 if device == "mixed" else None, seed=5)
        def train():
            jpegs, labels = fn.readers.file(file_root=sample_jpeg_dir, random_shuffle=True, name="r")
            imgs = fn.decoders.image_random_crop(jpegs, device=device, output_type=types.RGB)
            imgs = fn.resize(imgs, resize_x=64, resize_y=64)
            imgs = fn.crop_mirror_normalize(imgs, dtype=types.FLOAT, output_layout="CHW",
                                            mirror=fn.random.coin_flip())
            return imgs, labels

        return train()

    g, c = build("mixed"), build("cpu")
    for _ in range(2):
        gi, gl = g.run()
        ci, cl = c.run()
        np.testing.assert_array_equal(np.stack(gl.as_cpu().samples()) if hasattr(gl, "as_cpu") else gl.as_array(),
                                      cl.as_array())
        a, b = gi.as_cpu().as_array(), ci.as_array()
        assert a.shape == b.shape == (8, 3, 64, 64)
        assert np.abs(a - b).mean() < 3.0


def test_consumer_stream_sees_each_batch_while_memory_is_reused(rng):
    """Outputs read by torch on its own stream, then dropped at once: every batch must be the right one."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch without CUDA")
    _need("crop_mirror_normalize")
    batches = [[rng.integers(0, 255, (64, 64, 3), dtype=np.uint8) for _ in range(4)] for _ in range(12)]

    @pipeline_def(batch_size=4, num_threads=2, device_id=0, prefetch_queue_depth=3)
    def pipe():
        x = fn.external_source(source=batches, cycle=False, layout="HWC")
        return fn.crop_mirror_normalize(x.gpu(), dtype=types.FLOAT, output_layout="CHW", mean=[1.0], std=[2.0])

    p = pipe()
    side = torch.cuda.Stream()
    sums = []
    for _ in batches:
        (out,) = p.run()
        with torch.cuda.stream(side):
            t = torch.from_dlpack(out)
            sums.append(t.double().sum())
        del out, t  # memory goes back to the pool for the next iterations
    side.synchronize()
    want = [sum(((b.astype(np.float64) - 1.0) / 2.0).sum() for b in batch) for batch in batches]
    np.testing.assert_allclose([float(s) for s in sums], want, rtol=1e-6)


@pytest.mark.parametrize("ahead", ["1", "3"])
def test_bounded_decodes_ahead_give_the_same_batches(ahead, sample_jpeg_dir, stoker_settings):
    """STOKER_DECODES_AHEAD bounds how many decoded batches wait on the device; the batches
    themselves do not change, and a deep prefetch queue does not deadlock on the permits."""
    pytest.importorskip("nvidia.nvimgcodec")

    def run(n):
        @pipeline_def(batch_size=6, num_threads=4, device_id=0, seed=9, prefetch_queue_depth=3)
        def p():
            jpegs, _ = fn.readers.file(file_root=sample_jpeg_dir, random_shuffle=True, name="r")
            imgs = fn.decoders.image_random_crop(jpegs, device="mixed", output_type=types.RGB)
            return fn.resize(imgs, resize_x=32, resize_y=32)

        pipe = p()
        pipe.build()
        out = [pipe.run()[0].as_cpu().as_array() for _ in range(n)]
        pipe.close()
        return out

    want = run(7)
    stoker_settings(decodes_ahead=ahead)
    got = run(7)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)


def test_gpu_stage_holds_at_most_gpu_size_finished_batches(rng):
    """prefetch_queue_depth={"cpu_size": 3, "gpu_size": 3}: the CPU stage runs ahead by up to
    cpu_size batches, but the GPU stage stops once gpu_size - 1 of its outputs wait for the
    consumer (who holds one more; each holds device memory); every batch still comes out, in
    order, with its own data."""
    import time

    _need("crop_mirror_normalize")
    batches = [[np.full((8, 8, 3), 10 * k + j, np.uint8) for j in range(2)] for k in range(9)]

    @pipeline_def(batch_size=2, num_threads=1, device_id=0,
                  prefetch_queue_depth={"cpu_size": 3, "gpu_size": 3})
    def pipe():
        x = fn.external_source(source=batches, cycle=False, layout="HWC")
        return fn.crop_mirror_normalize(x.gpu(), dtype=types.FLOAT, output_layout="HWC")

    p = pipe()
    p.build()
    p.schedule_run()  # fills the queues: cpu_size + gpu_size iterations
    ex = p._executor
    assert ex.pending == 6
    time.sleep(0.5)
    assert ex._out.qsize() == 2  # the GPU stage waits for the consumer
    for k in range(9):
        (out,) = p.outputs()
        assert np.all(out.as_cpu().as_array() == np.array([10 * k, 10 * k + 1])[:, None, None, None])
        if k < 3:  # keep the queue full while data lasts
            p.schedule_run()
        time.sleep(0.05)
        assert ex._out.qsize() <= 2
