"""stoker.custom: user operators registered late appear in fn / ops / dynamic like built-ins, with
the same argument checking and errors that name the operator, the argument and the sample."""

from __future__ import annotations

import numpy as np
import pytest

import stoker.custom as custom
import stoker.dynamic as ndd
from stoker import fn, ops, pipeline_def
from stoker.errors import ArgumentError, OperatorBugError, OperatorError


@pytest.fixture
def registered():
    """Names registered by a test, removed when it ends."""
    names: list[str] = []
    yield names.append
    for name in names:
        custom.unregister(name)


def _scale_op(name: str):
    @custom.operator(name=name, doc="Multiplies by a factor.",
                     args=[custom.Arg("factor", "float", 2.0, tensor=True, doc="the factor")])
    def scale(x, *, factor):
        if factor < 0:
            raise ValueError(f"factor must be >= 0, got {factor}")
        return (x * factor).astype(np.float32)

    return scale


def _run(graph, batch_size=3, **kw):
    pipe = pipeline_def(graph, batch_size=batch_size, num_threads=2, device_id=None, **kw)()
    pipe.build()
    return pipe.run()


def _source(n=3):
    return lambda: [np.full((2, 3), i + 1, np.uint8) for i in range(n)]


def test_late_registration_in_fn_ops_dynamic_and_dir(registered):
    assert "tst_a" not in dir(fn)
    _scale_op("tst_a.scale")
    registered("tst_a.scale")
    assert "tst_a" in dir(fn) and "scale" in dir(fn.tst_a)
    assert "tst_a" in dir(ndd) and "scale" in dir(ndd.tst_a)
    assert ops.tst_a.Scale is not None
    assert "Multiplies by a factor" in fn.tst_a.scale.__doc__ and "factor (float" in fn.tst_a.scale.__doc__

    def graph():
        x = fn.external_source(source=_source(), batch=True, layout="HW")
        return fn.tst_a.scale(x, factor=3), ops.tst_a.Scale(factor=0.5)(x)

    a, b = _run(graph)
    assert a.layout() == "HW"
    for i in range(3):
        np.testing.assert_array_equal(np.asarray(a.at(i)), np.full((2, 3), 3.0 * (i + 1), np.float32))
        np.testing.assert_array_equal(np.asarray(b.at(i)), np.full((2, 3), 0.5 * (i + 1), np.float32))
    out = ndd.tst_a.scale(np.ones((2, 2), np.uint8), factor=4)
    np.testing.assert_array_equal(out.numpy(), np.full((2, 2), 4.0))


def test_unregister_removes_it_everywhere(registered):
    _scale_op("tst_b.scale")
    custom.unregister("tst_b.scale")
    assert "tst_b" not in dir(fn)
    assert not hasattr(fn, "tst_b")
    assert not hasattr(ops, "tst_b") or not hasattr(ops.tst_b, "Scale")
    with pytest.raises(ArgumentError, match="built-in"):
        custom.unregister("resize")


def test_per_sample_argument_and_seeded_random(registered):
    _scale_op("tst_c.scale")
    registered("tst_c.scale")

    def graph():
        x = fn.external_source(source=_source(), batch=True)
        f = fn.random.uniform(range=(1.0, 2.0), seed=5)
        return fn.tst_c.scale(x, factor=f), f

    out, f = _run(graph)
    for i in range(3):
        np.testing.assert_allclose(np.asarray(out.at(i)), (i + 1) * float(np.asarray(f.at(i))), rtol=1e-6)


def test_argument_errors_name_operator_and_argument(registered):
    _scale_op("tst_d.scale")
    registered("tst_d.scale")

    def bad_kind():
        return fn.tst_d.scale(fn.external_source(source=_source(), batch=True), factor="x")

    with pytest.raises(ArgumentError, match=r"tst_d.scale: argument 'factor': expected a number"):
        _run(bad_kind)

    def unknown():
        return fn.tst_d.scale(fn.external_source(source=_source(), batch=True), fctor=1.0)

    with pytest.raises(ArgumentError, match=r"tst_d.scale: unknown argument 'fctor'"):
        _run(unknown)
    with pytest.raises(ArgumentError, match="factor"):
        ndd.tst_d.scale(np.ones(2, np.uint8), factor=[1, 2])


