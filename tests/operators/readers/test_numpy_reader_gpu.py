"""readers.numpy with device="gpu" on a real GPU against the CPU reader (pinned path, and kvikio
where installed). The same checks on the null device: tests/operators/readers/test_numpy_reader_null_device.py.
"""

import numpy as np
import pytest
from numpy_gpu_helpers import CASES, assert_same, break_two, load_gpu_numpy, run, write_set


@pytest.fixture(autouse=True)
def gpu_numpy_loaded():
    load_gpu_numpy()


@pytest.mark.gpu
@pytest.mark.parametrize("case", sorted(CASES))
def test_gpu_gives_the_cpu_arrays(tmp_path, case):
    write_set(str(tmp_path), n=11)
    args = dict(file_root=str(tmp_path), **CASES[case])
    want, _ = run("cpu", 4, 6, **args)
    got, _ = run("gpu", 4, 6, **args)
    assert_same(got, want)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.uint8, np.int16, np.float16, np.float64, np.bool_])
def test_gpu_dtypes_and_dimensions(tmp_path, dtype):
    for ndim in (1, 2, 4):
        root = str(tmp_path / f"d{ndim}")
        write_set(root, n=5, ndim=ndim, dtype=dtype)
        assert_same(run("gpu", 2, 3, file_root=root)[0], run("cpu", 2, 3, file_root=root)[0])


@pytest.mark.gpu
@pytest.mark.parametrize("on_error", ["skip", "substitute"])
def test_gpu_bad_files_follow_on_error(tmp_path, on_error):
    write_set(str(tmp_path))
    break_two(str(tmp_path))
    want, _ = run("cpu", 4, 4, on_error=on_error, file_root=str(tmp_path))
    got, _ = run("gpu", 4, 4, on_error=on_error, file_root=str(tmp_path))
    assert_same(got, want)


@pytest.mark.gpu
def test_gpu_kvikio_path(tmp_path, stoker_environ):
    pytest.importorskip("kvikio")
    write_set(str(tmp_path), n=9)
    stoker_environ(STOKER_NUMPY_GDS="1")
    got, _ = run("gpu", 4, 4, file_root=str(tmp_path))
    want, _ = run("cpu", 4, 4, file_root=str(tmp_path))
    assert_same(got, want)
