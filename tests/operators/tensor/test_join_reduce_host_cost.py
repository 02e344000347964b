"""GPU ``cat``, ``stack`` and ``reductions.*`` plan the whole batch with NumPy (issue 16).

CPU checks: ``plan_rows`` (cat, stack) and ``reduced_tables`` / ``means_fit`` (reductions) give,
for every sample, what the per-sample rules (``plan``, ``reduced_shapes``, ``mean_fits``) give,
and raise where one of them raises. On the null device (``tests/null_device.py``): the GPU
operators' values for dense and ragged batches, errors naming the failing sample, and host calls
that do not grow with a dense batch. A ragged batch still copies (cat, stack) or reduces
(reductions) sample by sample: one launch per sample, which only a new kernel would remove.
"""

import gc
import os
import sys

import numpy as np
import pytest

sys.path[:0] = [os.path.join(os.path.dirname(__file__), "..", ".."), os.path.join(os.path.dirname(__file__), "..")]
import null_device  # noqa: E402
import test_gpu_host_cost  # noqa: E402

from stoker.operators.schema import get_operator  # noqa: E402
from stoker.operators.tensor.reductions import mean_fits, means_fit, reduced_shapes, reduced_tables  # noqa: E402

CASES = {
    "cat": lambda fn, types, x: fn.cat(x, x, axis=2),
    "stack": lambda fn, types, x: fn.stack(x, x),
    "element_extract": lambda fn, types, x: fn.element_extract(fn.stack(x, x), element_map=[0]),
    "mean": lambda fn, types, x: fn.reductions.mean(x, axes=(0, 1)),
}


@pytest.fixture(autouse=True, scope="module")
def _collect():
    """Leave no garbage behind: a collection (and its finalizers) during a later test's counted
    iteration would add calls to it."""
    yield
    gc.collect()


def _op(name: str, **kw):
    cls = get_operator(name)
    static, _ = cls.schema.bind(kw, lambda v: False)
    return cls(static, "gpu")


def _outcome(f):
    """``f()``'s value, or the type of what it raised."""
    try:
        return f()
    except Exception as e:  # noqa: BLE001 - the outcome compared is the kind of failure
        return type(e)


# --- CPU: the batch plans equal the per-sample ones ---------------------------------------------

JOIN_ARGS = [("cat", dict(axis=0)), ("cat", dict(axis=2)), ("cat", dict(axis=-1)), ("cat", dict(axis=3)),
             ("cat", dict(axis_name="W")), ("cat", dict(axis_name="Q")), ("stack", dict(axis=0)),
             ("stack", dict(axis=3)), ("stack", dict(axis=-4)), ("stack", dict(axis=4)),
             ("stack", dict(axis=-5)), ("stack", dict(axis=1, axis_name="N"))]


def _tables(rng, k: int, n: int, ragged: bool, vary: bool) -> list:
    base = rng.integers(0, 5, (n, 3)) if ragged else np.tile(rng.integers(0, 5, (1, 3)), (n, 1))
    tables = [base.copy() for _ in range(k)]
    if vary:  # one input differs in some samples along some axis
        tables[-1][rng.integers(0, n, 2), rng.integers(0, 3)] += 1
    return [t.astype(np.int64) for t in tables]


@pytest.mark.parametrize("name,kw", JOIN_ARGS)
def test_join_plan_rows_equal_the_per_sample_plans(name, kw):
    op = _op(name, **kw)
    rng = np.random.default_rng(5)
    for trial in range(40):
        k, n = int(rng.integers(1, 4)), int(rng.integers(1, 7))
        tables = _tables(rng, k, n, ragged=trial % 2 == 1, vary=trial % 3 == 0)
        dtypes = [np.dtype(np.uint8)] * k
        if trial % 7 == 6 and k > 1:
            dtypes[-1] = np.dtype(np.int16)
        per = [_outcome(lambda i=i, tables=tables, dtypes=dtypes: op.plan([t[i].tolist() for t in tables],
                                                                         dtypes, "HWC")) for i in range(n)]
        fails = [p for p in per if isinstance(p, type)]
        whole = _outcome(lambda tables=tables, dtypes=dtypes: op.plan_rows(tables, dtypes, "HWC"))
        if fails:
            assert isinstance(whole, type), (tables, per)
            continue
        axis, out = whole
        assert out.dtype == np.int64 and out.shape == (n, len(per[0][1]))
        assert all(a == axis for a, _ in per)
        assert out.tolist() == [list(s) for _, s in per]


def test_join_plan_rows_refuse_inputs_of_different_ranks():
    for name in ("cat", "stack"):
        op = _op(name)
        with pytest.raises(Exception, match="same rank"):
            op.plan_rows([np.ones((2, 3), np.int64), np.ones((2, 2), np.int64)], [np.uint8] * 2, "")


