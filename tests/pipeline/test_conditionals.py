"""Per-sample conditionals (``@pipeline_def(enable_conditionals=True)``): if/elif/else, and/or/not,
conditional expressions, against NumPy references and DALI as an oracle."""

import os
import sys

import numpy as np
import pytest
from oracle import lib_namespace

import stoker
from stoker.errors import OperatorError, PipelineBuildError
from stoker.pipeline.conditionals import UndefinedVariableError

BS = 8
PREDS = [bool(v) for v in [1, 0, 1, 1, 0, 0, 1, 0]]
PREDS2 = [bool(v) for v in [0, 0, 1, 0, 1, 1, 1, 0]]
LABELS = [0, 1, 2, 3, 2, 1, 0, 3]


def _data():
    rng = np.random.default_rng(0)
    return [rng.integers(0, 100, (3, 4), dtype=np.int32) for _ in range(BS)]


def _feed(values, dtype):
    arrays = [np.array(v, dtype=dtype) for v in values]
    return lambda: arrays


def _run(pipe):
    pipe.build()
    try:
        return [[np.array(s) for s in out] for out in pipe.run()]
    finally:
        if hasattr(pipe, "close"):
            pipe.close()


def _dali():
    return lib_namespace("dali")


def _stoker():
    return lib_namespace("stoker")


def _pipe(lib, body, **kw):
    """``body(fn, types)`` as a conditional pipeline of ``lib`` (stoker or DALI)."""
    opts = dict(batch_size=BS, num_threads=2, device_id=None, seed=7, enable_conditionals=True)
    opts.update(kw)
    return lib.pipeline_def(**opts)(body(lib.fn, lib.types))()


# --- pipeline bodies shared by stoker and DALI --------------------------------------------------

def if_else(fn, types):
    def pipe():
        d = fn.external_source(source=_data, batch=True)
        c = fn.external_source(source=_feed(PREDS, np.bool_), batch=True)
        if c:
            d = d + 10
            e = fn.cast(d, dtype=types.FLOAT) * 0.5
        else:
            d = d * 2
            e = fn.cast(d, dtype=types.FLOAT)
        return d, e
    return pipe


def elif_chain(fn, types):
    def pipe():
        d = fn.external_source(source=_data, batch=True)
        label = fn.external_source(source=_feed(LABELS, np.int32), batch=True)
        if label == 0:
            d = d + 1
        elif label == 1:
            d = d - 1
        elif label == 2:
            d = d * 3
        else:
            d = fn.reshape(fn.flip(fn.reshape(d, shape=[3, 4, 1], layout="HWC"), horizontal=1), shape=[3, 4],
                           layout="")
        return d
    return pipe


def nested(fn, types):
    def pipe():
        d = fn.external_source(source=_data, batch=True)
        c1 = fn.external_source(source=_feed(PREDS, np.bool_), batch=True)
        c2 = fn.external_source(source=_feed(PREDS2, np.bool_), batch=True)
        out = d
        if c1:
            if c2:
                out = d + 1000
            else:
                out = d + 2000
            d = d * 0
        else:
            if c2:
                out = d - 1000
        return out, d
    return pipe


def logical(fn, types):
    def pipe():
        c1 = fn.external_source(source=_feed(PREDS, np.bool_), batch=True)
        c2 = fn.external_source(source=_feed(PREDS2, np.bool_), batch=True)
        label = fn.external_source(source=_feed(LABELS, np.int32), batch=True)
        a = c1 and c2
        b = c1 or c2
        n = not c1
        mixed = (label > 1 and not c2) or c1
        d = fn.cast(label, dtype=types.FLOAT)
        if c1 and label > 1:
            d = d * 10.0
        return a, b, n, mixed, d
    return pipe


def one_branch_const(fn, types):
    def pipe():
        label = fn.external_source(source=_feed(LABELS, np.int32), batch=True)
        c = fn.external_source(source=_feed(PREDS, np.bool_), batch=True)
        if c:
            label = 5
        return label
    return pipe


