"""The Pipeline object, tracing and the executor, on operators with no data dependencies."""

import threading
import time

import numpy as np
import pytest

import stoker
import stoker.fn as fn
import stoker.math as smath
from stoker import Pipeline, pipeline_def, types
from stoker.errors import OperatorError, PipelineBuildError, StokerError


def run_once(pipe):
    pipe.build()
    try:
        return pipe.run()
    finally:
        pipe.close()


def test_decorator_args_are_defaults_and_call_kwargs_override():
    @pipeline_def(batch_size=3, num_threads=1, device_id=None, seed=5)
    def p(n=1):
        return fn.constant(idata=[n, n])

    a = p()
    b = p(n=7, batch_size=5)
    assert (a.batch_size, a.seed) == (3, 5)
    assert b.batch_size == 5 and b.seed == 5
    (out,) = run_once(b)
    assert len(out) == 5
    np.testing.assert_array_equal(out.at(4), [7, 7])


def test_pipeline_current_is_set_while_defining():
    seen = []

    @pipeline_def(batch_size=2, num_threads=1, device_id=None)
    def p():
        seen.append(Pipeline.current())
        return fn.constant(fdata=[1.0])

    pipe = p()
    assert seen == [pipe]
    assert Pipeline.current() is None


@pytest.mark.parametrize("expr", ["add", "sub", "mul", "fdiv", "lt", "neg", "subscript", "sqrt"])
def test_datanode_arithmetic_matches_numpy(expr):
    a_val = np.array([[1, 2, 3], [4, 5, 6]], np.int16)
    b_val = np.array([[2.0, 0.5, 4.0], [1.0, 8.0, 2.0]], np.float32)

    @pipeline_def(batch_size=2, num_threads=2, device_id=None)
    def p():
        a = fn.constant(idata=a_val.ravel().tolist(), shape=[2, 3], dtype=types.INT16)
        b = fn.constant(fdata=b_val.ravel().tolist(), shape=[2, 3])
        return {"add": a + b, "sub": a - 1, "mul": 2.5 * a, "fdiv": a / b, "lt": a < b, "neg": -a,
                "subscript": a[1, 1:], "sqrt": smath.sqrt(b)}[expr]

    expected = {"add": a_val + b_val, "sub": (a_val - 1).astype(np.int32), "mul": 2.5 * a_val,
                "fdiv": a_val / b_val, "lt": a_val < b_val, "neg": -a_val, "subscript": a_val[1, 1:],
                "sqrt": np.sqrt(b_val)}[expr]
    (out,) = run_once(p())
    assert out.is_dense_tensor()
    got = out.as_array()
    assert got.shape == (2, *np.shape(expected))
    np.testing.assert_allclose(got[1], expected, rtol=1e-6)


def test_datanode_in_python_if_raises():
    @pipeline_def(batch_size=1, num_threads=1, device_id=None)
    def p():
        x = fn.constant(idata=[1])
        if x > 0:
            return x
        return x

    with pytest.raises(TypeError, match="symbolic"):
        p()


def test_unknown_argument_is_named():
    with pytest.raises(PipelineBuildError, match=r"constant: unknown argument 'fdta'"):
        @pipeline_def(batch_size=1, num_threads=1, device_id=None)
        def p():
            return fn.constant(fdta=[1.0])

        p()


def test_wrong_argument_type_is_named():
    with pytest.raises(PipelineBuildError, match=r"cast: argument 'dtype'"):
        @pipeline_def(batch_size=1, num_threads=1, device_id=None)
        def p():
            return fn.cast(fn.constant(idata=[1]), dtype="not a type")

        p()


@pytest.mark.parametrize("how", ["device_gpu", "dot_gpu"])
def test_gpu_operator_without_gpu_fails_at_build_with_advice(how):
    @pipeline_def(batch_size=1, num_threads=1, device_id=None)
    def p():
        x = fn.constant(idata=[1])
        return fn.cast(x, dtype=types.FLOAT, device="gpu") if how == "device_gpu" else x.gpu()

    pipe = p()
    with pytest.raises(PipelineBuildError, match=r"needs a GPU.*device_id=None.*device='cpu'"):
        pipe.build()


def test_runtime_error_names_operator_and_user_line():
    @pipeline_def(batch_size=2, num_threads=2, device_id=None)
    def p():
        x = fn.constant(idata=[1, 2, 3])
        return x[7]  # out of range: fails at run time

    pipe = p()
    pipe.build()
    with pytest.raises(OperatorError) as info:
        pipe.run()
    msg = str(info.value)
    assert "_subscript" in msg and "index out of range" in msg
    assert "test_pipeline.py" in msg and "in p" in msg
    pipe.close()


