"""readers.file through the I/O helper process: the same batches as reading in-process, errors
that name the file, slots reused once a batch is gone, and no process left behind."""

import gc
import os

import numpy as np
import pytest

import stoker.fn as fn
from stoker import pipeline_def
from stoker.errors import StokerError

pytestmark = pytest.mark.skipif(not hasattr(os, "memfd_create"), reason="needs Linux memfd_create")


def _pipe(root, threads=2, **kw):
    @pipeline_def(batch_size=5, num_threads=threads, device_id=None, seed=3)
    def p():
        jpegs, labels = fn.readers.file(file_root=root, random_shuffle=True, name="r", **kw)
        return jpegs, labels

    pipe = p()
    pipe.build()
    return pipe


def _collect(pipe, n):
    out = []
    for _ in range(n):
        j, lab = pipe.run()
        out.append(([bytes(np.asarray(j.at(i))) for i in range(len(j))],
                     [int(np.asarray(lab.at(i))[0]) for i in range(len(lab))], j.source_info()))
    return out


def test_same_batches_as_reading_in_process(sample_jpeg_dir, stoker_environ):
    stoker_environ(STOKER_READER_PROCESS="0")
    want = _collect(_pipe(sample_jpeg_dir), 12)  # 60 samples: more than two epochs of 24
    stoker_environ(STOKER_READER_PROCESS="1")
    pipe = _pipe(sample_jpeg_dir)
    got = _collect(pipe, 12)
    inst = [i for i in pipe._graph.instances.values() if hasattr(i, "_worker")][0]
    assert inst._worker is not None and inst._worker.alive()
    assert got == want
    proc = inst._worker.proc
    pipe.close()
    assert proc.poll() is not None  # the helper process has exited


def test_auto_mode_uses_the_helper_with_many_threads(sample_jpeg_dir, stoker_environ):
    stoker_environ(STOKER_READER_PROCESS="")
    few, many = _pipe(sample_jpeg_dir, threads=2), _pipe(sample_jpeg_dir, threads=4)
    few.run()
    many.run()
    assert [i._worker for i in few._graph.instances.values() if hasattr(i, "_worker")] == [None]
    assert [i._worker is not None for i in many._graph.instances.values() if hasattr(i, "_worker")] == [True]
    few.close()
    many.close()


def test_a_file_deleted_after_listing_is_named(tmp_path, stoker_environ):
    from stoker.sample_data import write_dataset

    stoker_environ(STOKER_READER_PROCESS="1")
    write_dataset(str(tmp_path), 10, classes=2, seed=2, workers=1)
    victim = sorted(p for p in tmp_path.rglob("*.jpg"))[3]

    @pipeline_def(batch_size=10, num_threads=2, device_id=None)
    def p():
        return fn.readers.file(file_root=str(tmp_path), name="r")

    pipe = p()
    pipe.build()
    victim.unlink()
    with pytest.raises(StokerError, match=victim.name):
        pipe.run()
    pipe.close()


def test_skip_drops_an_unreadable_file_and_keeps_the_rest(tmp_path, stoker_environ):
    from stoker.sample_data import write_dataset

    stoker_environ(STOKER_READER_PROCESS="1")
    write_dataset(str(tmp_path), 8, classes=1, seed=4, workers=1)
    files = sorted(tmp_path.rglob("*.jpg"))

    @pipeline_def(batch_size=4, num_threads=2, device_id=None, on_error="skip")
    def p():
        return fn.readers.file(file_root=str(tmp_path), name="r")

    pipe = p()
    pipe.build()
    files[2].unlink()  # deleted between listing and reading
    seen = []
    for _ in range(2):
        j, _ = pipe.run()
        assert len(j) == 4
        seen += j.source_info()
    assert sorted(seen[:7]) == sorted(os.path.relpath(f, tmp_path) for f in files if f != files[2])
    assert [r["source"] for r in pipe.error_report()] == [os.path.relpath(files[2], tmp_path)]
    pipe.close()


def test_slots_are_reused_once_a_batch_is_gone(sample_jpeg_dir):
    from stoker.operators.readers.io_worker import ReadWorker

    paths = sorted(str(p) for p in __import__("pathlib").Path(sample_jpeg_dir).rglob("*.jpg"))
    w = ReadWorker()
    try:
        for _ in range(6):
            samples, errors, _, located = w.read(paths)
            assert located[0][5] == samples[5].ctypes.data and located[1][5] == samples[5].nbytes
            assert not errors and bytes(samples[5]) == open(paths[5], "rb").read()
            del samples
            gc.collect()
        assert len(w.maps) <= 2  # not one shared memory file per batch
        kept, *_ = w.read(paths)
        other, *_ = w.read(paths[:3])
        assert bytes(kept[0]) == open(paths[0], "rb").read()  # a live batch is never overwritten
        assert bytes(other[2]) == open(paths[2], "rb").read()
    finally:
        w.close()


def test_the_helper_loads_the_structure_check_from_where_its_setup_says(sample_jpeg_dir, tmp_path):
    """The helper runs without site-packages; it finds NumPy (for the JPEG structure check) where
    the pipeline's process said on its standard input. Without it the hints would have 6 values a
    file, not the check's seventh."""
    from stoker.operators.readers.io_worker import ReadWorker

    paths = sorted(str(p) for p in __import__("pathlib").Path(sample_jpeg_dir).rglob("*.jpg"))[:4]
    broken = tmp_path / "broken.jpg"
    data = bytearray(open(paths[0], "rb").read())
    broken.write_bytes(bytes(data[: len(data) // 2]))  # (the scan stops before its end marker)
    w = ReadWorker()
    try:
        for _ in range(2):  # (the check's flag comes from the second such batch)
            samples, errors, hints, _ = w.read([*paths, str(broken)], check_structure=True)
        assert not errors and hints is not None and hints.shape == (5, 7)
        assert not hints[:4, 6].any() and hints[4, 6] == 1
    finally:
        w.close()


def test_setup_reaches_launched_and_standard_library_helpers(tmp_path):
    import json

    from stoker.workers.processes import start_helper, stop_helper

    launched = tmp_path / "echo_launched.py"
    launched.write_text("import socket, sys, json\nfrom stoker.workers.processes import read_setup\n"
                        "s = socket.socket(fileno=int(sys.argv[1]))\n"
                        "s.sendall(json.dumps(read_setup()).encode())\ns.close()\n")
    plain = tmp_path / "echo_plain.py"
    plain.write_text("import socket, sys\ns = socket.socket(fileno=int(sys.argv[1]))\n"
                     "s.sendall(sys.stdin.buffer.read())\ns.close()\n")
    for before, want_launcher in (([str(launched)], True), (["-S", str(plain)], False)):
        proc, sock = start_helper(before, setup={"where": "/x", "n": [1, 2]})
        try:
            sock.settimeout(30)
            data = b""
            while chunk := sock.recv(65536):
                data += chunk
        finally:
            stop_helper(proc, sock)
        got = json.loads(data)
        assert got["where"] == "/x" and got["n"] == [1, 2]
        assert ("_launcher_package" in got) == want_launcher
