"""cat, stack, lookup_table, one_hot, element_extract and zeros/ones/full(_like) against DALI."""

import numpy as np
import pytest
from oracle import check, run_graph

from stoker.errors import StokerError

RNG = np.random.default_rng(1)
A = [RNG.random((2, 3, 3), np.float32), RNG.random((4, 1, 3), np.float32)]
A2 = [RNG.random((2, 5, 3), np.float32), RNG.random((4, 2, 3), np.float32)]


@pytest.mark.oracle
@pytest.mark.parametrize("kw", [dict(axis=1), dict(axis_name="W"), dict(axis=-2), dict()], ids=str)
def test_cat_matches_dali(kw):
    first = A
    second = A2 if kw else [a[:1] + 1 for a in A]
    check(lambda fn, t, x, y: fn.cat(x, y, x, **kw), first, second, layouts=["HWC", "HWC"], what=str(kw))


def test_cat_mismatched_extents_fail_clearly():
    with pytest.raises(StokerError, match="cat"):
        run_graph("stoker", lambda fn, t, x, y: fn.cat(x, y, axis=0), A, A2, layouts=["HWC", "HWC"])


@pytest.mark.oracle
@pytest.mark.parametrize("kw", [dict(axis=0), dict(axis=1, axis_name="X"), dict(axis=3, axis_name="F"),
                                dict(axis=2)], ids=str)
def test_stack_matches_dali(kw):
    check(lambda fn, t, x, y: fn.stack(x, y, **kw), A, [a + 1 for a in A], layouts=["HWC", "HWC"], what=str(kw))


KEYS = [np.array([[0, 1, 2], [5, 7, 300]], np.int32), np.array([[5, 5], [0, 9]], np.int32)]


@pytest.mark.oracle
@pytest.mark.parametrize("kw", [lambda t: dict(keys=[0, 2, 5], values=[1.5, 2.5, -3.0], default_value=9.0),
                                lambda t: dict(keys=[5, 300], values=[7, 200], dtype=t.UINT8),
                                lambda t: dict(keys=[1], values=[-1e6], dtype=t.INT16)], ids=range(3))
def test_lookup_table_matches_dali(kw):
    check(lambda fn, t, x: fn.lookup_table(x, **kw(t)), KEYS)
    check(lambda fn, t, x: fn.lookup_table(x, **kw(t)), [k.astype(np.uint16) for k in KEYS])


def test_lookup_table_values_must_pair_with_keys():
    with pytest.raises(StokerError, match="lookup_table.*'values'"):
        run_graph("stoker", lambda fn, t, x: fn.lookup_table(x, keys=[1, 2], values=[1.0]), KEYS)


LABELS = [np.array([[2, 0], [1, 5]], np.int32), np.array([[0, -1], [3, 3]], np.int32)]


@pytest.mark.oracle
@pytest.mark.parametrize("kw", [lambda t: dict(num_classes=4),
                                lambda t: dict(num_classes=3, axis=0, axis_name="X"),
                                lambda t: dict(num_classes=4, axis=1, dtype=t.INT32, on_value=5, off_value=-1),
                                lambda t: dict(num_classes=4, dtype=t.UINT8, on_value=300)], ids=range(4))
def test_one_hot_matches_dali(kw):
    check(lambda fn, t, x: fn.one_hot(x, **kw(t)), LABELS, layouts=["HW"])


@pytest.mark.oracle
def test_one_hot_scalar_and_single_element_labels():
    check(lambda fn, t, x: fn.one_hot(x, num_classes=5), [np.int64(3), np.int64(9)])
    check(lambda fn, t, x: fn.one_hot(x, num_classes=5), [np.array([4], np.uint8), np.array([0], np.uint8)])


@pytest.mark.oracle
def test_element_extract_matches_dali():
    seq = [np.arange(24).reshape(3, 2, 4), np.arange(40).reshape(5, 2, 4) * 2]
    check(lambda fn, t, x: tuple(fn.element_extract(x, element_map=[2, 0, 2])), seq, layouts=["FHW"])


def test_element_extract_out_of_range_names_the_argument():
    seq = [np.zeros((2, 3))]
    with pytest.raises(StokerError, match="element_map"):
        run_graph("stoker", lambda fn, t, x: fn.element_extract(x, element_map=[4]), seq)


@pytest.mark.oracle
@pytest.mark.parametrize("name", ["zeros", "ones"])
def test_zeros_ones_match_dali(name):
    shapes = [np.array([2, 3], np.int32), np.array([1, 4], np.int32)]
    check(lambda fn, t, s: getattr(fn, name)(shape=s), shapes)
    check(lambda fn, t, s: getattr(fn, name)(shape=[3, 2], dtype=t.FLOAT, layout="HW"), shapes)


@pytest.mark.oracle
def test_full_and_like_forms_match_dali():
    fill = [np.array([1.5, -2.0, 3.0], np.float32), np.array([7.0, 8.0, 9.0], np.float32)]
    data = [np.zeros((2, 3), np.uint8), np.ones((4, 3), np.uint8)]
    check(lambda fn, t, f: fn.full(f, shape=[2, 3]), fill)
    check(lambda fn, t, x, f: fn.full_like(x, f), data, fill, layouts=["HW", None])
    check(lambda fn, t, x: fn.zeros_like(x), data, layouts=["HW"])
    check(lambda fn, t, x: fn.ones_like(x, dtype=t.FLOAT), data, layouts=["HW"])


@pytest.mark.oracle
def test_one_hot_axis_in_the_middle_names_the_new_axis():
    check(lambda fn, t, x: fn.one_hot(x, num_classes=6, axis=1, axis_name="K"), LABELS, layouts=["HW"])


@pytest.mark.oracle
def test_cat_and_stack_of_many_inputs_match_dali():
    batches = [[RNG.integers(0, 9, (2, i + 1), np.int16) for i in range(3)] for _ in range(4)]  # 4 inputs
    check(lambda fn, t, *a: fn.cat(*a, axis=0), *batches, layouts=["HW"] * 4)
    check(lambda fn, t, *a: fn.stack(*a, axis=2, axis_name="S"), *batches, layouts=["HW"] * 4)