@pytest.mark.parametrize("body", [if_else, elif_chain, nested, logical, one_branch_const])
def test_matches_numpy_reference(body):
    data = _data()
    outs = _run(_pipe(_stoker(), body))
    p, q, lab = np.array(PREDS), np.array(PREDS2), np.array(LABELS)
    if body is if_else:
        want_d = [x + 10 if c else x * 2 for x, c in zip(data, p)]
        want_e = [(x + 10) * 0.5 if c else (x * 2.0) for x, c in zip(data, p)]
        np.testing.assert_array_equal(np.stack(outs[0]), np.stack(want_d))
        np.testing.assert_allclose(np.stack(outs[1]), np.stack(want_e))
        assert outs[1][0].dtype == np.float32
    elif body is elif_chain:
        want = [x + 1 if k == 0 else x - 1 if k == 1 else x * 3 if k == 2 else x[:, ::-1]
                for x, k in zip(data, lab)]
        np.testing.assert_array_equal(np.stack(outs[0]), np.stack(want))
    elif body is nested:
        want_out = [x + (1000 if b else 2000) if a else (x - 1000 if b else x) for x, a, b in zip(data, p, q)]
        want_d = [x * 0 if a else x for x, a in zip(data, p)]
        np.testing.assert_array_equal(np.stack(outs[0]), np.stack(want_out))
        np.testing.assert_array_equal(np.stack(outs[1]), np.stack(want_d))
    elif body is logical:
        a, b, n, mixed, d = (np.stack(o) for o in outs)
        np.testing.assert_array_equal(a, p & q)
        np.testing.assert_array_equal(b, p | q)
        np.testing.assert_array_equal(n, ~p)
        np.testing.assert_array_equal(mixed, ((lab > 1) & ~q) | p)
        np.testing.assert_array_equal(d, np.where(p & (lab > 1), lab * 10.0, lab))
        assert a.dtype == np.bool_ and d.dtype == np.float32
    else:
        np.testing.assert_array_equal(np.stack(outs[0]), np.where(p, 5, lab))


@pytest.mark.oracle
@pytest.mark.parametrize("body", [if_else, elif_chain, nested, logical, one_branch_const])
def test_matches_dali(body):
    dali = _dali()
    got = _run(_pipe(_stoker(), body))
    want = _run(_pipe(dali, body))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        for gs, ws in zip(g, w):
            assert gs.dtype == ws.dtype and gs.shape == ws.shape
            np.testing.assert_array_equal(gs, ws)


@pytest.mark.oracle
def test_image_flip_in_branch_matches_dali():
    dali = _dali()
    rng = np.random.default_rng(3)
    images = [rng.integers(0, 255, (5 + i, 7, 3), dtype=np.uint8) for i in range(BS)]

    def body(fn, types):
        def pipe():
            img = fn.external_source(source=lambda: images, batch=True, layout="HWC")
            c = fn.external_source(source=_feed(PREDS, np.bool_), batch=True)
            if c:
                img = fn.flip(img, horizontal=1)
            else:
                img = fn.rotate(img, angle=90, fill_value=0)
            return img
        return pipe

    got, = _run(_pipe(_stoker(), body))
    want, = _run(_pipe(dali, body))
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


# --- Python semantics --------------------------------------------------------------------

def test_python_conditions_keep_python_behaviour():
    calls = []

    def boom():
        raise AssertionError("the branch not taken must not be traced")

    @stoker.pipeline_def(batch_size=2, num_threads=1, device_id=None, enable_conditionals=True)
    def pipe(flag=True, n=3):
        x = stoker.fn.constant(idata=[1])
        for k in range(10):
            if k >= n:
                break
            calls.append(k)
        if flag:
            x = x + 1
        else:
            boom()
        y = x if flag else boom()
        z = (flag and 2) or boom()
        return x, y, x * z

    outs = _run(pipe())
    assert calls == [0, 1, 2]
    assert [int(v[0]) for v in outs[0]] == [2, 2]
    assert [int(v[0]) for v in outs[2]] == [4, 4]


def test_closure_defaults_and_origin_are_kept():
    offset = 100

    @stoker.pipeline_def(batch_size=BS, num_threads=1, device_id=None, enable_conditionals=True)
    def pipe(scale=3, *, bias=1):
        d = stoker.fn.external_source(source=_data, batch=True)
        c = stoker.fn.external_source(source=_feed(PREDS, np.bool_), batch=True)
        if c:
            d = d * scale + offset
        else:
            d = d + bias
        return d

    p = pipe()
    out, = _run(p)
    want = [x * 3 + 100 if c else x + 1 for x, c in zip(_data(), PREDS)]
    np.testing.assert_array_equal(np.stack(out), np.stack(want))
    # operator origins point at the user's file and line, not at generated code
    origins = [n.origin for n in p._graph.nodes if n.op_name == "_arithmetic"]
    assert origins and all(o.startswith(__file__) for o in origins)
    # the merge is attributed to the `if` line, above both branches
    line = {n.op_name: int(n.origin.split(":")[1].split()[0]) for n in p._graph.nodes}
    branch_lines = [int(o.split(":")[1].split()[0]) for o in origins]
    assert line["_conditional.merge"] == min(branch_lines) - 1


