"""python_function, torch_python_function and dl_tensor_python_function: the same results as DALI's for
the same function, per-sample calls on several threads, num_outputs, batch_processing, errors."""

import threading
import time
from pathlib import Path

import numpy as np
import pytest
from oracle import assert_same, check, run_graph

from stoker import fn, pipeline_def  # noqa: E402
from stoker.errors import StokerError  # noqa: E402

RNG = np.random.default_rng(5)
IMGS = [RNG.integers(0, 256, (3 + i, 5 + 2 * i, 3), np.uint8) for i in range(4)]
OTHER = [RNG.random((3 + i, 5 + 2 * i), np.float32) for i in range(4)]


def two_outputs(x, y):
    return x.astype(np.float32) * y[..., None], x.sum(axis=(0, 1)).astype(np.int64)


def flip_batch(xs):
    return [np.ascontiguousarray(x[::-1]) for x in xs]


@pytest.mark.oracle
def test_per_sample_two_outputs_matches_dali():
    check(lambda fn, t, x, y: fn.python_function(x, y, function=two_outputs, num_outputs=2),
          IMGS, OTHER, layouts=["HWC", None])


@pytest.mark.oracle
def test_batch_processing_and_layouts_match_dali():
    check(lambda fn, t, x: fn.python_function(x, function=flip_batch, batch_processing=True, output_layouts="HWC"),
          IMGS, layouts=["HWC"])
    check(lambda fn, t, x: fn.python_function(x, function=lambda a: (a[..., 0], a.T.copy()), num_outputs=2,
                                              output_layouts=["HW", "CWH"]), IMGS, layouts=["HWC"])


@pytest.mark.oracle
def test_torch_python_function_matches_dali():
    # DALI's torch_python_function needs a CUDA build of torch: compare with its python_function
    # running the same computation in NumPy.
    torch = pytest.importorskip("torch")

    def f(x):
        return torch.flip(x, dims=[1]).to(torch.float32) / 2

    ours = run_graph("stoker", lambda fn, t, x: fn.torch_python_function(x, function=f), IMGS, layouts=["HWC"])
    theirs = run_graph("dali", lambda fn, t, x: fn.python_function(
        x, function=lambda a: a[:, ::-1].astype(np.float32) / 2), IMGS, layouts=["HWC"])
    assert_same(ours, theirs)


@pytest.mark.oracle
def test_dl_tensor_python_function_matches_dali():
    def f(caps):  # a batch of DLPack capsules in and out
        return [(np.from_dlpack(_Cap(c)) * 3).__dlpack__() for c in caps]

    check(lambda fn, t, x: fn.dl_tensor_python_function(x, function=f), OTHER)


class _Cap:
    def __init__(self, c):
        self.c = c

    def __dlpack__(self, stream=None, **kw):
        return self.c

    def __dlpack_device__(self):
        return (1, 0)


def _run(build, batch, num_threads=2):
    @pipeline_def(batch_size=len(batch), num_threads=num_threads, device_id=None, seed=1)
    def pipe():
        x = fn.external_source(source=lambda: batch, batch=True)
        return build(x)

    p = pipe()
    p.build()
    return p.run()


def test_per_sample_calls_run_on_several_threads():
    idents, lock = set(), threading.Lock()

    def f(x):
        time.sleep(0.02)  # releases the GIL: the other thread takes the next samples meanwhile
        with lock:
            idents.add(threading.get_ident())
        return x + 1

    batch = [np.full((2, 2), i, np.int32) for i in range(8)]
    out, = _run(lambda x: fn.python_function(x, function=f), batch)
    assert len(idents) >= 2, "per-sample calls all ran on one thread"
    for i in range(8):
        np.testing.assert_array_equal(out.at(i), batch[i] + 1)


def test_batch_processing_calls_once_and_no_input():
    calls = []

    def f(xs):
        calls.append(len(xs))
        return np.stack(xs) * 2  # a dense array: its first dimension is the batch

    batch = [np.full((3,), i, np.float32) for i in range(5)]
    out, = _run(lambda x: fn.python_function(x, function=f, batch_processing=True), batch)
    assert calls and set(calls) == {5}  # whole batches only (prefetching may run a second one)
    for i in range(5):
        np.testing.assert_array_equal(out.at(i), batch[i] * 2)
    # no inputs, per sample: called batch_size times with no arguments
    out, = _run(lambda x: fn.python_function(function=lambda: np.arange(3)), batch)
    assert len(out) == 5 and all(np.array_equal(out.at(i), np.arange(3)) for i in range(5))


def test_torch_inputs_are_tensors_and_outputs_arrays():
    torch = pytest.importorskip("torch")
    seen = []

    def f(x, y):
        seen.append((type(x), type(y)))
        return x.double() + y.double()[..., None], y.shape[0] * torch.ones(2)

    out, cnt = _run(lambda x: fn.torch_python_function(x, x[:, :, 0], function=f, num_outputs=2), IMGS)
    assert all(a is torch.Tensor and b is torch.Tensor for a, b in seen)
    for i, img in enumerate(IMGS):
        np.testing.assert_array_equal(out.at(i), img.astype(np.float64) + img[:, :, :1])
        np.testing.assert_array_equal(cnt.at(i), np.full(2, img.shape[0], np.float32))


def test_user_error_names_operator_line_and_sample():
    def bad(x):
        if x.shape[0] == 5:
            raise KeyError("boom")
        return x

    with pytest.raises(StokerError) as e:
        _run(lambda x: fn.python_function(x, function=bad), IMGS)
    msg = str(e.value)
    assert "python_function" in msg and "KeyError" in msg and "boom" in msg
    assert f"{Path(__file__).name}:" in msg and "in bad" in msg and "sample 2" in msg


def test_wrong_number_of_outputs_and_bad_arguments():
    with pytest.raises(StokerError, match="2 outputs"):
        _run(lambda x: fn.python_function(x, function=lambda a: a, num_outputs=2), IMGS)
    with pytest.raises(StokerError, match="function"):
        _run(lambda x: fn.python_function(x, function=3), IMGS)
    with pytest.raises(StokerError, match="output_layouts"):
        _run(lambda x: fn.python_function(x, function=lambda a: a, output_layouts=["HWC", "HW"]), IMGS)
    with pytest.raises(StokerError, match="returned 2 samples"):
        _run(lambda x: fn.python_function(x, function=lambda xs: xs[:2], batch_processing=True), IMGS)


def test_user_error_names_the_sample_file(tmp_path):
    (tmp_path / "cls").mkdir()
    for name in ("a.jpg", "b.jpg", "c.jpg"):  # only read as bytes: the content needs not be an image
        (tmp_path / "cls" / name).write_bytes(bytes(range(len(name) * (3 if name == "b.jpg" else 1))))

    def picky(data):
        if data.size > 5:
            raise ValueError("too long")
        return data

    @pipeline_def(batch_size=3, num_threads=2, device_id=None, seed=1)
    def pipe():
        data, _ = fn.readers.file(file_root=str(tmp_path))
        return fn.python_function(data, function=picky)

    p = pipe()
    p.build()
    with pytest.raises(StokerError) as e:
        p.run()
    assert "b.jpg" in str(e.value) and "too long" in str(e.value) and "in picky" in str(e.value)
