"""``fn._conditional.split`` / ``fn._conditional.merge`` called directly with DALI's signatures
(issue 19): ``split(x, predicate=p) -> (true_part, false_part)``, ``merge(t, f, predicate=p)``,
compared with DALI's CPU operators; bad arguments name the operator and the argument."""

import numpy as np
import pytest
from oracle import libs, run_graph

from stoker import fn, pipeline_def, types
from stoker.errors import ArgumentError, OperatorError, PipelineBuildError

DATA = [np.arange(i + 1, dtype=np.int32) * (i + 1) for i in range(7)]  # ragged: sizes 1..7
PRED = [np.array(b) for b in [True, False, True, True, False, False, True]]
INT_PRED = [np.array(v, np.int32) for v in [1, 0, 2, 0, 0, -1, 0]]


def _same(lib_a, lib_b):
    """Same outputs (batch sizes, shapes, dtypes, values, layouts)."""
    assert len(lib_a) == len(lib_b)
    for k, ((a, la), (b, lb)) in enumerate(zip(lib_a, lib_b)):
        assert la == lb, f"output {k}: layout {la!r} != DALI's {lb!r}"
        assert len(a) == len(b), f"output {k}: {len(a)} samples, DALI gives {len(b)}"
        for x, y in zip(a, b):
            assert x.dtype == y.dtype and x.shape == y.shape
            np.testing.assert_array_equal(x, y)


def _both(build, *batches, layouts=None):
    ours = run_graph("stoker", build, *batches, layouts=layouts)
    theirs = run_graph("dali", build, *batches, layouts=layouts)
    _same(ours, theirs)
    return ours


def _split_parts(fn, types, x, c):
    t, f = fn._conditional.split(x, predicate=c)
    return t, f


def _split_ops_merge(fn, types, x, c):
    t, f = fn._conditional.split(x, predicate=c)
    return fn._conditional.merge(t * 2, f + 100, predicate=c), t.shape(), f


@pytest.mark.oracle
@pytest.mark.parametrize("pred", [PRED, INT_PRED], ids=["bool", "int"])
def test_split_gives_true_and_false_parts(pred):
    (t, lay), (f, _) = _both(_split_parts, DATA, pred, layouts=["X", None])
    mask = [bool(p) for p in pred]
    assert len(t) == sum(mask) and len(f) == len(mask) - sum(mask) and lay == "X"


@pytest.mark.oracle
def test_operators_on_parts_and_merge_back():
    (merged, _), (shapes, _), (f, _) = _both(_split_ops_merge, DATA, PRED, layouts=["X", None])
    assert len(merged) == len(DATA) and len(shapes) == sum(bool(p) for p in PRED)


@pytest.mark.oracle
def test_merge_of_swapped_parts_interleaves_by_the_predicate():
    """merge only counts: the first input fills the true positions, in order (as DALI)."""
    def build(fn, types, x, c):
        t, f = fn._conditional.split(x, predicate=c)
        return fn._conditional.merge(f, t, predicate=c)
    pred = [np.array(b) for b in [True, False, False, True, True, False]]  # (3 and 3)
    _both(build, DATA[:6], pred)


@pytest.mark.oracle
def test_all_samples_on_one_side():
    def build(fn, types, x, c):
        t, f = fn._conditional.split(x, predicate=c)
        return t, f, fn._conditional.merge(t, f, predicate=c)
    _both(build, DATA, [np.array(True)] * len(DATA))


@pytest.mark.oracle
def test_split_parts_of_a_part_and_the_predicate_itself():
    def build(fn, types, x, c):
        t, f = fn._conditional.split(x, predicate=c)
        ct, cf = fn._conditional.split(c, predicate=c)
        tt, tf = fn._conditional.split(t, predicate=ct)  # (every sample of t has a true predicate)
        return tt, tf, ct, cf
    _both(build, DATA, PRED)


