"""fn.external_source: sources, cycle modes, per-sample info, feeding, parallel workers, checks."""

import os

import numpy as np
import pytest
from oracle import libs

import stoker
from stoker import fn, ops, pipeline_def, types
from stoker.errors import OperatorError, PipelineBuildError, StokerError
from stoker.tensors import TensorListCPU

BS = 2


def make(api, source, **kwargs):
    """A one-output pipeline on the external source, for stoker or (api="dali") DALI."""
    fns, pdef, _ = libs(api)

    @pdef(batch_size=BS, num_threads=1, device_id=None, prefetch_queue_depth=2, py_num_workers=2)
    def p():
        return fns.external_source(source=source, **kwargs)

    pipe = p()
    pipe.build()
    return pipe


def drive(pipe, runs=9):
    """First value of each sample per run; 'STOP' (then reset) where run() raises StopIteration."""
    out = []
    for _ in range(runs):
        try:
            (batch,) = pipe.run()
            out.append([int(np.asarray(batch.at(i)).reshape(-1)[0]) for i in range(len(batch))])
        except StopIteration:
            out.append("STOP")
            pipe.reset()
    return out


DATA = [np.array([[i], [i + 100]]) for i in range(3)]


def gen_batches():
    for i in range(3):
        yield np.array([[i], [i + 100]])


def per_sample(info):
    if info.idx_in_epoch >= 5:
        raise StopIteration
    return np.array([info.idx_in_epoch * 1000 + info.idx_in_batch * 100 + info.iteration * 10 + info.epoch_idx])


def per_batch_info(info):
    if info.iteration >= 2:
        raise StopIteration
    return np.array([[info.iteration * 10 + info.epoch_idx]] * BS)


def per_batch_index(i):
    if i >= 2:
        raise StopIteration
    return np.array([[i]] * BS)


CASES = {
    "list": (lambda: DATA, {}),
    "list_raise": (lambda: DATA, {"cycle": "raise"}),
    "list_quiet": (lambda: DATA, {"cycle": True}),
    "genfunc": (lambda: gen_batches, {}),
    "genfunc_raise": (lambda: gen_batches, {"cycle": "raise"}),
    "iterator": (lambda: iter(DATA), {}),
    "per_sample": (lambda: per_sample, {"batch": False}),
    "batch_info": (lambda: per_batch_info, {"batch_info": True}),
    "index": (lambda: per_batch_index, {}),
    "genfunc_quiet": (lambda: gen_batches, {"cycle": "quiet"}),
    "sample_list": (lambda: [np.array([i]) for i in range(5)], {"batch": False, "cycle": "raise"}),
    "sample_list_quiet": (lambda: [np.array([i]) for i in range(5)], {"batch": False, "cycle": True}),
}


@pytest.mark.oracle
@pytest.mark.parametrize("case", sorted(CASES))
def test_end_of_data_and_cycle_patterns_match_dali(case):
    source, kwargs = CASES[case]
    ours = drive(make("stoker", source(), **kwargs))
    theirs = drive(make("dali", source(), **kwargs))
    assert ours == theirs
    assert any(isinstance(b, list) for b in ours)


def test_sample_info_values():
    seen = []

    def src(info):
        seen.append(info)
        if info.idx_in_epoch >= 5:
            raise StopIteration
        return np.array([info.idx_in_epoch], np.int64)

    pipe = make("stoker", src, batch=False)
    assert drive(pipe, 6) == [[0, 1], [2, 3], "STOP", [0, 1], [2, 3], "STOP"]
    infos = {(s.epoch_idx, s.iteration, s.idx_in_batch): s.idx_in_epoch for s in seen}
    for (epoch, iteration, in_batch), in_epoch in infos.items():
        assert in_epoch == iteration * BS + in_batch
        assert epoch in (0, 1)
    assert (1, 1, 1) in infos  # the second epoch counts from iteration 0 again