def test_random_ops_in_branch_deterministic_and_keyed_by_sample():
    def make(preds, threads):
        @stoker.pipeline_def(batch_size=BS, num_threads=threads, device_id=None, seed=11,
                             enable_conditionals=True)
        def pipe():
            c = stoker.fn.external_source(source=_feed(preds, np.bool_), batch=True)
            x = stoker.fn.constant(fdata=[-1.0], shape=[])
            if c:
                x = stoker.fn.random.uniform(range=[0, 1])
                y = stoker.fn.random.normal(shape=[2])
            else:
                y = stoker.fn.random.normal(shape=[2]) * 0
            return x, y
        return _run(pipe())

    a1, a2 = make(PREDS, 1), make(PREDS, 2)
    for g, w in zip(a1, a2):
        np.testing.assert_array_equal(np.stack(g), np.stack(w))
    x = np.stack(a1[0])
    assert np.all((x >= 0) == np.array(PREDS)) and len(set(x[np.array(PREDS)].tolist())) == sum(PREDS)
    # a sample's random value does not depend on which other samples took the branch
    b = make([True] * BS, 2)
    both = np.array(PREDS)
    np.testing.assert_array_equal(x[both], np.stack(b[0])[both])
    np.testing.assert_array_equal(np.stack(a1[1])[both], np.stack(b[1])[both])


def test_containers_and_variables_unchanged_in_one_branch():
    @stoker.pipeline_def(batch_size=BS, num_threads=1, device_id=None, enable_conditionals=True)
    def pipe():
        d = stoker.fn.external_source(source=_data, batch=True)
        c = stoker.fn.external_source(source=_feed(PREDS, np.bool_), batch=True)
        pair = (d, d + 1)
        label = "same"
        if c:
            pair = (d * 2, pair[1])
            label = "same"
        assert label == "same"  # equal Python values stay Python values
        return pair[0], pair[1], d

    a, b, d = _run(pipe())
    data = _data()
    np.testing.assert_array_equal(np.stack(a), np.stack([x * 2 if c else x for x, c in zip(data, PREDS)]))
    np.testing.assert_array_equal(np.stack(b), np.stack(data) + 1)
    np.testing.assert_array_equal(np.stack(d), np.stack(data))


def test_conditional_expression_per_sample():
    # an extension: DALI rejects `a if c else b` with a per-sample condition
    @stoker.pipeline_def(batch_size=BS, num_threads=1, device_id=None, enable_conditionals=True)
    def pipe():
        d = stoker.fn.external_source(source=_data, batch=True)
        c = stoker.fn.external_source(source=_feed(PREDS, np.bool_), batch=True)
        return d - 1 if c else d + 1

    out, = _run(pipe())
    want = [x - 1 if c else x + 1 for x, c in zip(_data(), PREDS)]
    np.testing.assert_array_equal(np.stack(out), np.stack(want))


def test_all_samples_on_one_side():
    @stoker.pipeline_def(batch_size=4, num_threads=1, device_id=None, enable_conditionals=True)
    def pipe():
        c = stoker.fn.external_source(source=_feed([True] * 4, np.bool_), batch=True)
        x = stoker.fn.constant(idata=[1, 2])
        if c:
            x = x + 1
        else:
            x = stoker.fn.random.uniform(range=[0, 1], shape=[2], dtype=stoker.types.INT32)
        return x

    out, = _run(pipe())
    assert [v.tolist() for v in out] == [[2, 3]] * 4


# --- errors ----------------------------------------------------------------------------------

def test_variable_defined_in_one_branch_is_named():
    @stoker.pipeline_def(batch_size=BS, num_threads=1, device_id=None, enable_conditionals=True)
    def pipe():
        d = stoker.fn.external_source(source=_data, batch=True)
        c = stoker.fn.external_source(source=_feed(PREDS, np.bool_), batch=True)
        if c:
            z = d + 1
            unused = d  # noqa: F841 - defined on one path but never used: fine
        return z

    with pytest.raises(UndefinedVariableError, match="'z'.*only one branch.*`else`"):
        pipe()


def test_non_scalar_predicate_names_the_if():
    @stoker.pipeline_def(batch_size=BS, num_threads=1, device_id=None, enable_conditionals=True)
    def pipe():
        d = stoker.fn.external_source(source=_data, batch=True)
        if d:
            d = d + 1
        return d

    with pytest.raises(OperatorError, match=r"condition of the `if` at .*test_conditionals.py:\d+ must be a "
                                            "boolean scalar"):
        _run(pipe())


