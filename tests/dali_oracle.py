"""DALI as a test oracle: the same graph or operator call through stoker and through
DALI's CPU operators, and the comparisons the operator tests make between the two.

Importable from every test folder as ``dali_oracle`` (pytest puts ``tests/`` on
``sys.path`` for ``tests/conftest.py``). DALI is imported lazily and only here or
in tests: a test that calls a runner with ``lib="dali"`` is skipped where DALI is
missing.

Two styles:

* graphs: ``build(fn, types, *inputs)`` is written once and called with each
  library's ``fn`` and ``types``; inputs are batches (lists of NumPy arrays) fed
  by external sources. :func:`run_graph`, :func:`check`.
* one operator: ``fn.<op_name>(images, **kwargs)`` on one batch, with per-sample
  arguments fed by external sources. :func:`run_op`, :func:`compare_op`.
"""

from __future__ import annotations

import numpy as np
import pytest


def _libs(lib: str):
    """(fn, pipeline_def, types) of ``lib`` ("stoker" or "dali")."""
    if lib == "dali":
        pytest.importorskip("nvidia.dali")
        from nvidia.dali import fn, pipeline_def, types
    else:
        from stoker import fn, pipeline_def, types
    return fn, pipeline_def, types


def batch_source(values):
    """A zero-argument callable giving the same batch every time."""
    batch = [np.asarray(a) for a in values]
    return lambda: batch


def _threads(lib: str, num_threads: int | None) -> int:
    # DALI with one thread keeps its results independent of scheduling; stoker runs two to
    # exercise its thread pool.
    return num_threads or (1 if lib == "dali" else 2)


def run_graph(lib: str, build, *batches, layouts=None, batch_size=None, seed=3, num_threads=None):
    """Outputs of ``build`` as a list (one entry per output) of (list of arrays, layout)."""
    fn, pipeline_def, types = _libs(lib)
    bs = batch_size or len(batches[0])
    layouts = layouts or [None] * len(batches)

    @pipeline_def(batch_size=bs, device_id=None, seed=seed, num_threads=_threads(lib, num_threads))
    def pipe():
        xs = [fn.external_source(source=batch_source(b), batch=True, layout=lay) for b, lay in zip(batches, layouts)]
        out = build(fn, types, *xs)
        return tuple(out) if isinstance(out, (list, tuple)) else out

    p = pipe()
    p.build()
    outs = p.run()
    return [([np.array(o.at(i)) for i in range(len(o))], o.layout()) for o in outs]


def run_graph_samples(lib: str, build, *batches, **kwargs):
    """:func:`run_graph` without the layouts: one list of arrays per output."""
    return [samples for samples, _ in run_graph(lib, build, *batches, **kwargs)]


def assert_same(ours, theirs, tol=0.0, what="", layouts=True):
    """Same number of outputs, layouts (unless ``layouts=False``), shapes and dtypes; values
    equal (or within ``tol``)."""
    assert len(ours) == len(theirs), f"{what}: {len(ours)} outputs, DALI gives {len(theirs)}"
    for k, ((a_list, a_lay), (b_list, b_lay)) in enumerate(zip(ours, theirs)):
        assert not layouts or a_lay == b_lay, f"{what} output {k}: layout {a_lay!r} != DALI's {b_lay!r}"
        assert len(a_list) == len(b_list)
        for i, (a, b) in enumerate(zip(a_list, b_list)):
            assert a.shape == b.shape, f"{what} output {k} sample {i}: shape {a.shape} != DALI's {b.shape}"
            assert a.dtype == b.dtype, f"{what} output {k} sample {i}: dtype {a.dtype} != DALI's {b.dtype}"
            if tol == 0:
                np.testing.assert_array_equal(a, b, err_msg=f"{what} output {k} sample {i}")
            else:
                np.testing.assert_allclose(a.astype(np.float64), b.astype(np.float64), rtol=tol, atol=tol,
                                           err_msg=f"{what} output {k} sample {i}")