def test_num_outputs_and_per_output_layout_dtype():
    def src(i):
        return [np.full((2, 3), i, np.uint8)] * BS, np.arange(BS, dtype=np.float32) + i

    @pipeline_def(batch_size=BS, num_threads=1, device_id=None)
    def p():
        a, b = fn.external_source(source=src, num_outputs=2, layout=["HW"], dtype=[types.UINT8, types.FLOAT])
        (single,) = fn.external_source(source=lambda: ([np.zeros(1)] * BS,), num_outputs=1)
        return a, b, single

    pipe = p()
    pipe.build()
    for it in range(2):
        a, b, single = pipe.run()
        assert a.layout() == "HW" and b.layout() == ""
        np.testing.assert_array_equal(a.at(1), np.full((2, 3), it, np.uint8))
        np.testing.assert_array_equal(b.as_array(), np.arange(BS, dtype=np.float32) + it)
        assert len(single) == BS


def test_feed_input_by_name_and_run_kwargs():
    @pipeline_def(batch_size=3, num_threads=1, device_id=None)
    def p():
        return fn.external_source(name="x", layout="HW") * 2

    pipe = p()
    pipe.build()
    dense = np.arange(24, dtype=np.int32).reshape(2, 3, 4)
    (out,) = pipe.run(x=dense)  # a smaller batch than batch_size is allowed
    assert len(out) == 2
    np.testing.assert_array_equal(out.as_array(), dense * 2)
    ragged = [np.ones((1, 2), np.int32), np.ones((3, 1), np.int32), np.zeros((2, 2), np.int32)]
    pipe.feed_input("x", ragged)
    (out,) = pipe.run()
    assert out.shape() == [(1, 2), (3, 1), (2, 2)]
    torch = pytest.importorskip("torch")
    pipe.feed_input("x", torch.ones(3, 2, 2, dtype=torch.int32))
    pipe.feed_input("x", TensorListCPU([np.full((1, 1), 5, np.int32)] * 3))
    assert pipe.run()[0].at(2).tolist() == [[2, 2], [2, 2]]
    assert pipe.run()[0].at(0).tolist() == [[10]]
    with pytest.raises(StokerError, match="no data"):
        pipe.run()


def test_fed_data_is_copied_unless_no_copy():
    @pipeline_def(batch_size=1, num_threads=1, device_id=None)
    def p():
        return fn.external_source(name="a"), fn.external_source(name="b", no_copy=True)

    pipe = p()
    pipe.build()
    arr_a, arr_b = np.zeros(3), np.zeros(3)
    pipe.feed_input("a", [arr_a])
    pipe.feed_input("b", [arr_b])
    arr_a += 1
    arr_b += 1
    a, b = pipe.run()
    assert a.at(0).tolist() == [0, 0, 0]
    assert b.at(0).tolist() == [1, 1, 1]


@pytest.mark.parametrize("lib", ["stoker", pytest.param("dali", marks=pytest.mark.oracle)])
@pytest.mark.parametrize("kw", [{}, {"blocking": False}, {"no_copy": False}])
def test_default_blocking_and_copy_as_dali(lib, kw):
    """blocking=False and no_copy=False are the defaults (as in DALI): fed data comes back,
    copied at feed time; an iteration with nothing fed is an error, not a wait."""
    fn_, pdef, _ = libs(lib)

    @pdef(batch_size=1, num_threads=1, device_id=None, prefetch_queue_depth=1)
    def p():
        return fn_.external_source(name="a", **kw)

    pipe = p()
    pipe.build()
    arr = np.arange(3.0)
    pipe.feed_input("a", [arr])
    arr += 10  # after feed_input: a copy was taken
    assert np.array(pipe.run()[0].at(0)).tolist() == [0.0, 1.0, 2.0]
    with pytest.raises(Exception, match="no data|doesn't exist"):
        pipe.run()


