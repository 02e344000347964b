"""readers.numpy with device="gpu" on the null device (tests/null_device.py: no GPU, CuPy's host half
on NumPy; copies are real memmoves, so the values that reach the "device" are the real ones).

Checks the host half of stoker/operators/readers/gpu_numpy.py against the CPU reader: the staging,
the one copy per batch, regions, Fortran order, bad files under every on_error, and the GPUDirect
Storage path with a mocked kvikio. Real-GPU versions: tests/operators/readers/test_numpy_reader_gpu.py.
"""

import os
import sys

import numpy as np
import pytest

sys.path[:0] = [os.path.join(os.path.dirname(__file__), "..", "..")]
import null_device  # noqa: E402
from numpy_gpu_helpers import CASES, assert_same, break_two, load_gpu_numpy, run, write_set  # noqa: E402

from stoker import fn, pipeline_def  # noqa: E402


@pytest.fixture(autouse=True)
def gpu_numpy_loaded():
    load_gpu_numpy()


@pytest.mark.parametrize("case", sorted(CASES))
def test_null_device_gives_the_cpu_arrays(tmp_path, case):
    write_set(str(tmp_path))
    args = dict(file_root=str(tmp_path), **CASES[case])
    want, _ = run("cpu", 4, 5, **args)
    with null_device.installed():
        from stoker.operators import gpu_registry

        before = gpu_registry.FALLBACKS["readers.numpy"]
        got, _ = run("gpu", 4, 5, **args)
        assert gpu_registry.FALLBACKS["readers.numpy"] == before, "the host fallback ran"
    assert_same(got, want)


def test_null_device_batch_is_one_flat_buffer_of_aligned_samples(tmp_path):
    write_set(str(tmp_path), n=4, fortran=False, dtype=np.int16)
    with null_device.installed():
        @pipeline_def(batch_size=4, num_threads=1, device_id=0)
        def p():
            return fn.readers.numpy(file_root=str(tmp_path), device="gpu")

        pipe = p()
        pipe.build()
        (o,) = pipe.run()
        buf, offsets, shapes = o.flat_parts()
        assert buf.dtype == np.int16 and o.layout() == ""
        assert (offsets * 2 % 256 == 0).all()
        pipe.close()


def test_null_device_reads_whole_arrays_straight_into_staging(tmp_path, monkeypatch):
    """Whole C-order arrays are read into the pinned buffer (readinto); no array is made first."""
    from stoker.operators.readers import gpu_numpy

    write_set(str(tmp_path), n=4, fortran=False)
    made = []
    real = gpu_numpy.read_window
    monkeypatch.setattr(gpu_numpy, "read_window", lambda *a: made.append(a) or real(*a))
    with null_device.installed():
        got, _ = run("gpu", 4, 1, file_root=str(tmp_path))
    assert not made
    want, _ = run("cpu", 4, 1, file_root=str(tmp_path))
    assert_same(got, want)


@pytest.mark.parametrize("on_error", ["skip", "substitute"])
def test_null_device_bad_files_follow_on_error_as_the_cpu(tmp_path, on_error):
    write_set(str(tmp_path))
    break_two(str(tmp_path))
    want, want_reports = run("cpu", 4, 4, on_error=on_error, file_root=str(tmp_path))
    with null_device.installed():
        got, got_reports = run("gpu", 4, 4, on_error=on_error, file_root=str(tmp_path))
    assert_same(got, want)
    assert {r["source"] for r in got_reports} == {r["source"] for r in want_reports} == {"./a03.npy", "./a05.npy"}


def test_null_device_bad_file_raises_naming_the_path(tmp_path):
    write_set(str(tmp_path))
    break_two(str(tmp_path))
    with null_device.installed(), pytest.raises(RuntimeError, match=r"a03\.npy"):
        run("gpu", 4, 1, file_root=str(tmp_path))


class _FakeCuFile:
    """kvikio.CuFile on the null device: pread fills the (host-backed) device array."""

    reads = []

    def __init__(self, path, mode="r"):
        self.path = path

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None

    def pread(self, buf, size, file_offset=0):
        with open(self.path, "rb") as f:
            f.seek(file_offset)
            data = f.read(size)
        np.asarray(buf).reshape(-1)[:len(data)] = np.frombuffer(data, np.uint8)
        _FakeCuFile.reads.append((self.path, size))

        class Done:
            def get(self):
                return len(data)

        return Done()


def test_null_device_gds_path_with_a_mocked_kvikio(tmp_path, monkeypatch, stoker_environ):
    import types

    write_set(str(tmp_path), n=6)
    monkeypatch.setitem(sys.modules, "kvikio", types.SimpleNamespace(CuFile=_FakeCuFile))
    stoker_environ(STOKER_NUMPY_GDS="1")
    _FakeCuFile.reads.clear()
    with null_device.installed():
        got, _ = run("gpu", 3, 2, file_root=str(tmp_path))
    want, _ = run("cpu", 3, 2, file_root=str(tmp_path))
    assert_same(got, want)
    # the C-order files go through kvikio; the Fortran-ordered ones (odd) are transposed on the host
    assert sorted({os.path.basename(p) for p, _ in _FakeCuFile.reads}) == ["a00.npy", "a02.npy", "a04.npy"]


def test_a_dropped_batch_gives_its_staging_back():
    """The host half's result is a StagedBatch (a HostHalf): the executor calls it off when the
    batch is dropped before its GPU stage, and the staging goes back to the reader's pool once."""
    from types import SimpleNamespace

    from stoker.operators.base import HostHalf
    from stoker.operators.readers.gpu_numpy import StagedBatch
    from stoker.pipeline.executor import cancel_prepared

    op, host = SimpleNamespace(), np.zeros(512, np.uint8)
    empty = np.zeros(0, np.int64)
    plan = StagedBatch(op, host, None, 0, empty, [], np.dtype(np.float32), [], [], empty)
    assert isinstance(plan, HostHalf)
    cancel_prepared(plan)
    assert plan.host is None and [b is host for b, _ in op._gpu_staging._free] == [True]
    cancel_prepared(plan)  # (a second call gives nothing back again)
    assert len(op._gpu_staging._free) == 1
    cancel_prepared({"cancel": lambda: 1 / 0})  # not a HostHalf: never called off