def check(build, *batches, layouts=None, tol=0.0, what="", batch_size=None):
    """stoker's outputs equal DALI's for the same graph (layouts, shapes, dtypes, values within
    ``tol``); returns stoker's outputs as :func:`run_graph` gives them."""
    ours = run_graph("stoker", build, *batches, layouts=layouts, batch_size=batch_size)
    theirs = run_graph("dali", build, *batches, layouts=layouts, batch_size=batch_size)
    assert_same(ours, theirs, tol, what)
    return ours


def check_samples(build, *batches, tol=0.0, what="", batch_size=None):
    """:func:`check` without comparing layouts (DALI gives transforms' matrices the layout
    "**", stoker none); returns stoker's samples, one list per output."""
    ours = run_graph("stoker", build, *batches, batch_size=batch_size)
    theirs = run_graph("dali", build, *batches, batch_size=batch_size)
    assert_same(ours, theirs, tol, what, layouts=False)
    return [samples for samples, _ in ours]


def to_dali(value):
    """stoker's enums -> DALI's (same names and numbers); anything else unchanged."""
    from stoker import types as st

    if isinstance(value, (st.DALIDataType, st.DALIImageType, st.DALIInterpType)):
        import nvidia.dali.types as dt

        return getattr(dt, value.name)
    return value


def _op(fn, name: str):
    for part in name.split("."):
        fn = getattr(fn, part)
    return fn


def run_op(lib: str, op_name: str, batch, layout="HWC", per_sample=None, seed=5, num_threads=None, **kwargs):
    """``fn.<op_name>(x, **kwargs)`` of ``lib`` on one batch; ``per_sample`` maps argument names to
    per-sample values fed through external sources. Returns the first output's samples."""
    fn, pipeline_def, _ = _libs(lib)
    if lib == "dali":
        kwargs = {k: to_dali(v) for k, v in kwargs.items()}
    per_sample = per_sample or {}
    data = [np.asarray(a) for a in batch]
    op = _op(fn, op_name)

    @pipeline_def(batch_size=len(data), num_threads=_threads(lib, num_threads), device_id=None, seed=seed)
    def pipe():
        x = fn.external_source(source=lambda: list(data), batch=True, layout=layout)
        extra = {k: fn.external_source(source=batch_source(v), batch=True) for k, v in per_sample.items()}
        return op(x, **kwargs, **extra)

    p = pipe()
    p.build()
    out = p.run()[0]
    return [np.array(out.at(i)) for i in range(len(out))]


def assert_close(ours, theirs, mean_tol, max_tol, what=""):
    """Same shapes and dtypes; mean and max absolute difference within tolerance."""
    assert len(ours) == len(theirs)
    for i, (a, b) in enumerate(zip(ours, theirs)):
        assert a.shape == b.shape, f"{what} sample {i}: shape {a.shape} != DALI's {b.shape}"
        assert a.dtype == b.dtype, f"{what} sample {i}: dtype {a.dtype} != DALI's {b.dtype}"
        d = np.abs(a.astype(np.float64) - b.astype(np.float64))
        if d.size:
            assert d.mean() <= mean_tol and d.max() <= max_tol, \
                f"{what} sample {i}: mean diff {d.mean():.5f}, max diff {d.max()} (tolerance {mean_tol}, {max_tol})"


def compare_op(op_name, batch, mean_tol, max_tol, layout="HWC", per_sample=None, **kwargs):
    """stoker vs DALI for one operator on the same batch and arguments; returns stoker's samples."""
    ours = run_op("stoker", op_name, batch, layout, per_sample, **kwargs)
    theirs = run_op("dali", op_name, batch, layout, per_sample, **kwargs)
    assert_close(ours, theirs, mean_tol, max_tol, f"{op_name}({kwargs}, per_sample={per_sample})")
    return ours
