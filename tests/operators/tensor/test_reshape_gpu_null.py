"""GPU reshape on the null device (CuPy's host half on NumPy; reshape launches no kernel, so its
values are real): the CPU's samples, no copy, and host calls that do not grow with the batch."""

import os
import sys

import numpy as np
import pytest

sys.path[:0] = [os.path.join(os.path.dirname(__file__), "..", ".."), os.path.join(os.path.dirname(__file__), "..")]
import null_device  # noqa: E402
import test_gpu_host_cost  # noqa: E402

CASES = {
    "shape": lambda fn, types, x: fn.reshape(x, shape=[-1, 3]),
    "rel_shape": lambda fn, types, x: fn.reshape(x, rel_shape=[0.5, 2.0, 1.0], layout="HWC"),
    "src_dims": lambda fn, types, x: fn.reshape(x, src_dims=[2, 0, 1]),
    "per_sample": lambda fn, types, x: fn.reshape(x, shape=fn.cast(fn.random.uniform(range=(3, 4), shape=(2,)),
                                                                  dtype=types.INT32) * 0 + np.array([-1, 3])),
}


def _run(build, images, gpu: bool):
    import stoker.fn as fn
    import stoker.types as types
    from stoker import pipeline_def

    @pipeline_def(batch_size=len(images), num_threads=1, device_id=0, seed=2)
    def pipe():
        x = fn.external_source(source=[images], cycle=True, layout="HWC")
        return build(fn, types, x.gpu() if gpu else x)

    p = pipe()
    p.build()
    (out,) = p.run()
    p.close()
    return [np.asarray(s) for s in (out.as_cpu() if gpu else out).samples()], out.layout()


@pytest.mark.parametrize("ragged", [False, True], ids=["dense", "ragged"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_gpu_reshape_gives_the_cpu_samples(case, ragged):
    rng = np.random.default_rng(1)
    sizes = [(8, 6), (4, 10), (6, 6)] if ragged else [(8, 6)] * 3
    images = [rng.integers(0, 255, (h, w, 3), dtype=np.uint8) for h, w in sizes]
    with null_device.installed():
        from stoker.operators import gpu_registry

        before = gpu_registry.FALLBACKS["reshape"]
        got, got_layout = _run(CASES[case], images, True)
        assert gpu_registry.FALLBACKS["reshape"] == before, "the host path ran"
    want, want_layout = _run(CASES[case], images, False)
    assert got_layout == want_layout
    for g, w in zip(got, want):
        assert g.shape == w.shape
        np.testing.assert_array_equal(g, w)


def test_a_shape_that_does_not_fit_names_the_sample():
    rng = np.random.default_rng(2)
    images = [rng.integers(0, 255, (h, 5, 3), dtype=np.uint8) for h in (4, 7, 4)]
    with null_device.installed(), pytest.raises(Exception, match=r"cannot reshape.*\(7, 5, 3\).*sample 1"):
        _run(lambda fn, types, x: fn.reshape(x, shape=[-1, 20]), images, True)


@pytest.mark.parametrize("case,ragged", [("shape", False), ("shape", True), ("rel_shape", False),
                                         ("src_dims", False), ("src_dims", True)])
def test_gpu_reshape_host_calls_do_not_grow(case, ragged):
    """(rel_shape halves the height: the ragged batches' odd heights do not fit it.)"""
    build = CASES[case]
    with null_device.installed():
        own = {n: test_gpu_host_cost.count_calls(build, n, ragged) - test_gpu_host_cost.count_calls(None, n, ragged)
               for n in (test_gpu_host_cost.SMALL, test_gpu_host_cost.LARGE)}
    assert own[test_gpu_host_cost.LARGE] - own[test_gpu_host_cost.SMALL] <= test_gpu_host_cost.SLACK
