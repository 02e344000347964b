"""Which GPU stages run on two threads (stoker.pipeline.stage_setup.split_gpu_nodes) and that a
split stage gives the one-thread stage's batches, closes cleanly and reports errors by name. The
decoders' side of it runs on fake engines in tests/operators/decoders/test_mixed_fake_engines.py."""

import numpy as np
import pytest

import stoker.fn as fn
import stoker.types as types
from stoker import pipeline_def, settings
from stoker.errors import OperatorError
from stoker.pipeline.stage_setup import split_gpu_nodes


def _images(n=5):
    rng = np.random.default_rng(1)
    return [rng.integers(0, 256, (int(h), 20, 3), dtype=np.uint8) for h in rng.integers(10, 30, n)]


def _pipe(body, batch=5, split=True):
    @pipeline_def(batch_size=batch, num_threads=1, device_id=0, seed=3, prefetch_queue_depth=2)
    def pipe():
        return body()

    with settings.override(split_gpu_stage=split):
        p = pipe()
        p.build()
    return p


def _heads_and_rest(p):
    parts = split_gpu_nodes(p._executor.graph)
    return None if parts is None else ([n.op_name for n in parts[0]], [n.op_name for n in parts[1]])


def test_an_upload_followed_by_operators_splits(null_cupy):
    images = _images()

    def body():
        x = fn.external_source(source=[images], cycle=True, layout="HWC").gpu()
        return fn.cast(x, dtype=types.FLOAT) * 2.0

    p = _pipe(body)
    try:
        with settings.override(split_gpu_stage=True):
            assert _heads_and_rest(p) == (["_to_gpu"], ["cast", "_arithmetic"])
        assert "stoker-gpu-ops" in [t.name for t in p._executor._threads]
    finally:
        p.close()
    p = _pipe(body, split=False)
    try:
        assert _heads_and_rest(p) is None
        assert "stoker-gpu-ops" not in [t.name for t in p._executor._threads]
    finally:
        p.close()


def test_the_split_is_off_by_default(null_cupy):
    from stoker.settings import Settings

    assert Settings().split_gpu_stage is False


def test_nothing_to_split_without_operators_after_the_head(null_cupy):
    images = _images()
    p = _pipe(lambda: fn.external_source(source=[images], cycle=True, layout="HWC").gpu())
    try:
        with settings.override(split_gpu_stage=True):
            assert _heads_and_rest(p) is None
        assert "stoker-gpu-ops" not in [t.name for t in p._executor._threads]
    finally:
        p.close()


def test_a_split_stage_gives_the_batches_of_one_thread(null_cupy):
    def run(split):
        seq = iter(range(100))

        def source(info):  # a new batch each time: the order of the batches is checked too
            k = next(seq)
            return [np.full((4 + k % 3, 6, 3), k * 5 + i, np.uint8) for i in range(4)]

        def body():
            x = fn.external_source(source=source, layout="HWC", batch=True).gpu()
            return fn.cast(x, dtype=types.FLOAT) * 0.5 + fn.random.uniform(range=(0.0, 1.0)).gpu()

        p = _pipe(body, batch=4, split=split)
        try:
            return [[np.asarray(s.get()) for s in p.run()[0].samples()] for _ in range(6)]
        finally:
            p.close()

    one, two = run(False), run(True)
    for a, b in zip(one, two, strict=True):
        for x, y in zip(a, b, strict=True):
            np.testing.assert_array_equal(x, y)
    assert one[0][0].flat[0] != one[1][0].flat[0]


def test_an_error_after_the_split_names_its_operator_and_the_pipeline_closes(null_cupy):
    images = _images(4)

    def body():
        x = fn.external_source(source=[images], cycle=True, layout="HWC").gpu()
        return fn.crop(x, crop=(50, 50))  # larger than every image: refused (out_of_bounds_policy="error")

    p = _pipe(body, batch=4)
    executor = p._executor
    try:
        assert "stoker-gpu-ops" in [t.name for t in executor._threads]
        with pytest.raises(OperatorError, match="crop"):
            p.run()
    finally:
        p.close()
    assert not any(t.is_alive() for t in executor._threads)