def test_blocking_true_is_accepted_and_feeds_as_usual():
    @pipeline_def(batch_size=1, num_threads=1, device_id=None)
    def p():
        return fn.external_source(name="a", blocking=True)

    pipe = p()
    pipe.build()
    pipe.feed_input("a", [np.ones(2)])
    assert pipe.run()[0].at(0).tolist() == [1.0, 1.0]


def test_legacy_pipeline_with_iter_setup_and_feed_input():
    class P(stoker.Pipeline):
        def __init__(self):
            super().__init__(batch_size=BS, num_threads=1, device_id=None)
            self.source = ops.ExternalSource()
            self.counter = 0

        def define_graph(self):
            self.data = self.source()
            return self.data + 1

        def iter_setup(self):
            self.feed_input(self.data, [np.full(2, self.counter, np.int32)] * BS)
            self.counter += 1

    pipe = P()
    pipe.build()
    firsts = [int(pipe.run()[0].at(0)[0]) for _ in range(4)]
    assert firsts == [1, 2, 3, 4]


@pytest.mark.parametrize("mode", ["per_sample", "batch_info"])
def test_parallel_gives_the_same_batches_in_worker_processes(mode):
    main_pid = os.getpid()

    def sample_src(info):
        if info.idx_in_epoch >= 7:
            raise StopIteration
        return np.array([info.idx_in_epoch, info.epoch_idx, os.getpid()], np.int64)

    def batch_src(info):
        if info.iteration >= 3:
            raise StopIteration
        return [np.array([info.iteration, info.epoch_idx, os.getpid()], np.int64)] * BS

    if mode == "per_sample":
        src, kwargs = sample_src, {"batch": False}
    else:
        src, kwargs = batch_src, {"batch_info": True, "batch": True}

    def values(parallel):
        pipe = make("stoker", src, parallel=parallel, **kwargs)
        out, pids = [], set()
        for _ in range(8):
            try:
                (b,) = pipe.run()
            except StopIteration:
                out.append("STOP")
                pipe.reset()
                continue
            out.append([b.at(i)[:2].tolist() for i in range(len(b))])
            pids.update(int(b.at(i)[2]) for i in range(len(b)))
        pipe.close()
        return out, pids

    serial, serial_pids = values(False)
    parallel, parallel_pids = values(True)
    assert serial == parallel
    assert "STOP" in serial
    assert serial_pids == {main_pid}
    assert main_pid not in parallel_pids


def test_checkpoint_restores_epoch_and_iteration():
    def src(info):
        if info.iteration >= 3:
            raise StopIteration
        return [np.array([info.epoch_idx * 10 + info.iteration])] * BS

    def build(cp=None):
        @pipeline_def(batch_size=BS, num_threads=1, device_id=None, enable_checkpointing=True, checkpoint=cp)
        def p():
            return fn.external_source(source=src, batch_info=True, name="es")

        pipe = p()
        pipe.build()
        return pipe

    first = build()
    drive(first, 5)  # [0], [1], [2], STOP, [10]
    cp = first.checkpoint()
    assert drive(build(cp), 4) == drive(first, 4) == [[11, 11], [12, 12], "STOP", [20, 20]]


def test_dtype_and_ndim_are_checked_with_the_operator_name():
    def run(source, **kw):
        @pipeline_def(batch_size=BS, num_threads=1, device_id=None)
        def p():
            return fn.external_source(source=source, name="es", **kw)

        pipe = p()
        pipe.build()
        return pipe.run()

    (out,) = run(lambda: [np.zeros((2, 2), np.float32)] * BS, dtype=types.FLOAT, ndim=2, layout="HW")
    assert out.layout() == "HW" and out.dtype == types.FLOAT
    with pytest.raises(OperatorError, match=r"external_source 'es'.*dtype") as e:
        run(lambda: [np.zeros(2)] * BS, dtype=types.FLOAT)
    assert "float32" in str(e.value) and "float64" in str(e.value)
    with pytest.raises(OperatorError, match=r"external_source 'es'.*3 dimensions"):
        run(lambda: [np.zeros(2)] * BS, layout="HWC")


