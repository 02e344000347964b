"""The n-way per-sample choice (``conditionals.select_stmt``, behind ``auto_aug.core.select``).

One split per case and one merge for all of them (a tree of two-way ifs merges once per level).
Each sample must get what the tree gave: the index clamped to the cases, a fraction rounded up,
NaN to the last case. The GPU merge (one launch of the batched copy for any number of cases) runs
here on the null device (tests/null_device.py), which carries out that copy kernel.
"""

import os
import sys

import numpy as np
import pytest

import stoker
import stoker.fn as fn
from stoker.auto_aug.core import select
from stoker.errors import OperatorError
from stoker.pipeline import conditionals
from stoker.pipeline.graph import PipelineBuildError

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import null_device  # noqa: E402


def _ops(count):
    """``count`` ops; op k adds 10 * k + 1 to its input (int32), so the output names the case."""
    def adder(k):
        return lambda x: x + np.int32(10 * k + 1)

    return [adder(k) for k in range(count)]


def _tree(index: float, lo: int, hi: int) -> int:
    """Where the binary tree of ``index <= mid`` conditions (the select before issue 16) sends a value."""
    while lo < hi:
        mid = (lo + hi) // 2
        if index <= mid:
            hi = mid
        else:
            lo = mid + 1
    return lo


def _run(index_values, cases, data=None):
    n = len(index_values)
    data = data if data is not None else [np.full((2, 3), i, np.int32) for i in range(n)]

    @stoker.pipeline_def(batch_size=n, num_threads=2, device_id=None)
    def pipe():
        x = fn.external_source(source=lambda: data, batch=True)
        i = fn.external_source(source=lambda: [np.asarray(v) for v in index_values], batch=True)
        return select(_ops(cases), i, x), x

    p = pipe()
    p.build()
    out, _ = p.run()
    p.close()
    return [np.asarray(s) for s in out.samples()]


@pytest.mark.parametrize("cases", [2, 3, 5, 14])
def test_each_sample_takes_the_tree_case(cases):
    rng = np.random.default_rng(cases)
    index = rng.integers(-3, cases + 3, size=40).astype(np.int32)
    got = _run(index.tolist(), cases)
    for i, (v, g) in enumerate(zip(index.tolist(), got)):
        want = i + 10 * _tree(v, 0, cases - 1) + 1
        np.testing.assert_array_equal(g, np.full((2, 3), want, np.int32), err_msg=f"sample {i}, index {v}")


def test_fractional_and_nan_indices_follow_the_tree():
    index = [np.float32(v) for v in (0.5, 1.0, 1.2, 2.9, -0.5, np.nan, 7.5, 3.0)]
    got = _run(index, 5)
    for i, (v, g) in enumerate(zip(index, got)):
        assert int(g[0, 0]) - i == 10 * _tree(float(v), 0, 4) + 1, (i, v)


def test_samples_keep_their_sources_and_order_when_cases_are_empty():
    got = _run([4, 4, 0, 4], 5)  # cases 1-3 get no samples
    assert [int(g[0, 0]) for g in got] == [41, 42, 3, 44]


def test_a_python_index_runs_one_case():
    out, = conditionals.select_stmt(7, [lambda: ("a",), lambda: ("b",), lambda: ("c",)], (), ("v",), "t")
    assert out == "c"
    out, = conditionals.select_stmt(-1, [lambda: ("a",), lambda: ("b",)], (), ("v",), "t")
    assert out == "a"


def test_cases_of_different_types_are_refused_naming_the_cases():
    ops = [lambda x: x, lambda x: fn.cast(x, dtype=stoker.types.FLOAT), lambda x: x]

    @stoker.pipeline_def(batch_size=3, num_threads=1, device_id=None)
    def pipe():
        x = fn.external_source(source=lambda: [np.zeros(2, np.int32)] * 3, batch=True)
        i = fn.external_source(source=lambda: [np.int32(0), np.int32(1), np.int32(2)], batch=True)
        return select(ops, i, x)

    p = pipe()
    p.build()
    with pytest.raises(OperatorError, match=r"int32 in case 0, float32 in case 1"):
        p.run()
    p.close()


