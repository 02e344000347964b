"""The host work of each GPU operator does not grow with the batch (issue 16).

At 20k images/s a batch of 256 leaves the GPU stage about 12 ms of host time for all of its
operators together, so an operator that plans sample by sample in Python (a matrix, a window,
a CuPy view per sample) costs several milliseconds where DALI pays almost nothing. Each case of
``benchmarks/op_zoo.py`` runs here on the null device (``tests/null_device.py``: CuPy's host
half on NumPy, kernels recorded and skipped) at two batch sizes, and the Python function calls
of one iteration are counted with ``sys.setprofile``: the operator's own calls (its random
arguments included) minus those of the same pipeline without it. Per-sample Python shows up as
calls that grow with the batch.
"""

import collections
import gc
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks"))
import null_device  # noqa: E402
import op_zoo  # noqa: E402

SMALL, LARGE = 4, 36
# Calls allowed to grow from SMALL to LARGE samples: well under one per added sample.
SLACK = 8


def _images(n: int, ragged: bool) -> list:
    rng = np.random.default_rng(n)
    sizes = rng.integers(30, 50, (n, 2)) if ragged else np.full((n, 2), 40)
    return [rng.integers(0, 256, (int(h), int(w), 3), dtype=np.uint8) for h, w in sizes]


def count_calls(build, n: int, ragged: bool, by_function: bool = False):
    """Python calls made by one iteration (after two warm-ups) of external source -> GPU ->
    resize (dense 48x48, or shorter side 48: ragged) -> ``build``, everything on this thread.
    With ``by_function``, a Counter of calls by ``file:function`` instead (to find what grows)."""
    import stoker.fn as fn
    import stoker.types as types
    from stoker import pipeline_def

    images = _images(n, ragged)

    @pipeline_def(batch_size=n, num_threads=1, device_id=0, seed=3, exec_async=False, exec_pipelined=False,
                  prefetch_queue_depth=1)
    def pipe():
        x = fn.external_source(source=[images], cycle=True, layout="HWC").gpu()
        x = fn.resize(x, resize_shorter=48) if ragged else fn.resize(x, resize_x=48, resize_y=48)
        return build(fn, types, x) if build is not None else x

    p = pipe()
    p.build()
    p.run()
    p.run()
    calls = collections.Counter()

    def profile(frame, event, arg):
        if event == "call":
            code = frame.f_code
            calls[f"{os.path.basename(code.co_filename)}:{code.co_name}" if by_function else 0] += 1

    # (the garbage collector's finalizers, run whenever it happens to, would count as calls)
    gc.collect()
    gc.disable()
    sys.setprofile(profile)
    try:
        p.run()
    finally:
        sys.setprofile(None)
        gc.enable()
    p.close()
    return calls if by_function else calls[0]


def growing_functions(name: str, ragged: bool = False) -> list:
    """The functions whose calls grow with the batch in case ``name``, most first (a debugging aid:
    ``python -c "import test_gpu_host_cost as t; print(t.growing_functions('rotate'))"`` with the
    null device installed)."""
    small, large = (count_calls(op_zoo.OPS[name], n, ragged, by_function=True) for n in (SMALL, LARGE))
    grown = {k: large[k] - small.get(k, 0) for k in large}
    return sorted(((k, v) for k, v in grown.items() if v > 0), key=lambda kv: -kv[1])


@pytest.mark.parametrize("ragged", [False, True], ids=["dense", "ragged"])
@pytest.mark.parametrize("name", sorted(op_zoo.OPS))
def test_operator_host_calls_do_not_grow_with_batch(null_cupy, name, ragged):
    build = op_zoo.OPS[name]
    own = {n: count_calls(build, n, ragged) - count_calls(None, n, ragged) for n in (SMALL, LARGE)}
    growth = own[LARGE] - own[SMALL]
    assert growth <= SLACK, (
        f"{name}: {own[SMALL]} Python calls at {SMALL} samples, {own[LARGE]} at {LARGE} "
        f"({growth / (LARGE - SMALL):.1f} more per sample): its GPU path plans sample by sample")


def test_null_device_runs_the_kernels_it_is_asked_for(null_cupy):
    """The stand-in really goes through the GPU implementation (kernels recorded, no host fallback)."""
    from stoker.operators import gpu_registry

    before = dict(gpu_registry.FALLBACKS)
    null_device.LAUNCHES.clear()
    count_calls(op_zoo.OPS["rotate"], SMALL, True)
    assert any(name.startswith("warp") for name, _, _ in null_device.LAUNCHES)
    assert dict(gpu_registry.FALLBACKS) == before
