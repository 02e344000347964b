"""fn.readers.numpy on the CPU: listing, arrays of every dtype and order, regions of interest,
sharding, shuffling, checkpoints and bad files.

DALI's CPU readers.numpy is the oracle for what stoker promises to match exactly (listing
order, source_info, values, shapes, dtypes, ROI boxes and policies, shard order and padding);
shuffling differs on purpose and is checked through properties.
"""

import json
import os
import re

import numpy as np
import pytest
from oracle import default_threads, libs

from stoker import fn, ops, pipeline_def
from stoker.errors import OperatorError, PipelineBuildError

DTYPES = [np.uint8, np.int8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64, np.float16,
          np.float32, np.float64, np.bool_]


def write_arrays(root, ndim, dtype, n=7, seed=0, fortran_every=2, sub=True, lo=2):
    """``n`` arrays of ``ndim`` dimensions (shapes differ), every other one Fortran-ordered; some in
    a sub-folder. Returns {relative path as DALI lists it: array}."""
    rng = np.random.default_rng(seed)
    os.makedirs(os.path.join(root, "sub"), exist_ok=True)
    out = {}
    for i in range(n):
        shape = tuple(int(x) for x in rng.integers(lo, 7, ndim))
        a = (rng.random(shape) * 200 - (0 if np.dtype(dtype).kind in "ub" else 100))
        a = (a > 100) if dtype is np.bool_ else a.astype(dtype)
        if fortran_every and i % fortran_every:
            a = np.asfortranarray(a)
        rel = f"sub/a{i:02d}.npy" if sub and i % 3 == 2 else f"./a{i:02d}.npy"
        np.save(os.path.join(root, rel), a)
        out[rel] = np.ascontiguousarray(a)
    return out


def run_pipe(lib, batch_size, iterations, extra_inputs=None, **reader_args):
    """Per iteration, [(array, source_info)] of readers.numpy (stoker or DALI's CPU reader)."""
    fn_, pdef, _ = libs(lib)
    extra_inputs = extra_inputs or {}

    @pdef(batch_size=batch_size, num_threads=default_threads(lib), device_id=None, seed=7)
    def p():
        args = dict(reader_args)
        for k, values in extra_inputs.items():
            args[k] = fn_.external_source(source=_batch_of(values), batch=True)
        return fn_.readers.numpy(name="R", **args)

    pipe = p()
    pipe.build()
    out = []
    for _ in range(iterations):
        (o,) = pipe.run()
        out.append([(np.array(o.at(i)), o[i].source_info()) for i in range(len(o))])
    meta = pipe.reader_meta("R")
    if lib != "dali":
        pipe.close()
    return out, meta


def _batch_of(values):
    batch = [np.asarray(x) for x in values]
    return lambda: batch


def assert_same_batches(ours, theirs):
    assert len(ours) == len(theirs)
    for it, (a, b) in enumerate(zip(ours, theirs)):
        assert [s for _, s in a] == [s for _, s in b], f"iteration {it}: sources differ"
        for (x, src), (y, _) in zip(a, b):
            assert x.dtype == y.dtype and x.shape == y.shape, (it, src, x.dtype, x.shape, y.dtype, y.shape)
            np.testing.assert_array_equal(x, y, err_msg=f"iteration {it} {src}")


# --- DALI as the oracle ---------------------------------------------------------------------------

@pytest.mark.oracle
@pytest.mark.parametrize("ndim", [0, 1, 2, 3, 4])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_arrays_match_dali(tmp_path, dtype, ndim):
    arrays = write_arrays(str(tmp_path), ndim, dtype, fortran_every=2 if ndim > 1 else 0)
    ours, meta = run_pipe("stoker", 3, 4, file_root=str(tmp_path))  # 12 samples: across the epoch's end
    theirs, dmeta = run_pipe("dali", 3, 4, file_root=str(tmp_path))
    assert_same_batches(ours, theirs)
    assert meta == dmeta
    for batch in ours:
        for a, src in batch:
            np.testing.assert_array_equal(a, arrays[src])
            assert a.flags.c_contiguous


@pytest.mark.oracle
def test_layout_is_empty_and_files_file_list_match_dali(tmp_path):
    write_arrays(str(tmp_path), 2, np.float32)
    lst = tmp_path / "list.txt"
    lst.write_text("a01.npy\n\nsub/a02.npy\na00.npy\n")
    for args in [dict(files=["a03.npy", "sub/a05.npy", "a00.npy"], file_root=str(tmp_path)),
                 dict(files=[str(tmp_path / "a03.npy"), str(tmp_path / "a01.npy")]),
                 dict(file_list=str(lst), file_root=str(tmp_path)),
                 dict(file_root=str(tmp_path), file_filter="a0[13]*")]:
        ours, _ = run_pipe("stoker", 2, 3, **args)
        theirs, _ = run_pipe("dali", 2, 3, **args)
        assert_same_batches(ours, theirs)

    @pipeline_def(batch_size=2, num_threads=1, device_id=None)
    def p():
        return fn.readers.numpy(file_root=str(tmp_path))

    pipe = p()
    pipe.build()
    assert pipe.run()[0].layout() == ""


