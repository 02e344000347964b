"""Run one graph through stoker and through DALI's CPU operators (the oracle).

``build(fn, types, *inputs)`` is written once and called with each library's
``fn`` and ``types``; inputs are batches (lists of NumPy arrays) fed by external sources.
"""

import numpy as np
import pytest


def _source(batch):
    arrays = [np.asarray(a) for a in batch]
    return lambda: arrays


def run_graph(lib, build, *batches, batch_size=None, seed=3, num_threads=None):
    """Outputs of ``build`` as a list (one entry per output) of lists of arrays."""
    if lib == "dali":
        pytest.importorskip("nvidia.dali")
        from nvidia.dali import fn, pipeline_def, types
    else:
        from stoker import fn, pipeline_def, types
    bs = batch_size or len(batches[0])

    @pipeline_def(batch_size=bs, device_id=None, seed=seed, num_threads=num_threads or (1 if lib == "dali" else 2))
    def pipe():
        xs = [fn.external_source(source=_source(b), batch=True) for b in batches]
        out = build(fn, types, *xs)
        return tuple(out) if isinstance(out, (list, tuple)) else out

    p = pipe()
    p.build()
    outs = p.run()
    return [[np.array(o.at(i)) for i in range(len(o))] for o in outs]


def check(build, *batches, tol=0.0, what="", batch_size=None):
    """stoker's outputs equal DALI's (shapes, dtypes, values within ``tol``)."""
    ours = run_graph("stoker", build, *batches, batch_size=batch_size)
    theirs = run_graph("dali", build, *batches, batch_size=batch_size)
    assert len(ours) == len(theirs), f"{what}: {len(ours)} outputs, DALI gives {len(theirs)}"
    for k, (a_list, b_list) in enumerate(zip(ours, theirs)):
        assert len(a_list) == len(b_list)
        for i, (a, b) in enumerate(zip(a_list, b_list)):
            assert a.shape == b.shape, f"{what} output {k} sample {i}: shape {a.shape} != DALI's {b.shape}"
            assert a.dtype == b.dtype, f"{what} output {k} sample {i}: dtype {a.dtype} != DALI's {b.dtype}"
            np.testing.assert_allclose(a, b, rtol=tol, atol=tol, err_msg=f"{what} output {k} sample {i}")
    return ours