@pytest.mark.parametrize("axes", [(), (0,), (1,), (0, 1), (2, 0), (0, 0), (3,)])
def test_reduced_tables_equal_the_per_sample_shapes(axes):
    rng = np.random.default_rng(6)
    table = rng.integers(0, 6, (9, 3)).astype(np.int64)
    per = [_outcome(lambda s=s: reduced_shapes(s, axes)) for s in table.tolist()]
    whole = _outcome(lambda: reduced_tables(table, axes))
    if isinstance(per[0], type):
        assert isinstance(whole, type) and issubclass(whole, ValueError)
        return
    kept, flat = whole
    assert kept.tolist() == [list(k) for k, _ in per]
    assert flat.tolist() == [list(f) for _, f in per]


def test_means_fit_equals_mean_fits():
    rng = np.random.default_rng(7)
    table = rng.integers(0, 5, (40, 3)).astype(np.int64)
    kept, flat = reduced_tables(table, (0,))
    candidates = [kept, flat, kept[:, ::-1], kept + 1, np.prod(kept, axis=1, keepdims=True),
                  np.concatenate([flat, np.ones((40, 1), np.int64)], axis=1), rng.integers(0, 5, (40, 2))]
    for mean_table in candidates:
        want = [mean_fits(m, tuple(k), tuple(f)) for m, k, f in zip(mean_table.tolist(), kept.tolist(),
                                                                    flat.tolist())]
        assert means_fit(mean_table, kept).tolist() == want


# --- null device: values, errors, host calls ----------------------------------------------------

def _run(build, batches, gpu: bool, layout: str = "HWC"):
    import stoker.fn as fn
    import stoker.types as types
    from stoker import pipeline_def

    @pipeline_def(batch_size=len(batches[0]), num_threads=1, device_id=0, seed=2)
    def pipe():
        xs = [fn.external_source(source=[b], cycle=True, layout=layout) for b in batches]
        return build(fn, types, *[x.gpu() if gpu else x for x in xs])

    p = pipe()
    try:
        p.build()
        (out,) = p.run()
    finally:
        p.close()  # (also after a failure: no pipeline left for a later test's call counts)
    return [np.asarray(s) for s in (out.as_cpu() if gpu else out).samples()], out.layout()


JOINS = {
    "cat": lambda fn, types, x, y: fn.cat(x, y, axis=2),
    "cat_h": lambda fn, types, x, y: fn.cat(x, y, axis_name="H"),
    "stack": lambda fn, types, x, y: fn.stack(x, y, axis=1, axis_name="N"),
}


@pytest.mark.parametrize("ragged", [False, True], ids=["dense", "ragged"])
@pytest.mark.parametrize("case", sorted(JOINS))
def test_gpu_join_gives_the_cpu_samples(case, ragged):
    rng = np.random.default_rng(3)
    sizes = [(8, 6), (4, 10), (6, 6)] if ragged else [(8, 6)] * 3
    a = [rng.integers(0, 255, (h, w, 3), dtype=np.uint8) for h, w in sizes]
    b = [rng.integers(0, 255, (h, w, 3), dtype=np.uint8) for h, w in sizes]
    with null_device.installed():
        from stoker.operators import gpu_registry

        name = case.split("_")[0]
        before = gpu_registry.FALLBACKS[name]
        got, got_layout = _run(JOINS[case], [a, b], True)
        assert gpu_registry.FALLBACKS[name] == before, "the host path ran"
    want, want_layout = _run(JOINS[case], [a, b], False)
    assert got_layout == want_layout
    for g, w in zip(got, want):
        assert g.shape == w.shape
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("build,match", [
    (lambda fn, types, x, y: fn.cat(x, y, axis=2), r"cat: the inputs' shapes.*differ outside"),
    (lambda fn, types, x, y: fn.stack(x, y), r"stack: the inputs' shapes differ"),
])
def test_a_join_that_does_not_fit_fails_as_on_the_cpu(build, match):
    rng = np.random.default_rng(4)
    a = [rng.integers(0, 255, (4, 5, 3), dtype=np.uint8) for _ in range(3)]
    b = [a[0], rng.integers(0, 255, (4, 6, 3), dtype=np.uint8), a[2]]
    messages = []
    for gpu in (True, False):
        with null_device.installed() if gpu else _nothing(), pytest.raises(Exception, match=match) as e:
            _run(build, [a, b], gpu)
        messages.append(str(e.value))
    assert "sample 1 of the batch" in messages[0]
    assert messages[0] == messages[1]


class _nothing:  # noqa: N801 - a do-nothing context
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def _growth(build, ragged: bool) -> int:
    t = test_gpu_host_cost
    with null_device.installed():
        own = {n: t.count_calls(build, n, ragged) - t.count_calls(None, n, ragged) for n in (t.SMALL, t.LARGE)}
    return own[t.LARGE] - own[t.SMALL]


@pytest.mark.parametrize("case", sorted(CASES))
def test_host_calls_do_not_grow_with_a_dense_batch(case):
    assert _growth(CASES[case], False) <= test_gpu_host_cost.SLACK


@pytest.mark.xfail(strict=True, reason="a ragged batch is copied / reduced sample by sample (one launch "
                                       "each): only a batched kernel would remove that")
@pytest.mark.parametrize("case", sorted(CASES))
def test_host_calls_do_not_grow_with_a_ragged_batch(case):
    assert _growth(CASES[case], True) <= test_gpu_host_cost.SLACK