def test_sample_error_names_operator_sample_and_user_line(registered):
    _scale_op("tst_e.scale")
    registered("tst_e.scale")
    with pytest.raises(OperatorError) as info:
        ndd.tst_e.scale(ndd.as_batch([np.ones(2, np.uint8)] * 2), factor=-1.0)
    msg = str(info.value)
    assert "[tst_e.scale]" in msg and "factor must be >= 0" in msg and "test_custom_operators.py" in msg
    assert "sample 0" in msg
    assert not isinstance(info.value, OperatorBugError)  # a ValueError is a data error: on_error applies


def test_on_error_skip_drops_the_bad_sample(registered):
    @custom.operator(name="tst_f.check", args=[])
    def check(x):
        if x.ravel()[0] == 2:
            raise ValueError("sample two is bad")
        return x

    registered("tst_f.check")

    def graph():
        return fn.tst_f.check(fn.external_source(source=_source(), batch=True), on_error="skip")

    (out,) = _run(graph)
    assert [int(np.asarray(out.at(i)).ravel()[0]) for i in range(len(out))] == [1, 3]


def test_bug_in_user_function_is_not_skipped(registered):
    @custom.operator(name="tst_g.buggy")
    def buggy(x):
        return x[{}]  # an IndexError: a bug, not bad data

    registered("tst_g.buggy")

    def graph():
        return fn.tst_g.buggy(fn.external_source(source=_source(), batch=True), on_error="skip")

    with pytest.raises(OperatorBugError, match=r"\[tst_g.buggy\].*IndexError.*not in the sample"):
        _run(graph)


def test_batch_function_several_outputs_layouts_and_ctx(registered):
    seen = {}

    @custom.operator(name="tst_h.stats", outputs=2, layouts=["", "C"], batch=True,
                     args=[custom.Arg("offset", "int", 0, tensor=True)])
    def stats(xs, *, offset, ctx):
        seen["ctx"] = ctx
        assert isinstance(offset, list) and len(offset) == len(xs)
        return np.stack([x.sum() + o for x, o in zip(xs, offset)]), [x[0] for x in xs]

    registered("tst_h.stats")

    def graph():
        return fn.tst_h.stats(fn.external_source(source=_source(), batch=True), offset=10)

    total, first = _run(graph)
    assert [int(np.asarray(total.at(i))) for i in range(3)] == [16, 22, 28]
    assert first.layout() == "C" and np.asarray(first.at(2)).tolist() == [3, 3, 3]
    assert isinstance(seen["ctx"], custom.BatchCall) and seen["ctx"].batch_size == 3


def test_class_form_with_setup_and_arg_error(registered):
    @custom.operator(name="tst_i.clip", args=[custom.Arg("high", "int", custom.REQUIRED, doc="upper bound")])
    class Clip:
        """Clips values to ``high``."""

        def setup(self, *, high):
            if high < 0:
                raise custom.ArgError("high", f"must be >= 0, got {high}")
            self.high = high

        def cpu(self, x, *, high):
            return np.minimum(x, self.high)

    registered("tst_i.clip")
    np.testing.assert_array_equal(ndd.tst_i.clip(np.arange(5), high=2).numpy(), [0, 1, 2, 2, 2])
    with pytest.raises(ArgumentError, match=r"tst_i.clip: argument 'high': must be >= 0"):
        ndd.tst_i.clip(np.arange(5), high=-1)
    with pytest.raises(ArgumentError, match=r"tst_i.clip: argument 'high': is required"):
        ndd.tst_i.clip(np.arange(5))
    assert "Clips values" in fn.tst_i.clip.__doc__


