"""random.uniform / normal / coin_flip / choice: ranges, shapes, dtypes, distributions (by
statistics), determinism for a seed and across num_threads; shapes/dtypes against DALI."""

import numpy as np
import pytest
from oracle import pipeline

from stoker import fn, pipeline_def, types


def _run(make, batch_size=64, num_threads=1, seed=3, iterations=1):
    @pipeline_def(batch_size=batch_size, num_threads=num_threads, device_id=None, seed=seed)
    def pipe():
        out = make(fn)
        return out if isinstance(out, tuple) else (out,)

    p = pipe()
    p.build()
    runs = []
    for _ in range(iterations):
        outs = p.run()
        runs.append([[np.asarray(t.at(i)) for i in range(len(t))] for t in outs])
    return runs


def _values(make, n_iter=8, **kw):
    runs = _run(make, iterations=n_iter, **kw)
    return np.concatenate([np.stack(r[0]).reshape(-1) for r in runs])


def test_uniform_default_range_and_statistics():
    v = _values(lambda f: f.random.uniform())
    assert v.dtype == np.float32 and v.min() >= -1 and v.max() < 1
    assert abs(v.mean()) < 4 * (2 / np.sqrt(12)) / np.sqrt(v.size)
    hist, _ = np.histogram(v, bins=8, range=(-1, 1))
    expected = v.size / 8
    assert ((hist - expected) ** 2 / expected).sum() < 24.3  # chi2, 7 dof, p = 0.001


def test_uniform_values_shape_and_dtype():
    runs = _run(lambda f: f.random.uniform(values=[1.0, 2.5, -3.0], shape=(2, 3)), iterations=4)
    v = np.concatenate([np.stack(r[0]) for r in runs])
    assert v.shape == (256, 2, 3) and v.dtype == np.float32
    assert set(np.unique(v).tolist()) == {1.0, 2.5, -3.0}
    counts = np.array([(v == x).sum() for x in (1.0, 2.5, -3.0)])
    assert np.all(np.abs(counts - v.size / 3) < 5 * np.sqrt(v.size * 2 / 9))


def test_uniform_integer_dtype_range():
    v = _values(lambda f: f.random.uniform(range=(0, 5), dtype=types.INT32))
    assert v.dtype == np.int32 and set(np.unique(v).tolist()) == {0, 1, 2, 3, 4}


def test_normal_statistics():
    v = _values(lambda f: f.random.normal(mean=3.0, stddev=2.0, shape=(4,)))
    assert v.dtype == np.float32 and v.size == 8 * 64 * 4
    se = 2.0 / np.sqrt(v.size)
    assert abs(v.mean() - 3.0) < 5 * se
    assert abs(v.std() - 2.0) < 0.1
    assert abs(np.mean(np.abs(v - 3.0) < 2.0) - 0.6827) < 0.04


def test_coin_flip_probability_and_dtype():
    v = _values(lambda f: f.random.coin_flip(probability=0.2))
    assert v.dtype == np.int32 and set(np.unique(v).tolist()) <= {0, 1}
    assert abs(v.mean() - 0.2) < 5 * np.sqrt(0.2 * 0.8 / v.size)


def test_choice_from_n_and_from_values_with_p():
    v = _values(lambda f: f.random.choice(4))
    assert set(np.unique(v).tolist()) == {0, 1, 2, 3}
    w = _values(lambda f: f.random.choice([10, 20, 30], p=[0.1, 0.3, 0.6]))
    assert set(np.unique(w).tolist()) <= {10, 20, 30}
    freq = np.array([(w == x).mean() for x in (10, 20, 30)])
    assert np.all(np.abs(freq - [0.1, 0.3, 0.6]) < 0.06)


def test_shape_like_input_follows_input_shapes():
    batch = [np.zeros((2, 3), np.uint8), np.zeros((5, 1), np.uint8)]

    @pipeline_def(batch_size=2, num_threads=1, device_id=None, seed=1)
    def pipe():
        x = fn.external_source(source=lambda: batch, batch=True)
        return fn.random.uniform(x, range=(2, 3)), fn.random.coin_flip(x), fn.random.normal(x)

    p = pipe()
    p.build()
    for out in p.run():
        assert [np.asarray(out.at(i)).shape for i in range(2)] == [(2, 3), (5, 1)]


def _stream(num_threads, seed=11):
    def make(f):
        return (f.random.uniform(range=(0, 10)), f.random.normal(shape=(3,)), f.random.coin_flip(),
                f.random.choice([1, 2, 3]))

    return _run(make, batch_size=16, num_threads=num_threads, seed=seed, iterations=3)


def _equal(a, b):
    return all(np.array_equal(x, y) for ra, rb in zip(a, b) for oa, ob in zip(ra, rb) for x, y in zip(oa, ob))


def test_deterministic_for_a_seed_and_any_thread_count():
    base = _stream(1)
    assert _equal(base, _stream(1))
    assert _equal(base, _stream(2))
    assert _equal(base, _stream(4))
    assert not _equal(base, _stream(1, seed=12))
    first, second = base[0][0], base[1][0]
    assert not all(np.array_equal(x, y) for x, y in zip(first, second))  # iterations differ