def test_merge_type_mismatch_names_the_variable():
    @stoker.pipeline_def(batch_size=BS, num_threads=1, device_id=None, enable_conditionals=True)
    def pipe():
        d = stoker.fn.external_source(source=_data, batch=True)
        c = stoker.fn.external_source(source=_feed(PREDS, np.bool_), batch=True)
        if c:
            d = stoker.fn.cast(d, dtype=stoker.types.FLOAT)
        return d

    with pytest.raises(OperatorError, match="variable 'd'.*types differ: float32 in the if branch, int32"):
        _run(pipe())


def test_merge_ndim_mismatch_names_the_variable():
    @stoker.pipeline_def(batch_size=BS, num_threads=1, device_id=None, enable_conditionals=True)
    def pipe():
        d = stoker.fn.external_source(source=_data, batch=True)
        c = stoker.fn.external_source(source=_feed(PREDS, np.bool_), batch=True)
        if c:
            d = d[0]
        return d

    with pytest.raises(OperatorError, match="variable 'd'.*numbers of dimensions differ"):
        _run(pipe())


def test_return_inside_per_sample_if_is_explained():
    @stoker.pipeline_def(batch_size=BS, num_threads=1, device_id=None, enable_conditionals=True)
    def pipe():
        d = stoker.fn.external_source(source=_data, batch=True)
        c = stoker.fn.external_source(source=_feed(PREDS, np.bool_), batch=True)
        if c:
            return d
        return d + 1

    with pytest.raises(PipelineBuildError, match="per-sample condition.*a `return`"):
        pipe()


def test_without_conditionals_the_error_points_to_the_option():
    @stoker.pipeline_def(batch_size=BS, num_threads=1, device_id=None)
    def pipe():
        c = stoker.fn.external_source(source=_feed(PREDS, np.bool_), batch=True)
        if c:
            c = c + 1
        return c

    with pytest.raises(TypeError, match="enable_conditionals=True"):
        pipe()


def test_value_from_inside_a_branch_cannot_leak():
    leaked = []

    @stoker.pipeline_def(batch_size=BS, num_threads=1, device_id=None, enable_conditionals=True)
    def pipe():
        d = stoker.fn.external_source(source=_data, batch=True)
        c = stoker.fn.external_source(source=_feed(PREDS, np.bool_), batch=True)
        if c:
            leaked.append(d + 1)  # a list mutated in place escapes the merge
        return leaked[0]

    with pytest.raises(PipelineBuildError, match="produced inside a branch"):
        _run(pipe())


def test_and_or_short_circuit_per_sample():
    seen = []

    @stoker.pipeline_def(batch_size=BS, num_threads=1, device_id=None, enable_conditionals=True)
    def pipe():
        c1 = stoker.fn.external_source(source=_feed(PREDS, np.bool_), batch=True)
        d = stoker.fn.external_source(source=_data, batch=True)

        def rhs():
            node = d[0, 0] > 50
            seen.append(node)
            return node
        both = c1 and rhs()
        same = True and c1  # a Python left operand keeps Python's semantics: the DataNode itself
        either = False or not c1
        return both, same, either

    p = pipe()
    both, same, either = _run(p)
    first = np.array([x[0, 0] for x in _data()])
    np.testing.assert_array_equal(np.stack(both), np.array(PREDS) & (first > 50))
    np.testing.assert_array_equal(np.stack(same), np.array(PREDS))
    np.testing.assert_array_equal(np.stack(either), ~np.array(PREDS))
    # the right operand was traced inside the branch where c1 holds: it runs on those samples only
    assert seen[0].source.scope is not None and seen[0].source.scope.branch is True


# --- functions called from the pipeline are converted too (as DALI's AutoGraph) ----------------

def _add_if(d, c, amount):
    if c:
        d = d + amount
    return d


def _twice_then_add(d, c):
    return _add_if(_add_if(d, c, 1), not c, 100)  # a converted helper calling another


class _Scale:
    def __init__(self, factor):
        self.factor = factor

    def __call__(self, d, c):
        if c:
            d = d * self.factor
        return d

    def method(self, d, c):
        if c:
            return_value = d - 1
        else:
            return_value = d
        return return_value


class _Base:
    def run(self, d):
        return d + 7


class _Child(_Base):
    def run(self, d):  # zero-argument super() needs the class cell: called unconverted
        return super().run(d) * 2