@pytest.mark.parametrize("bad", ["text", None, {"a": 1}, [b"raw", b"raw"], ["a", "b"], [[1, 2], [3]]])
def test_bad_data_types_name_the_operator(bad):
    @pipeline_def(batch_size=BS, num_threads=1, device_id=None)
    def p():
        return fn.external_source(source=lambda: bad, name="es")

    pipe = p()
    pipe.build()
    with pytest.raises(OperatorError, match=r"external_source 'es'.*must be a NumPy array"):
        pipe.run()


def test_too_many_samples_and_build_errors():
    with pytest.raises(OperatorError, match="batch_size=2"):
        make("stoker", lambda: [np.zeros(1)] * 3).run()
    for kwargs, arg in [({"source": lambda: 1, "cycle": True}, "cycle"), ({"cycle": "sometimes"}, "cycle"),
                        ({"source": iter([1]), "cycle": "raise"}, "cycle"), ({"source": 5}, "source"),
                        ({"source": lambda: 1, "parallel": True}, "parallel")]:
        @pipeline_def(batch_size=BS, num_threads=1, device_id=None)
        def p(kw=kwargs):
            return fn.external_source(**kw)

        with pytest.raises(PipelineBuildError, match=f"external_source: argument '{arg}'"):
            p().build()


def test_repeat_last_reuses_the_latest_fed_batch():
    @pipeline_def(batch_size=1, num_threads=1, device_id=None, prefetch_queue_depth=1)
    def p():
        return fn.external_source(name="x", repeat_last=True)

    pipe = p()
    pipe.build()
    with pytest.raises(StokerError, match="no data"):
        pipe.run()
    pipe.feed_input("x", [np.array([1])])
    assert [int(pipe.run()[0].at(0)[0]) for _ in range(3)] == [1, 1, 1]
    pipe.feed_input("x", [np.array([2])])
    assert int(pipe.run()[0].at(0)[0]) == 2


def test_parallel_with_spawn_needs_a_picklable_source():
    def build(source):
        @pipeline_def(batch_size=BS, num_threads=1, device_id=None, py_num_workers=2, py_start_method="spawn")
        def p():
            return fn.external_source(source=source, batch=False, parallel=True, name="es")

        pipe = p()
        pipe.build()
        return pipe

    pipe = build(per_sample)  # module level: picklable
    assert drive(pipe, 4) == [[0, 1100], [2010, 3110], "STOP", [1, 1101]]
    pipe.close()
    with pytest.raises(PipelineBuildError, match="picklable"):
        build(lambda info: np.zeros(1))


def test_repeat_last_takes_new_data_in_order_with_prefetch():
    @pipeline_def(batch_size=1, num_threads=1, device_id=None, prefetch_queue_depth=2)
    def p():
        return fn.external_source(name="x", repeat_last=True)

    pipe = p()
    pipe.build()
    for v in (1, 2, 3):
        pipe.feed_input("x", [np.array([v])])
    got = [int(pipe.run()[0].at(0)[0]) for _ in range(5)]
    assert got == [1, 2, 3, 3, 3]
    assert not pipe._fed["x"]  # nothing left queued


def test_feed_input_into_a_source_with_a_callable_is_refused():
    pipe = make("stoker", lambda: [np.zeros(1)] * BS, name="es")
    with pytest.raises(PipelineBuildError, match="has a source"):
        pipe.feed_input("es", [np.zeros(1)] * BS)


def test_source_may_be_positional_as_in_dali():
    import numpy as np

    from stoker import fn, pipeline_def

    @pipeline_def(batch_size=2, num_threads=1, device_id=None)
    def p():
        return fn.external_source(lambda: [np.array([7], np.int32)] * 2)

    pipe = p()
    pipe.build()
    assert pipe.run()[0].as_array().tolist() == [[7], [7]]
    pipe.close()