ROI_CASES = {
    "start_end": dict(roi_start=[1, 0, 2], roi_end=[3, 2, 4]),
    "axes": dict(roi_start=[1], roi_end=[2], roi_axes=[2]),
    "axes_two": dict(roi_start=[1, 0], roi_shape=[1, 2], roi_axes=[2, 0]),
    "negative_axis": dict(roi_start=[1], roi_end=[2], roi_axes=[-1]),
    "shape": dict(roi_start=[0, 1, 1], roi_shape=[2, 1, 1]),
    "rel": dict(rel_roi_start=[0.1, 0.25, 0.5], rel_roi_end=[0.9, 0.75, 1.0]),
    "rel_shape": dict(rel_roi_start=[0.2, 0.2, 0.2], rel_roi_shape=[0.5, 0.5, 0.3]),
    "rel_start_abs_shape": dict(rel_roi_start=[0.5], roi_shape=[1], roi_axes=[1]),
    "end_only": dict(roi_end=[1, 2, 2]),
    "empty_box": dict(roi_start=[1], roi_end=[1], roi_axes=[0]),
    "pad": dict(roi_start=[-1, 1], roi_end=[3, 9], roi_axes=[0, 2], out_of_bounds_policy="pad", fill_value=5.7),
    "pad_outside": dict(roi_start=[10], roi_end=[12], roi_axes=[1], out_of_bounds_policy="pad", fill_value=-3),
    "trim": dict(roi_start=[-2, 1], roi_end=[3, 9], roi_axes=[0, 2], out_of_bounds_policy="trim_to_shape"),
    "trim_rel": dict(rel_roi_start=[-0.5, 0.5], rel_roi_end=[0.5, 1.5], roi_axes=[0, 1],
                     out_of_bounds_policy="trim_to_shape"),
}


@pytest.mark.oracle
@pytest.mark.parametrize("dtype", [np.uint8, np.int16, np.float32])
@pytest.mark.parametrize("case", sorted(ROI_CASES))
def test_roi_matches_dali(tmp_path, case, dtype):
    write_arrays(str(tmp_path), 3, dtype, n=6, lo=4)
    args = dict(file_root=str(tmp_path), **ROI_CASES[case])
    ours, _ = run_pipe("stoker", 3, 3, **args)
    theirs, _ = run_pipe("dali", 3, 3, **args)
    assert_same_batches(ours, theirs)


@pytest.mark.oracle
def test_roi_leaving_the_array_raises_like_dali(tmp_path):
    write_arrays(str(tmp_path), 2, np.float32, n=3)
    args = dict(file_root=str(tmp_path), roi_start=[-1], roi_end=[2], roi_axes=[0])
    with pytest.raises(RuntimeError):
        run_pipe("dali", 3, 1, **args)
    with pytest.raises(OperatorError, match=r"out_of_bounds_policy.*leaves the array.*a00\.npy"):
        run_pipe("stoker", 3, 1, **args)


@pytest.mark.oracle
@pytest.mark.parametrize("names", [("roi_start", "roi_end"), ("rel_roi_start", "rel_roi_shape"),
                                   ("roi_start", "roi_shape")])
def test_per_sample_roi_arguments_match_dali(tmp_path, names):
    write_arrays(str(tmp_path), 2, np.int32, n=4)
    rel = names[0].startswith("rel")
    starts = [[0.25, 0.5], [0.0, 0.0], [0.5, 0.25], [0.1, 0.3]] if rel else [[1, 0], [0, 1], [1, 1], [0, 0]]
    ends = [[0.5, 0.5], [1.0, 0.5], [0.5, 0.75], [0.2, 0.4]] if rel else [[2, 2], [1, 2], [2, 1], [1, 1]]
    dt = np.float32 if rel else np.int32
    inputs = {names[0]: [np.array(s, dt) for s in starts], names[1]: [np.array(e, dt) for e in ends]}
    args = dict(file_root=str(tmp_path), out_of_bounds_policy="trim_to_shape")
    ours, _ = run_pipe("stoker", 4, 2, extra_inputs=inputs, **args)
    theirs, _ = run_pipe("dali", 4, 2, extra_inputs=inputs, **args)
    assert_same_batches(ours, theirs)


