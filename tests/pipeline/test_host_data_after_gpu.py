"""Host data made in the GPU stage, as DALI allows it: the shapes and properties of a GPU batch on
the host (``x.shape()``, ``x.property(...)``, ``x.source_info()``: DALI's CPU forms of these read
only metadata), and CPU operators after ``.cpu()`` or after such a read. The null device
(tests/null_device.py) runs the GPU stage's host side here; the ``gpu`` test does it on a GPU."""

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import null_device  # noqa: E402

IMAGES = [np.arange(60, dtype=np.uint8).reshape(4, 5, 3), np.arange(36, dtype=np.uint8).reshape(6, 2, 3)]

CASES = {
    "shape": lambda fn, types, x: x.shape(),
    "shape_float": lambda fn, types, x: x.shape(dtype=types.FLOAT),
    "layout": lambda fn, types, x: x.property("layout"),
    "cast_of_shape": lambda fn, types, x: fn.cast(x.shape(), dtype=types.FLOAT),
    "flip_after_cpu": lambda fn, types, x: fn.flip(x.cpu(), horizontal=1),
}


def _run(build, gpu: bool):
    import stoker.fn as fn
    import stoker.types as types
    from stoker import pipeline_def

    @pipeline_def(batch_size=len(IMAGES), num_threads=1, device_id=0 if gpu else None, seed=2)
    def pipe():
        x = fn.external_source(source=[IMAGES], cycle=True, layout="HWC")
        return build(fn, types, x.gpu() if gpu else x)

    p = pipe()
    p.build()
    (out,) = p.run()
    p.close()
    return out


def _check_equal(got, want):
    assert type(got).__name__ == "TensorListCPU"  # host data, as DALI gives it
    assert len(got) == len(want) and got.layout() == want.layout()
    for i in range(len(want)):
        np.testing.assert_array_equal(np.asarray(got.at(i)), np.asarray(want.at(i)))


@pytest.mark.parametrize("case", sorted(CASES))
def test_host_results_of_gpu_batches_equal_the_cpu_pipelines(case):
    with null_device.installed():
        got = _run(CASES[case], gpu=True)
    _check_equal(got, _run(CASES[case], gpu=False))


def test_shape_on_the_device_when_asked():
    with null_device.installed():
        out = _run(lambda fn, types, x: x.shape(device="gpu"), gpu=True)
    assert type(out).__name__ == "TensorListGPU"
    assert [np.asarray(out.as_cpu().at(i)).tolist() for i in range(2)] == [[4, 5, 3], [6, 2, 3]]


def test_other_cpu_operators_still_refuse_gpu_data():
    from stoker.errors import PipelineBuildError

    with null_device.installed(), pytest.raises(PipelineBuildError, match="flip: a CPU operator cannot take a GPU"):
        _run(lambda fn, types, x: fn.flip(x, horizontal=1, device="cpu"), gpu=True)


@pytest.mark.gpu
@pytest.mark.parametrize("case", sorted(CASES))
def test_host_results_of_gpu_batches_on_a_gpu(case):
    from stoker.backend.cuda import cuda_available

    if not cuda_available():
        pytest.skip("needs a GPU")
    _check_equal(_run(CASES[case], gpu=True), _run(CASES[case], gpu=False))
