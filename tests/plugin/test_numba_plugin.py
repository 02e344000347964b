"""stoker.plugin.numba: numba_function against DALI's on the CPU, its plain-Python fallback,
argument checks, the ops and eager forms, and the numba.cuda path (GPU only)."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from oracle import libs, pipeline, run_pipeline, submodule

from stoker import pipeline_def, types
from stoker.errors import ArgumentError, OperatorError

numba_plugin = pytest.importorskip("stoker.plugin.numba")
HAS_NUMBA = importlib.util.find_spec("numba") is not None
HAS_DALI = importlib.util.find_spec("nvidia.dali") is not None


def swap_hw(outs, ins):
    for i in range(len(outs[0])):
        outs[0][i][0] = ins[0][i][1]
        outs[0][i][1] = ins[0][i][0]


def transpose_times_two(out0, in0):
    for y in range(in0.shape[0]):
        for x in range(in0.shape[1]):
            out0[x, y] = in0[y, x] * 2


def add_and_negate(out0, out1, in0, in1):
    for i in range(in0.shape[0]):
        out0[i] = in0[i] + in1[i]
        out1[i] = -in0[i]


def invert_batch(outs, ins):
    for k in range(len(ins)):
        for i in range(ins[k].shape[0]):
            outs[k][i] = 255 - ins[k][i]


def _samples():
    return [np.arange(6, dtype=np.uint8).reshape(2, 3), np.arange(12, dtype=np.uint8).reshape(4, 3) * 3,
            np.full((1, 5), 7, np.uint8)]


def _vectors():
    return [np.arange(n, dtype=np.float32) * 0.5 for n in (3, 5, 1)]


def _graphs(lib_fn, numba_function):
    """The test graphs, written once for stoker and for DALI."""

    def transposed():
        x = lib_fn.external_source(source=_samples, batch=True)
        return numba_function(x, run_fn=transpose_times_two, setup_fn=swap_hw, out_types=[types.UINT8],
                              in_types=[types.UINT8], outs_ndim=[2], ins_ndim=[2])

    def two_in_two_out():
        a = lib_fn.external_source(source=_vectors, batch=True)
        b = lib_fn.external_source(source=lambda: [v + 1 for v in _vectors()], batch=True)
        out = numba_function(a, b, run_fn=add_and_negate, out_types=[types.FLOAT, types.FLOAT],
                             in_types=[types.FLOAT, types.FLOAT], outs_ndim=[1, 1], ins_ndim=[1, 1])
        return tuple(out)

    def batched():
        x = lib_fn.external_source(source=lambda: [s[0] for s in _samples()], batch=True)
        return numba_function(x, run_fn=invert_batch, batch_processing=True, out_types=[types.UINT8],
                              in_types=[types.UINT8], outs_ndim=[1], ins_ndim=[1])

    return {"transposed": transposed, "two_in_two_out": two_in_two_out, "batched": batched}


def _run(lib, graph):
    """One run of ``graph`` (written for ``lib``'s fn) as a pipeline of ``lib``: per output, its samples."""
    return run_pipeline(pipeline(lib, lambda fn, types: graph(), 3, num_threads=2))[0]


def _stoker_results():
    from stoker import fn

    return {k: _run("stoker", g) for k, g in _graphs(fn, numba_plugin.numba_function).items()}


EXPECTED = {
    "transposed": [[s.T * 2 for s in _samples()]],
    "two_in_two_out": [[2 * v + 1 for v in _vectors()], [-v for v in _vectors()]],
    "batched": [[255 - s[0] for s in _samples()]],
}


@pytest.mark.skipif(not HAS_NUMBA, reason="needs numba")
def test_results_match_numpy():
    got = _stoker_results()
    for name, outputs in EXPECTED.items():
        for want_out, got_out in zip(outputs, got[name], strict=True):
            for want, have in zip(want_out, got_out, strict=True):
                np.testing.assert_array_equal(have, want.astype(have.dtype), err_msg=name)


@pytest.mark.skipif(not (HAS_NUMBA and HAS_DALI), reason="needs numba and DALI")
def test_matches_dali_numba_function():
    dfn = libs("dali")[0]
    dali_numba_function = submodule("dali", "plugin.numba.fn.experimental").numba_function

    ours = _stoker_results()
    theirs = {k: _run("dali", g) for k, g in _graphs(dfn, dali_numba_function).items()}
    for name in EXPECTED:
        for a_out, b_out in zip(ours[name], theirs[name], strict=True):
            for a, b in zip(a_out, b_out, strict=True):
                assert a.dtype == b.dtype and a.shape == b.shape, name
                np.testing.assert_array_equal(a, b, err_msg=name)


def test_plain_python_without_numba(monkeypatch):
    monkeypatch.setattr(numba_plugin, "_numba", lambda: None)
    got = _stoker_results()
    for name, outputs in EXPECTED.items():
        for want_out, got_out in zip(outputs, got[name], strict=True):
            for want, have in zip(want_out, got_out, strict=True):
                np.testing.assert_array_equal(have, want.astype(have.dtype), err_msg=name)


def test_dali_import_paths_and_namespaces():
    from stoker.plugin.numba.experimental import NumbaFunction
    from stoker.plugin.numba.fn.experimental import numba_function

    import stoker.dynamic as ndd
    from stoker import fn, ops

    assert numba_function is numba_plugin.numba_function
    assert "numba_function" in dir(fn.experimental)
    assert ops.experimental.NumbaFunction is not None
    op = NumbaFunction(transpose_times_two, [types.UINT8], [types.UINT8], [2], [2], setup_fn=swap_hw)

    def graph():
        from stoker import fn as sfn

        return op(sfn.external_source(source=_samples, batch=True))

    (out,) = _run("stoker", graph)
    np.testing.assert_array_equal(out[1], _samples()[1].T * 2)
    eager = ndd.experimental.numba_function(_samples()[0], run_fn=transpose_times_two, setup_fn=swap_hw,
                                            out_types=[types.UINT8], in_types=[types.UINT8], outs_ndim=[2],
                                            ins_ndim=[2])
    np.testing.assert_array_equal(eager.numpy(), _samples()[0].T * 2)


def _eager(x, **kw):
    import stoker.dynamic as ndd

    args = dict(run_fn=transpose_times_two, out_types=[types.UINT8], in_types=[types.UINT8], outs_ndim=[2],
                ins_ndim=[2])
    args.update(kw)
    return ndd.experimental.numba_function(x, **args)


def test_argument_errors_name_the_argument():
    x = _samples()[0]
    with pytest.raises(ArgumentError, match="argument 'outs_ndim'.*2 numbers of dimensions for 1"):
        _eager(x, outs_ndim=[2, 2])
    with pytest.raises(ArgumentError, match="argument 'in_types'"):
        _eager(x, in_types=["not a type"])
    with pytest.raises(ArgumentError, match="argument 'run_fn'"):
        _eager(x, run_fn=3)
    with pytest.raises(ArgumentError, match="argument 'run_fn'.*required"):
        import stoker.dynamic as ndd

        ndd.experimental.numba_function(x, out_types=[types.UINT8], in_types=[types.UINT8], outs_ndim=[2],
                                        ins_ndim=[2])


def test_input_type_mismatch_is_reported():
    with pytest.raises(OperatorError, match=r"experimental.numba_function.*input 0 holds float32 but in_types"):
        _eager(np.zeros((2, 2), np.float32), setup_fn=swap_hw)
    with pytest.raises(OperatorError, match="input 0 has 1 dimensions but ins_ndim"):
        _eager(np.zeros(3, np.uint8))


def test_error_in_run_fn_names_operator_and_sample(monkeypatch):
    monkeypatch.setattr(numba_plugin, "_numba", lambda: None)  # (plain Python: a Python IndexError)

    def bad(out0, in0):
        out0[100, 100] = 1

    with pytest.raises(OperatorError, match=r"\[experimental.numba_function\].*sample 0"):
        _eager(np.zeros((2, 2), np.uint8), run_fn=bad)


def numba_cuda_problem() -> str | None:
    """Why numba.cuda cannot compile a kernel here (None when it can): some machines carry a
    numba-cuda built for an older NumPy, which fails inside numba on its first compile."""
    try:
        from numba import cuda

        @cuda.jit
        def probe(x):
            x[0] = 1

        probe[1, 1](cuda.device_array(1, dtype=np.int32))  # compiles on this first call
        cuda.synchronize()
    except Exception as e:  # whatever numba raises: it is numba's, not stoker's
        return f"numba.cuda cannot compile here: {type(e).__name__}: {e}"
    return None


@pytest.mark.gpu
def test_gpu_kernel_matches_cpu():
    from stoker import fn

    problem = numba_cuda_problem()
    if problem:
        pytest.skip(problem)

    def kernel(out0, in0):
        from numba import cuda

        y, x = cuda.grid(2)
        if y < in0.shape[0] and x < in0.shape[1]:
            out0[x, y] = in0[y, x] * 2

    @pipeline_def(batch_size=3, num_threads=2, device_id=0)
    def graph():
        x = fn.external_source(source=_samples, batch=True)
        common = dict(setup_fn=swap_hw, out_types=[types.UINT8], in_types=[types.UINT8], outs_ndim=[2],
                      ins_ndim=[2])
        g = numba_plugin.numba_function(x.gpu(), run_fn=kernel, device="gpu", blocks=[2, 2, 1],
                                        threads_per_block=[8, 8, 1], **common)
        c = numba_plugin.numba_function(x, run_fn=transpose_times_two, **common)
        return g, c

    pipe = graph()
    pipe.build()
    g, c = pipe.run()
    g = g.as_cpu()
    for i in range(3):
        np.testing.assert_array_equal(np.asarray(g.at(i)), np.asarray(c.at(i)))