@pytest.mark.oracle
@pytest.mark.parametrize("pad", [False, True])
@pytest.mark.parametrize("stick", [False, True])
@pytest.mark.parametrize("bs", [2, 4])
def test_shards_and_padding_match_dali(tmp_path, pad, stick, bs):
    write_arrays(str(tmp_path), 1, np.int16, n=10)
    for sid in range(3):
        args = dict(file_root=str(tmp_path), num_shards=3, shard_id=sid, pad_last_batch=pad, stick_to_shard=stick)
        iterations = 3 * (-(-10 // bs)) + 2  # three passes and more: the shards rotate
        ours, meta = run_pipe("stoker", bs, iterations, **args)
        theirs, dmeta = run_pipe("dali", bs, iterations, **args)
        assert meta == dmeta
        assert_same_batches(ours, theirs)


# --- stoker's own guarantees ----------------------------------------------------------------------

def _sources(batches):
    return [s for b in batches for _, s in b]


def test_random_shuffle_covers_the_shard_once_per_pass(tmp_path):
    write_arrays(str(tmp_path), 1, np.uint8, n=12)
    for sid in range(3):
        batches, _ = run_pipe("stoker", 2, 6, file_root=str(tmp_path), random_shuffle=True, num_shards=3,
                              shard_id=sid, stick_to_shard=True)
        order = _sources(batches)
        unshuffled = _sources(run_pipe("stoker", 4, 1, file_root=str(tmp_path), num_shards=3, shard_id=sid)[0])
        passes = [order[k:k + 4] for k in range(0, 12, 4)]
        assert all(sorted(p) == sorted(unshuffled) for p in passes)
        assert len({tuple(p) for p in passes}) > 1  # a new permutation every pass


def test_checkpoint_resumes_exactly(tmp_path):
    write_arrays(str(tmp_path), 2, np.float32, n=9)

    def make(checkpoint=None):
        @pipeline_def(batch_size=2, num_threads=2, device_id=None, seed=3, enable_checkpointing=True,
                      checkpoint=checkpoint)
        def p():
            return fn.readers.numpy(file_root=str(tmp_path), random_shuffle=True, num_shards=3, shard_id=1,
                                    pad_last_batch=True, rel_roi_start=[0.5], roi_axes=[0], name="R")

        pipe = p()
        pipe.build()
        return pipe

    def take(pipe, k):
        return [[(np.array(o.at(i)).tolist(), o[i].source_info()) for i in range(len(o))]
                for o in (pipe.run()[0] for _ in range(k))]

    first = make()
    take(first, 5)
    cp = first.checkpoint()
    expected = take(first, 5)
    assert set(json.loads(cp)["sources"]["R"]) == {"epoch", "position", "shard"}
    assert take(make(cp), 5) == expected


def test_legacy_ops_api_and_lazy_init(tmp_path):
    write_arrays(str(tmp_path), 1, np.uint8, n=3)

    @pipeline_def(batch_size=3, num_threads=1, device_id=None)
    def p():
        return ops.readers.Numpy(file_root=str(tmp_path), lazy_init=True, name="R")()

    pipe = p()
    pipe.build()
    assert pipe.reader_meta("R")["epoch_size"] == 3
    assert len(pipe.run()[0]) == 3


def test_cache_header_information_and_dtype_check(tmp_path):
    write_arrays(str(tmp_path), 2, np.int16, n=4)
    a, _ = run_pipe("stoker", 2, 3, file_root=str(tmp_path), cache_header_information=True, dtype=np.int16)
    b, _ = run_pipe("stoker", 2, 3, file_root=str(tmp_path))
    assert_same_batches(a, b)
    with pytest.raises(OperatorError, match=r"argument 'dtype'.*a00\.npy.*int16.*float32"):
        run_pipe("stoker", 2, 1, file_root=str(tmp_path), dtype=np.float32)


def test_big_endian_files_are_read(tmp_path):
    a = np.arange(12, dtype=">i4").reshape(3, 4)
    np.save(tmp_path / "be.npy", a)
    (batch,), _ = run_pipe("stoker", 1, 1, files=[str(tmp_path / "be.npy")], roi_start=[1], roi_axes=[0])
    assert batch[0][0].dtype == np.int32 and batch[0][0].dtype.isnative
    np.testing.assert_array_equal(batch[0][0], a[1:])


def test_only_the_roi_rows_are_read(tmp_path, monkeypatch):
    from stoker.operators.readers import storage

    a = np.arange(100 * 50, dtype=np.float64).reshape(100, 50)
    np.save(tmp_path / "c.npy", a)
    np.save(tmp_path / "f.npy", np.asfortranarray(a))
    sizes = []
    real = storage.read_bytes

    def spy(path, offset=0, size=None):
        sizes.append(size)
        return real(path, offset, size)

    monkeypatch.setattr(storage, "read_bytes", spy)
    (batch,), _ = run_pipe("stoker", 2, 1, files=[str(tmp_path / "c.npy"), str(tmp_path / "f.npy")],
                           roi_start=[10, 5], roi_end=[12, 8])
    np.testing.assert_array_equal(batch[0][0], a[10:12, 5:8])
    np.testing.assert_array_equal(batch[1][0], a[10:12, 5:8])
    # two rows (C order), three columns (Fortran order); never the whole array (the pipeline may
    # have read the next batch ahead)
    assert set(sizes) == {2 * 50 * 8, 3 * 100 * 8}


@pytest.mark.parametrize("kwargs,arg", [
    (dict(), "file_root"),
    (dict(file_root="x", out_of_bounds_policy="wrap"), "out_of_bounds_policy"),
    (dict(file_root="x", roi_start=[1], rel_roi_start=[0.1]), "roi_start"),
    (dict(file_root="x", roi_end=[1], roi_shape=[1]), "roi_start"),
    (dict(files=["a"], file_list="b"), "files"),
])
def test_build_errors_name_the_argument(kwargs, arg):
    @pipeline_def(batch_size=1, num_threads=1, device_id=None)
    def p():
        return fn.readers.numpy(**kwargs)

    with pytest.raises(PipelineBuildError, match=rf"readers\.numpy.*'{arg}'"):
        p().build()


def test_missing_root_and_empty_listing(tmp_path):
    def make(root):
        @pipeline_def(batch_size=1, num_threads=1, device_id=None)
        def p():
            return fn.readers.numpy(file_root=root)

        return p()

    for root, msg in [(str(tmp_path / "none"), "does not exist"), (str(tmp_path), "no files matching")]:
        with pytest.raises(PipelineBuildError, match=msg):
            make(root).build()


def _bad_files(root):
    write_arrays(str(root), 1, np.float32, n=6, sub=False)
    full = open(os.path.join(root, "a01.npy"), "rb").read()
    with open(os.path.join(root, "a01.npy"), "wb") as f:  # truncated: the elements stop early
        f.write(full[:-5])
    with open(os.path.join(root, "a03.npy"), "wb") as f:  # corrupt: no .npy magic
        f.write(b"not an array at all")
    with open(os.path.join(root, "a04.npy"), "wb") as f:  # corrupt header
        f.write(full[:10] + b"{'descr': '<f4', 'fortran_order': False, 'shape': (3,, }" + b" " * 20 + b"\n")


@pytest.mark.parametrize("roi", [False, True])
def test_bad_files_are_skipped_and_reported(tmp_path, roi):
    _bad_files(tmp_path)
    extra = dict(roi_start=[0], roi_end=[1], roi_axes=[0]) if roi else {}

    @pipeline_def(batch_size=3, num_threads=2, device_id=None, on_error="skip")
    def p():
        return fn.readers.numpy(file_root=str(tmp_path), **extra)

    pipe = p()
    pipe.build()
    got = [s for _ in range(2) for s in pipe.run()[0].source_info()]
    assert got == ["./a00.npy", "./a02.npy", "./a05.npy", "./a00.npy", "./a02.npy", "./a05.npy"]
    reported = {r["source"] for r in pipe.error_report()}
    assert reported == {"./a01.npy", "./a03.npy", "./a04.npy"}
    pipe.close()


@pytest.mark.parametrize("name,why", [("a01", "truncated|ends after"), ("a03", "not a .npy file"), ("a04", "header")])
def test_bad_file_raises_naming_the_path(tmp_path, name, why):
    _bad_files(tmp_path)

    @pipeline_def(batch_size=1, num_threads=1, device_id=None)
    def p():
        return fn.readers.numpy(files=[f"{name}.npy"], file_root=str(tmp_path))

    pipe = p()
    pipe.build()
    with pytest.raises(OperatorError, match=rf"readers\.numpy.*{name}\.npy.*") as e:
        pipe.run()
    assert re.search(why, str(e.value))


def test_mixed_dimensions_in_a_batch_name_both_files(tmp_path):
    np.save(tmp_path / "a.npy", np.zeros((2, 2), np.float32))
    np.save(tmp_path / "b.npy", np.zeros(3, np.float32))
    with pytest.raises(OperatorError, match=r"a\.npy.*2-D.*b\.npy.*1-D"):
        run_pipe("stoker", 2, 1, file_root=str(tmp_path))