def test_random_operator_uses_ctx_rng_deterministically(registered):
    @custom.operator(name="tst_j.jitter", random=True)
    def jitter(x, *, ctx):
        return x + ctx.rng.uniform(0, 1, size=x.shape).astype(np.float32)

    registered("tst_j.jitter")

    def graph():
        return fn.tst_j.jitter(fn.external_source(source=_source(), batch=True), seed=9)

    (a,), (b,) = _run(graph), _run(graph)
    for i in range(3):
        np.testing.assert_array_equal(np.asarray(a.at(i)), np.asarray(b.at(i)))
    assert not np.array_equal(np.asarray(a.at(0)), np.asarray(a.at(0)).round())


def test_registration_is_checked(registered):
    with pytest.raises(ArgumentError, match="built-in"):
        custom.operator(name="resize")(lambda x: x)
    with pytest.raises(ArgumentError, match="taken"):
        custom.operator(name="tst_k.a", args=[custom.Arg("seed", "int", 0)])(lambda x, seed: x)
    with pytest.raises(ArgumentError, match="unknown kind"):
        custom.operator(name="tst_k.a", args=[custom.Arg("v", "number", 0)])(lambda x, v: x)
    with pytest.raises(ArgumentError, match="expected an int"):
        custom.operator(name="tst_k.a", args=[custom.Arg("v", "int", "three")])(lambda x, v: x)
    with pytest.raises(ArgumentError, match="does not take"):
        custom.operator(name="tst_k.a", args=[custom.Arg("v", "int", 0)])(lambda x: x)
    with pytest.raises(ArgumentError, match="identifiers"):
        custom.operator(name="bad name")(lambda x: x)
    with pytest.raises(ArgumentError, match="is an operator"):
        custom.operator(name="resize.extra")(lambda x: x)
    custom.operator(name="tst_k.a")(lambda x: x)
    registered("tst_k.a")
    with pytest.raises(ArgumentError, match="replace=True"):
        custom.operator(name="tst_k.a")(lambda x: x)
    custom.operator(name="tst_k.a", replace=True)(lambda x: x + 1)
    assert ndd.tst_k.a(np.zeros(2, np.int32)).numpy().tolist() == [1, 1]  # the new one, not a cached one


def test_gpu_function_adds_the_gpu_placement(registered):
    op = _scale_op("tst_l.scale")
    registered("tst_l.scale")
    assert op.schema.devices == ("cpu",)

    @op.gpu
    def scale_gpu(xs, *, factor):
        return [x * f for x, f in zip(xs, factor)]

    assert op.schema.devices == ("cpu", "gpu")
    assert "Devices: cpu, gpu" in fn.tst_l.scale.__doc__


def test_wrong_number_of_outputs_is_reported(registered):
    @custom.operator(name="tst_m.two", outputs=2)
    def two(x):
        return x

    registered("tst_m.two")
    with pytest.raises(OperatorBugError, match=r"\[tst_m.two\].*must return 2 outputs"):
        ndd.tst_m.two(np.zeros(3))


@pytest.mark.gpu
def test_gpu_function_runs_in_a_pipeline(registered):
    op = _scale_op("tst_n.scale")
    registered("tst_n.scale")
    kernel_src = r'''
    extern "C" __global__ void twice(const float* x, float* y, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) y[i] = 2.0f * x[i];
    }'''

    @op.gpu
    def scale_gpu(xs, *, factor, ctx):
        import cupy as cp

        k = custom.kernel(kernel_src, "twice")
        outs = []
        for x, f in zip(xs, factor):
            y = cp.empty(x.shape, cp.float32)
            k(((x.size + 127) // 128,), (128,), (x.astype(cp.float32) * (f / 2), y, np.int32(x.size)))
            outs.append(y)
        return outs

    @pipeline_def(batch_size=3, num_threads=2, device_id=0)
    def graph():
        x = fn.external_source(source=_source(), batch=True)
        return fn.tst_n.scale(x.gpu(), factor=3.0), fn.tst_n.scale(x, factor=3.0)

    pipe = graph()
    pipe.build()
    g, c = pipe.run()
    for i in range(3):
        np.testing.assert_allclose(np.asarray(g.as_cpu().at(i)), np.asarray(c.at(i)))