def helpers(fn, types):
    import functools

    def pipe():
        d = fn.external_source(source=_data, batch=True)
        c = fn.external_source(source=_feed(PREDS, np.bool_), batch=True)
        add5 = functools.partial(_add_if, amount=5)
        return _twice_then_add(d, c), _Scale(3)(d, c), add5(d, c), _Scale(1).method(d, c), _Child().run(d)
    return pipe


def test_called_functions_methods_and_callables_are_converted():
    outs = _run(_pipe(_stoker(), helpers))
    data, p = _data(), PREDS
    want = [[x + 1 if c else x + 100 for x, c in zip(data, p)], [x * 3 if c else x for x, c in zip(data, p)],
            [x + 5 if c else x for x, c in zip(data, p)], [x - 1 if c else x for x, c in zip(data, p)],
            [(x + 7) * 2 for x in data]]
    for got, w in zip(outs, want):
        np.testing.assert_array_equal(np.stack(got), np.stack(w))


@pytest.mark.oracle
def test_called_functions_match_dali():
    dali = _dali()
    got = _run(_pipe(_stoker(), helpers))
    want = _run(_pipe(dali, helpers))
    for g, w in zip(got, want):
        np.testing.assert_array_equal(np.stack(g), np.stack(w))


def test_a_gpu_condition_is_refused_clearly():
    @stoker.pipeline_def(batch_size=BS, num_threads=1, device_id=0, enable_conditionals=True)
    def pipe():
        d = stoker.fn.external_source(source=_data, batch=True)
        c = stoker.fn.external_source(source=_feed(PREDS, np.bool_), batch=True).gpu()
        g = d.gpu()
        if c:
            g = g + 1
        return g

    with pytest.raises(PipelineBuildError, match="GPU batch used as the condition.*CPU batch"):
        pipe()


def _gpu_if(device_data: bool):
    """An if/else on data that is on the GPU (when ``device_data``): both branches change it (the
    if branch twice), and a number is assigned in each."""

    @stoker.pipeline_def(batch_size=BS, num_threads=1, device_id=0, seed=2, enable_conditionals=True)
    def pipe():
        d = stoker.fn.external_source(source=_data, batch=True)
        c = stoker.fn.external_source(source=_feed(PREDS, np.bool_), batch=True)
        g = d.gpu() if device_data else d
        if c:
            g = g * 3
            g = g + 1
            k = 5
        else:
            g = g - 2
            k = 7
        return g, k

    return pipe


def test_gpu_batches_split_and_merge_as_cpu_ones():
    """On the null device (CuPy's host half on NumPy; the merge's copy kernel emulated): the
    branches see views of the GPU batch and the merge puts them back in sample order."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
    import null_device

    with null_device.installed():
        p = _gpu_if(True)()
        p.build()
        got = [[np.asarray(s) for s in out.as_cpu().samples()] for out in p.run()]
        p.close()
        assert any(name.startswith("window_copy") for name, _, _ in null_device.LAUNCHES)
    p = _gpu_if(False)()
    p.build()
    want = [[np.asarray(s) for s in out.samples()] for out in p.run()]
    p.close()
    for g_out, w_out in zip(got, want):
        assert len(g_out) == len(w_out) == BS
        for g, w in zip(g_out, w_out):
            np.testing.assert_array_equal(g, w)


def test_skipped_samples_before_the_if_are_refilled(tmp_path):
    """on_error="skip" drops bad files before the split; the refilled batch then takes the branches."""
    import os

    from stoker.sample_data import write_dataset

    write_dataset(str(tmp_path), 8, classes=2, seed=1, workers=1)
    files = sorted(os.path.join(r, f) for r, _, fs in os.walk(tmp_path) for f in fs)
    for f in files[1:3]:
        with open(f, "wb") as fh:
            fh.write(b"not an image")

    @stoker.pipeline_def(batch_size=4, num_threads=2, device_id=None, seed=3, enable_conditionals=True,
                         on_error="skip")
    def pipe():
        jpegs, labels = stoker.fn.readers.file(file_root=str(tmp_path))
        img = stoker.fn.decoders.image(jpegs)
        flip = stoker.fn.random.coin_flip()
        if flip:
            out = stoker.fn.flip(img, horizontal=1)
        else:
            out = img
        return out, img, flip

    p = pipe()
    p.build()
    for _ in range(2):
        out, img, flip = p.run()
        assert len(out) == 4
        for o, i, f in zip(out, img, flip):
            np.testing.assert_array_equal(np.array(o), np.array(i)[:, ::-1] if int(np.array(f)) else np.array(i))
    assert p.error_count() >= 2
    p.close()
