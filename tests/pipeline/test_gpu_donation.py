"""GPU-stage buffer donation: the last operator to read a fresh device batch may write its output
into that batch's memory (``x = fn.cast(x, FLOAT) / 255`` keeps one float batch, not two), and
never where anything else can still see the memory.

Runs on the null device (``tests/null_device.py``): its arrays are NumPy arrays, so the
element-wise arithmetic really computes and the values can be checked; memory reuse is seen
through the executor's decision and the arrays' addresses.
"""

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

N = 4


@pytest.fixture
def decisions(monkeypatch):
    """Every donation decision of the run: (operator name, donated input positions)."""
    from stoker.pipeline import executor

    seen = []
    original = executor.Executor._donated_inputs

    def record(self, node, it, inputs):
        out = original(self, node, it, inputs)
        seen.append((node.op_name, set(out)))
        return out

    monkeypatch.setattr(executor.Executor, "_donated_inputs", record)
    return seen


def _images():
    rng = np.random.default_rng(0)
    return [rng.integers(0, 256, (6, 5, 3), dtype=np.uint8) for _ in range(N)]


def _run(build):
    import stoker.fn as fn
    import stoker.types as types
    from stoker import pipeline_def

    images = _images()

    @pipeline_def(batch_size=N, num_threads=1, device_id=0, seed=1, exec_async=False, exec_pipelined=False,
                  prefetch_queue_depth=1)
    def pipe():
        x = fn.external_source(source=[images], cycle=True, layout="HWC").gpu()
        return build(fn, types, x)

    p = pipe()
    p.build()
    try:
        outs = p.run()
        return images, [[np.array(s) for s in o.as_cpu().samples()] for o in outs]
    finally:
        p.close()


def test_division_after_cast_writes_into_the_cast_batch(null_cupy, decisions):
    images, (out,) = _run(lambda fn, types, x: (fn.cast(x, dtype=types.FLOAT) / 255.0,))
    assert ("_arithmetic", {0}) in decisions
    for img, o in zip(images, out):
        np.testing.assert_array_equal(o, img.astype(np.float32) / np.float32(255.0))


def test_an_output_of_the_pipeline_is_never_written_into(null_cupy, decisions):
    def build(fn, types, x):
        c = fn.cast(x, dtype=types.FLOAT)
        return c, c / 255.0

    images, (cast, scaled) = _run(build)
    assert all(not donated for name, donated in decisions if name == "_arithmetic")
    for img, c, s in zip(images, cast, scaled):
        np.testing.assert_array_equal(c, img.astype(np.float32))
        np.testing.assert_array_equal(s, img.astype(np.float32) / np.float32(255.0))


def test_only_the_last_reader_may_write_and_earlier_results_stay_right(null_cupy, decisions):
    def build(fn, types, x):
        c = fn.cast(x, dtype=types.FLOAT)
        first = c / 255.0  # reads c before the last reader does: must not write into it
        second = c * 2.0
        return first, second

    images, (first, second) = _run(build)
    arith = [d for name, d in decisions if name == "_arithmetic"]
    assert arith == [set(), {0}]
    for img, a, b in zip(images, first, second):
        f = img.astype(np.float32)
        np.testing.assert_array_equal(a, f / np.float32(255.0))
        np.testing.assert_array_equal(b, f * np.float32(2.0))


def test_no_donation_while_a_live_view_shares_the_memory(null_cupy, decisions):
    def build(fn, types, x):
        c = fn.cast(x, dtype=types.FLOAT)
        view = fn.reshape(c, layout="HWC")  # a new batch over the same memory
        scaled = c / 255.0
        return scaled, view + 0.0

    images, (scaled, viewed) = _run(build)
    scaled_decisions = [d for name, d in decisions if name == "_arithmetic"]
    assert scaled_decisions[0] == set()
    for img, s, v in zip(images, scaled, viewed):
        f = img.astype(np.float32)
        np.testing.assert_array_equal(s, f / np.float32(255.0))
        np.testing.assert_array_equal(v, f)


def test_batches_not_marked_fresh_are_never_donated(null_cupy, decisions):
    # the transfer's batch is not marked fresh: its memory may be a staging buffer kept for reuse
    images, (out,) = _run(lambda fn, types, x: (x * 2,))
    assert all(not d for name, d in decisions if name == "_arithmetic")
    for img, o in zip(images, out):
        np.testing.assert_array_equal(o, img.astype(np.int32) * 2)