def test_a_variable_missing_in_one_case_is_undefined_after():
    @stoker.pipeline_def(batch_size=2, num_threads=1, device_id=None)
    def pipe():
        i = fn.external_source(source=lambda: [np.int32(0), np.int32(1)], batch=True)
        first = conditionals.ld(lambda: undefined_name, "y")  # noqa: F821 - unbound on purpose
        y, = conditionals.select_stmt(i, [lambda y: (fn.cast(i, dtype=stoker.types.FLOAT),),
                                          lambda y: (y,), lambda y: (fn.cast(i, dtype=stoker.types.FLOAT),)],
                                      (first,), ("y",), "the select at test:1")
        return y

    with pytest.raises(PipelineBuildError, match=r"assigned in only some cases of the select at test:1.*`case 1`"):
        pipe().build()


def test_select_inside_an_if_splits_from_the_branch():
    data = [np.int32(i) for i in range(6)]
    index = [np.int32(v) for v in (0, 1, 2, 2, 1, 0)]

    @stoker.pipeline_def(batch_size=6, num_threads=2, device_id=None, enable_conditionals=True)
    def pipe():
        x = fn.external_source(source=lambda: data, batch=True)
        i = fn.external_source(source=lambda: index, batch=True)
        if x > np.int32(2):  # samples 3, 4, 5
            x = select(_ops(3), i, x)
        else:
            x = x - np.int32(100)
        return x

    p = pipe()
    p.build()
    out, = p.run()
    p.close()
    got = [int(np.asarray(s)) for s in out.samples()]
    assert got == [-100, -99, -98, 3 + 21, 4 + 11, 5 + 1]


@pytest.mark.parametrize("sizes", ["ragged", "whole_images"])
def test_gpu_merge_of_many_cases_is_one_copy_in_sample_order(sizes):
    from stoker.operators.schema import get_operator
    from stoker.tensors import TensorListCPU

    rng = np.random.default_rng(0)
    if sizes == "ragged":
        images = [rng.integers(0, 255, (int(rng.integers(3, 9)), int(rng.integers(3, 9)), 3), dtype=np.uint8)
                  for _ in range(17)]
    else:  # 48 bytes each: copied 8 bytes at a time
        images = [rng.integers(0, 255, (4, 4, 3), dtype=np.uint8) for _ in range(17)]
    labels = rng.integers(0, 6, size=17)
    labels[:6] = np.arange(6)  # every case present
    labels[labels == 4] = 3  # ... but case 4 empty
    with null_device.installed():
        branches = []
        for k in range(6):
            part = [im for im, lab in zip(images, labels) if lab == k]
            x, ctx = null_device.device_batch(part) if part else null_device.device_batch(images[:1])
            branches.append(x if part else x.from_flat(x.flat_parts()[0], np.zeros(0, np.int64),
                                                       np.zeros((0, 3), np.int64), "HWC"))
        cls = get_operator("_conditional.merge_cases")
        static, _ = cls.schema.bind({"variable": "v"}, lambda v: False)
        op = cls(static, "gpu")
        index = TensorListCPU([np.int32(v) for v in labels])
        null_device.LAUNCHES.clear()
        out, = op.run_gpu(ctx, [*branches, index], {})
        launched = [name for name, _, _ in null_device.LAUNCHES]
        if sizes == "ragged":
            assert len(launched) == 1 and launched[0].startswith("window_copy_")
        else:
            assert launched == ["window_copy_8"]
        got = [np.asarray(s.get()) for s in out.samples()]
    for i, (g, want) in enumerate(zip(got, images)):
        np.testing.assert_array_equal(g, want, err_msg=f"sample {i}")