@pytest.mark.parametrize("pipelined,asynchronous,depth", [(False, False, 1), (True, False, 2), (True, True, 3),
                                                          (True, True, {"cpu_size": 2, "gpu_size": 1})])
def test_execution_modes_agree(pipelined, asynchronous, depth):
    @pipeline_def(batch_size=4, num_threads=2, device_id=None)
    def p():
        a = fn.constant(idata=[3, 1, 2])
        return a * a + 1, a.shape()

    pipe = p(exec_pipelined=pipelined, exec_async=asynchronous, prefetch_queue_depth=depth)
    pipe.build()
    for _ in range(4):
        sq, shape = pipe.run()
        np.testing.assert_array_equal(sq.as_array(), np.tile([10, 2, 5], (4, 1)))
        np.testing.assert_array_equal(shape.as_array(), np.tile([3], (4, 1)))
    pipe.close()


def test_schedule_run_share_outputs_release_outputs():
    @pipeline_def(batch_size=2, num_threads=1, device_id=None)
    def p():
        return fn.constant(idata=[1, 2])

    pipe = p()
    pipe.build()
    pipe.schedule_run()
    (out,) = pipe.share_outputs()
    pipe.release_outputs()
    np.testing.assert_array_equal(out.as_array(), [[1, 2], [1, 2]])
    with pytest.raises(StokerError):
        for _ in range(5):
            pipe.outputs()
    pipe.close()


def test_context_manager_and_set_outputs():
    pipe = Pipeline(batch_size=2, num_threads=1, device_id=None)
    with pipe:
        pipe.set_outputs(fn.constant(fdata=[0.5]) * 4)
    (out,) = run_once(pipe)
    np.testing.assert_allclose(out.as_array(), [[2.0], [2.0]])


@pytest.mark.parametrize("kwargs,match", [({"batch_size": 0}, "batch_size"), ({"batch_size": 2, "num_threads": 0},
                                          "num_threads"), ({"batch_size": 2, "prefetch_queue_depth": 0}, "prefetch"),
                                          ({"batch_size": 2, "on_error": "ignore"}, "on_error")])
def test_bad_pipeline_arguments(kwargs, match):
    with pytest.raises(PipelineBuildError, match=match):
        Pipeline(**kwargs)


def test_build_and_close_leave_no_threads():
    before = threading.active_count()

    @pipeline_def(batch_size=2, num_threads=3, device_id=None)
    def p():
        return fn.constant(idata=[1])

    for _ in range(20):
        pipe = p()
        pipe.build()
        pipe.run()
        pipe.close()
    # (pipelines of earlier tests collected meanwhile close on short-lived threads of their own)
    deadline = time.monotonic() + 5
    while threading.active_count() > before and time.monotonic() < deadline:
        time.sleep(0.02)
    assert threading.active_count() <= before


def test_outputs_stay_valid_after_next_run():
    @pipeline_def(batch_size=2, num_threads=1, device_id=None)
    def p():
        return fn.constant(idata=[4, 5]) + 0

    pipe = p()
    pipe.build()
    (first,) = pipe.run()
    keep = first.as_array().copy()
    for _ in range(3):
        pipe.run()
    np.testing.assert_array_equal(first.as_array(), keep)
    pipe.close()


def test_types_roundtrip():
    for t in [types.UINT8, types.INT16, types.INT32, types.FLOAT, types.FLOAT16, types.FLOAT64, types.BOOL]:
        assert types.to_dali_type(types.to_numpy_type(t)) == t
    assert str(types.FLOAT) == "DALIDataType.FLOAT"
    assert stoker.__version__


def test_reset_in_mid_stream_loses_no_batch():
    batches = iter(range(100))

    @pipeline_def(batch_size=1, num_threads=1, device_id=None, prefetch_queue_depth=3)
    def p():
        return fn.external_source(source=lambda: [np.array([next(batches)], np.int32)])

    pipe = p()
    pipe.build()
    got = [int(pipe.run()[0].at(0)[0])]
    pipe.reset()  # the source has not ended: nothing is discarded
    got += [int(pipe.run()[0].at(0)[0]) for _ in range(3)]
    assert got == [0, 1, 2, 3]
    pipe.close()


def test_cast_rounds_halves_away_from_zero_and_full_index_gives_a_scalar():
    @pipeline_def(batch_size=1, num_threads=1, device_id=None)
    def p():
        f = fn.constant(fdata=[2.5, -0.5, 1.5, -2.5, 1e10])
        return fn.cast(f, dtype=types.INT32), fn.constant(idata=[1, 2, 3])[0]

    cast, scalar = run_once(p())
    np.testing.assert_array_equal(cast.at(0), [3, -1, 2, -3, np.iinfo(np.int32).max])
    assert scalar.at(0).shape == () and int(scalar.at(0)) == 1
