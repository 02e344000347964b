"""Helpers of the GPU operator tests: a small pipeline run on either device, compared with the
CPU's, and loading one GPU module by name."""

import importlib

import numpy as np

import stoker.fn as fn
from stoker import pipeline_def
from stoker.operators import gpu_registry


def load_gpu_module(module: str) -> None:
    """Import a GPU module and register its placements (``gpu_registry.load_gpu_impls`` loads them
    all; a test that names its module says which kernels it is about)."""
    importlib.import_module(module)
    gpu_registry.load_gpu_impls()


def run_pipeline(build, sources, gpu: bool, layout: str = "HWC", iterations: int = 1, seed: int = 1):
    """Per iteration, (output samples as host arrays, output layout) of ``build(*nodes)``: one
    external source per batch in ``sources`` (the same batch every iteration), moved to the GPU
    when ``gpu``."""

    @pipeline_def(batch_size=len(sources[0]), num_threads=1, device_id=0, seed=seed)
    def pipe():
        xs = [fn.external_source(source=[s], cycle=True, layout=layout) for s in sources]
        return build(*([x.gpu() for x in xs] if gpu else xs))

    p = pipe()
    p.build()
    results = []
    for _ in range(iterations):
        (out,) = p.run()
        results.append(([np.asarray(a) for a in (out.as_cpu() if gpu else out).samples()], out.layout()))
    p.close()
    return results


def compare_exact(build, batch, name: str, layout: str = "HWC", kernel: bool = True) -> list:
    """Run ``build`` over ``batch`` on the GPU and on the CPU and require the same samples, to the
    bit, with the same layout; with ``kernel``, also that operator ``name``'s GPU kernel ran (its
    host fallback did not). Returns the GPU samples."""
    before = gpu_registry.FALLBACKS[name]
    (got, got_layout), = run_pipeline(build, [batch], True, layout)
    if kernel:
        assert gpu_registry.FALLBACKS[name] == before, "the host fallback ran instead of the kernel"
    (want, want_layout), = run_pipeline(build, [batch], False, layout)
    assert got_layout == want_layout
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)
    return got


def assert_alone_equals_together(make, batches, kinds=("train", "val")) -> None:
    """Pipelines ``make(kind)`` (built) run one after the other and then at the same time from one
    thread each: every pipeline gives the same batches (``batches(pipe)``: a list of per-batch lists
    of host arrays) either way."""
    from concurrent.futures import ThreadPoolExecutor

    alone = {}
    for kind in kinds:
        p = make(kind)
        try:
            alone[kind] = batches(p)
        finally:
            p.close()
    pipes = {kind: make(kind) for kind in kinds}
    try:
        with ThreadPoolExecutor(len(pipes)) as pool:
            together = dict(zip(pipes, pool.map(batches, pipes.values())))
    finally:
        for p in pipes.values():
            p.close()
    for kind in kinds:
        for a, b in zip(alone[kind], together[kind]):
            assert len(a) == len(b)
            for x, y in zip(a, b):
                np.testing.assert_array_equal(x, y)
