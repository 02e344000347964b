"""Pipeline.start_py_workers(): the parallel external source's worker processes start before the
build (before anything that should not be forked), the build keeps them, and the outputs do not change."""

import numpy as np

import stoker.fn as fn
from stoker import pipeline_def


def _sample(info):
    return np.full((3,), info.idx_in_epoch, np.int64)


@pipeline_def(batch_size=4, num_threads=1, device_id=None, seed=2, py_num_workers=2, py_start_method="fork")
def _parallel():
    x = fn.external_source(source=_sample, batch=False, parallel=True, name="src")
    return x + fn.random.uniform(range=(0, 1), shape=[3])


def _pool_of(graph):
    return [inst for inst in graph.instances.values() if hasattr(inst, "start_workers")][0]._pool


def test_workers_start_before_build_and_are_the_ones_that_run():
    early, late = _parallel(), _parallel()
    early.start_py_workers()
    pool = _pool_of(early._early_graph)
    assert pool is not None
    pids = {p.pid for p in pool._pool._processes.values()}
    assert len(pids) == 2 and not early._built
    early.start_py_workers()  # a second call changes nothing
    assert _pool_of(early._early_graph) is pool
    for _ in range(3):
        (a,), (b,) = early.run(), late.run()
        np.testing.assert_array_equal(a.as_array(), b.as_array())
    assert _pool_of(early._graph) is pool
    assert {p.pid for p in pool._pool._processes.values()} == pids
    early.close()
    late.close()


def test_no_op_without_parallel_sources_and_after_build():
    @pipeline_def(batch_size=2, num_threads=1, device_id=None)
    def plain():
        return fn.random.uniform()

    p = plain()
    p.start_py_workers()
    assert getattr(p, "_early_graph", None) is None and not p._built
    p.build()
    p.start_py_workers()
    assert len(p.run()[0]) == 2
    p.close()
