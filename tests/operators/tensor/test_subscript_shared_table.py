"""Per-sample indices into one table every sample shares (auto_aug's magnitude tables): the batch
is indexed at once, with the same values and errors as the per-sample path."""

import numpy as np
import pytest

import stoker.fn as fn
import stoker.types as types
from stoker import pipeline_def
from stoker.errors import OperatorError
from stoker.pipeline.data_node import constant_node

TABLE = np.arange(62 * 2 * 3, dtype=np.float32).reshape(62, 2, 3)


def _run(index_values, build):
    @pipeline_def(batch_size=len(index_values), num_threads=1, device_id=None, seed=1)
    def p():
        idx = fn.external_source(source=lambda: [np.asarray(v) for v in index_values], batch=True)
        return build(idx)

    pipe = p()
    pipe.build()
    return [np.array(s) for s in pipe.run()[0].samples()]


@pytest.mark.parametrize("values", [[0, 61, 5, -1], [np.int64(3), np.int64(-62)], [2.9, -0.5, 60.2]])
def test_rows_of_a_shared_table(values):
    got = _run(values, lambda idx: constant_node(TABLE)[idx])
    for v, row in zip(values, got):
        np.testing.assert_array_equal(row, TABLE[int(v)])


def test_two_indices_and_a_static_one():
    values = [1, 2, 0, -3]
    got = _run(values, lambda idx: constant_node(TABLE)[idx, 1, idx])
    for v, x in zip(values, got):
        assert x.shape == () and x == TABLE[v, 1, v]


def test_an_index_out_of_range_names_the_sample():
    with pytest.raises(OperatorError, match="_subscript|index"):
        _run([0, 62], lambda idx: constant_node(TABLE)[idx])


def test_a_table_that_is_not_shared_takes_the_per_sample_path():
    tables = [TABLE + k for k in range(3)]

    @pipeline_def(batch_size=3, num_threads=1, device_id=None, seed=1)
    def p():
        t = fn.external_source(source=lambda: tables, batch=True)
        idx = fn.cast(fn.external_source(source=lambda: [np.int32(4), np.int32(0), np.int32(9)], batch=True),
                      dtype=types.INT32)
        return t[idx]

    pipe = p()
    pipe.build()
    got = [np.array(s) for s in pipe.run()[0].samples()]
    for k, (i, row) in enumerate(zip([4, 0, 9], got)):
        np.testing.assert_array_equal(row, tables[k][i])