def test_random_schemas_are_marked_random():
    from stoker.operators.schema import get_operator

    for name in ("random.uniform", "random.normal", "random.coin_flip", "random.choice"):
        assert get_operator(name).schema.random


def test_bad_probability_is_reported():
    from stoker.errors import StokerError

    with pytest.raises(StokerError, match="probability"):
        _run(lambda f: f.random.coin_flip(probability=1.5))


@pytest.mark.oracle
def test_shapes_and_dtypes_match_dali():
    def make(f, t):
        return (f.random.uniform(), f.random.uniform(shape=(2,), range=(0, 4)), f.random.normal(),
                f.random.coin_flip(), f.random.coin_flip(shape=(3, 1)), f.random.choice(5),
                f.random.choice([1.5, 2.5]))

    theirs = [[np.array(t.at(i)) for i in range(4)] for t in pipeline("dali", make, 4, seed=1).run()]
    ours = _run(lambda f: make(f, types), batch_size=4)[0]
    for k, (a, b) in enumerate(zip(ours, theirs)):
        assert [x.shape for x in a] == [y.shape for y in b], f"output {k}"
        assert a[0].dtype == b[0].dtype, f"output {k}: {a[0].dtype} vs DALI's {b[0].dtype}"


def test_per_sample_range_from_a_constant_node():
    runs = _run(lambda f: f.random.uniform(range=f.constant(fdata=[5.0, 6.0])), iterations=2)
    v = np.concatenate([np.stack(r[0]) for r in runs])
    assert v.min() >= 5.0 and v.max() < 6.0 and v.std() > 0.2


@pytest.mark.parametrize("op,kwargs", [("uniform", {"range": (-3.0, 5.0)}), ("uniform", {"values": [1.0, 4.0, 9.0]}),
                                       ("uniform", {"range": (0, 10), "dtype": types.INT32}),
                                       ("normal", {"mean": 2.0, "stddev": 3.0}), ("coin_flip", {"probability": 0.3})])
def test_vectorized_batch_path_equals_per_sample_path(op, kwargs):
    """The whole-batch NumPy path gives exactly the values of the per-sample path."""
    from stoker.operators.base import BatchContext, SampleContext
    from stoker.operators.schema import get_operator

    cls = get_operator(f"random.{op}")
    schema_args = {a.name: a.convert(cls.schema.name, a.default) for a in cls.schema.all_args()}
    schema_args.update({k: cls.schema.arg(k).convert(cls.schema.name, v) for k, v in kwargs.items()})
    inst = cls(schema_args, "cpu", op_seed=1234)
    batch = BatchContext(16, iteration=5, index_offset=3)
    (fast,) = inst.run_cpu(batch, [], {})
    slow = [inst.run_sample((), schema_args, SampleContext(3 + i, 5, 1234)) for i in range(16)]
    np.testing.assert_array_equal(np.stack(fast.samples()), np.stack(slow))
    assert fast.samples()[0].dtype == slow[0].dtype


def _choice_with_shape_like(lib):
    likes = [np.zeros((2, 3), np.uint8), np.zeros((4, 1), np.uint8), np.zeros((1, 5), np.uint8)]
    vals = [np.array([5, 7, 9], np.int32)] * 3

    def body(f, t):
        v = f.external_source(source=lambda: vals, batch=True)
        like = f.external_source(source=lambda: likes, batch=True)
        return f.random.choice(v, like)

    out = pipeline(lib, body, 3, num_threads=1, seed=2).run()[0]
    return [np.array(out.at(i)) for i in range(3)]


@pytest.mark.oracle
def test_choice_shape_like_input_matches_dali_shapes():
    ours, theirs = _choice_with_shape_like("stoker"), _choice_with_shape_like("dali")
    assert [(o.shape, o.dtype) for o in ours] == [(t.shape, t.dtype) for t in theirs] == \
        [((2, 3), np.int32), ((4, 1), np.int32), ((1, 5), np.int32)]
    assert all(np.isin(o, [5, 7, 9]).all() for o in ours)


@pytest.mark.parametrize("kw", [dict(range=(-0.2, 0.2), shape=(2,)), dict(values=[1, 2, 5], shape=(3, 2)),
                                dict(range=(0, 10), shape=(4,), dtype=np.int32), dict(range=(1, 3), shape=(0,))])
def test_uniform_of_a_static_shape_is_drawn_for_the_batch_as_sample_by_sample(kw):
    """The whole-batch path (one NumPy step) gives run_sample's values for shaped samples too."""
    from stoker.operators.base import BatchContext, Operator
    from stoker.operators.schema import get_operator

    cls = get_operator("random.uniform")
    static, _ = cls.schema.bind(kw, lambda v: False)
    op = cls(static, "cpu", op_seed=1234)
    batch = BatchContext(batch_size=20, iteration=3, index_offset=5)
    got = op.run_cpu(batch, [], {})[0].samples()
    want = Operator.run_cpu(op, batch, [], {})[0].samples()
    assert len(got) == len(want) == 20
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g, w)
