"""Run one graph through stoker and through DALI's CPU operators (the oracle).

``build(fn, types, *inputs)`` is written once and called with each library's
``fn`` and ``types`` modules, so a test states the operator call a single time.
Inputs are batches (lists of NumPy arrays), fed by external sources.
"""

import numpy as np
import pytest


def _source(batch):
    arrays = [np.asarray(a) for a in batch]
    return lambda: arrays


def run_graph(lib: str, build, *batches, layouts=None, batch_size=None, seed=3):
    """Outputs of ``build`` as a list (one entry per output) of (list of arrays, layout)."""
    if lib == "dali":
        pytest.importorskip("nvidia.dali")
        from nvidia.dali import fn, pipeline_def, types
        kw = dict(num_threads=1)
    else:
        from stoker import fn, pipeline_def, types
        kw = dict(num_threads=2)
    bs = batch_size or len(batches[0])
    layouts = layouts or [None] * len(batches)

    @pipeline_def(batch_size=bs, device_id=None, seed=seed, **kw)
    def pipe():
        xs = [fn.external_source(source=_source(b), batch=True, layout=lay) for b, lay in zip(batches, layouts)]
        out = build(fn, types, *xs)
        return tuple(out) if isinstance(out, (list, tuple)) else out

    p = pipe()
    p.build()
    outs = p.run()
    return [([np.array(o.at(i)) for i in range(len(o))], o.layout()) for o in outs]


def assert_same(ours, theirs, tol=0.0, what=""):
    """Same number of outputs, layouts, shapes and dtypes; values equal (or within ``tol``)."""
    assert len(ours) == len(theirs), f"{what}: {len(ours)} outputs, DALI gives {len(theirs)}"
    for k, ((a_list, a_lay), (b_list, b_lay)) in enumerate(zip(ours, theirs)):
        assert a_lay == b_lay, f"{what} output {k}: layout {a_lay!r} != DALI's {b_lay!r}"
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
    """stoker's outputs equal DALI's for the same graph."""
    ours = run_graph("stoker", build, *batches, layouts=layouts, batch_size=batch_size)
    theirs = run_graph("dali", build, *batches, layouts=layouts, batch_size=batch_size)
    assert_same(ours, theirs, tol, what)
    return ours