@pytest.mark.oracle
def test_direct_calls_inside_enable_conditionals():
    """With enable_conditionals, a direct split inside a per-sample if splits the branch's
    samples; direct calls outside any if behave as without conditionals."""
    def run(lib):
        f_, pd, _ = libs(lib)

        @pd(batch_size=len(DATA), num_threads=1, device_id=None, enable_conditionals=True)
        def pipe():
            x = f_.external_source(source=lambda: DATA, batch=True)
            c = f_.external_source(source=lambda: PRED, batch=True)
            t, f = f_._conditional.split(x, predicate=c)
            outside = f_._conditional.merge(t + 1, f, predicate=c)
            if c:
                tt, _ = f_._conditional.split(x, predicate=c)
                y = tt * 3
            else:
                y = x
            return outside, y

        p = pipe()
        p.build()
        return [([np.array(o.at(i)) for i in range(len(o))], o.layout()) for o in p.run()]

    _same(run("stoker"), run("dali"))


def test_if_statements_still_use_their_own_form():
    """A per-sample if records split/merge in its own form (one part per split) and gives the
    same result as the direct calls."""
    @pipeline_def(batch_size=len(DATA), num_threads=1, device_id=None, enable_conditionals=True)
    def pipe():
        x = fn.external_source(source=lambda: DATA, batch=True)
        c = fn.external_source(source=lambda: PRED, batch=True)
        if c:
            y = x * 2
        else:
            y = x + 100
        t, f = fn._conditional.split(x, predicate=c)
        return y, fn._conditional.merge(t * 2, f + 100, predicate=c)

    p = pipe()
    p.build()
    a, b = p.run()
    for i in range(len(DATA)):
        np.testing.assert_array_equal(np.array(a.at(i)), np.array(b.at(i)))


def _merge_float_with_int(x, c):
    t, f = fn._conditional.split(x, predicate=c)
    return fn._conditional.merge(t, fn.cast(f, dtype=types.FLOAT), predicate=c)


def _build_error(body):
    @pipeline_def(batch_size=len(DATA), num_threads=1, device_id=None)
    def pipe():
        x = fn.external_source(source=lambda: DATA, batch=True)
        c = fn.external_source(source=lambda: PRED, batch=True)
        return body(x, c)

    p = pipe()
    p.build()
    p.run()


@pytest.mark.parametrize("body, error, words", [
    (lambda x, c: fn._conditional.split(x, predicate=True), ArgumentError, ["_conditional.split", "predicate"]),
    (lambda x, c: fn._conditional.split(x), ArgumentError, ["_conditional.split", "predicate", "required"]),
    (lambda x, c: fn._conditional.split(x, c), ArgumentError, ["_conditional.split", "predicate", "positional"]),
    (lambda x, c: fn._conditional.merge(x, predicate=c), ArgumentError, ["_conditional.merge", "positional"]),
    (lambda x, c: fn._conditional.merge(x, x, c), ArgumentError, ["_conditional.merge", "predicate"]),
    (lambda x, c: fn._conditional.merge(x, x, predicate=c), OperatorError,
     ["_conditional.merge", "predicate", "3 false"]),
    (lambda x, c: fn._conditional.split(x, predicate=fn.shapes(x)), OperatorError,
     ["_conditional.split", "argument 'predicate'", "scalar"]),
    (lambda x, c: fn._conditional.split(x, predicate=c)[0] + x, PipelineBuildError,
     ["true part", "whole batch", "merge"]),
    (lambda x, c: _merge_float_with_int(x, c), OperatorError, ["_conditional.merge", "types differ"]),
])
def test_bad_arguments_name_the_operator_and_argument(body, error, words):
    with pytest.raises(error) as e:
        _build_error(body)
    for w in words:
        assert w in str(e.value), str(e.value)


def test_debug_mode_gives_the_graph_result():
    """Debug mode (op by op) runs direct calls as the graph does."""
    results = []
    for debug in (False, True):
        @pipeline_def(batch_size=len(DATA), num_threads=2, device_id=None, debug=debug)
        def pipe():
            x = fn.external_source(source=lambda: DATA, batch=True)
            c = fn.external_source(source=lambda: PRED, batch=True)
            t, f = fn._conditional.split(x, predicate=c)
            return fn._conditional.merge(t * 2, f, predicate=c), t

        p = pipe()
        p.build()
        results.append([[np.array(o.at(i)) for i in range(len(o))] for o in p.run()])
    for a, b in zip(*results):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x, y)
