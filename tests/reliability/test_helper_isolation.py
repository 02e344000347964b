"""stoker's helper processes import nothing from the current directory or from a PYTHONPATH set
after the pipeline's process started, and run their native thread pools on one thread.

The bug this guards: the CPU chain workers started as ``python -m stoker.pipeline.chain_processes``,
which puts the current directory first on ``sys.path``: a ``stoker/`` folder there was imported
and run in every worker (a planted package ran 40 times in 20 iterations), and the reader's I/O
helper took its standard library modules from ``PYTHONPATH`` first. Helpers now start under
``python -I`` and import stoker from the pipeline's own copy (``stoker.workers.processes.start_helper``).

Hostile ``stoker``, ``numpy`` and ``socket`` modules, each writing a marker file when imported,
are planted in the script's current directory and in a ``PYTHONPATH`` entry the script sets
after it started. The pipeline runs with two chain workers and the reader's I/O helper; its
batches must equal those of an in-process pipeline, and no marker may appear.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from generated_images import write_class_folders
from reliability_images import jpeg_bytes, photo

import stoker

pytestmark = [pytest.mark.timeout(180),
              pytest.mark.skipif(not hasattr(os, "memfd_create") or not sys.platform.startswith("linux"),
                                 reason="the helper processes need memfd (Linux)")]

STOKER_ROOT = str(Path(stoker.__file__).resolve().parent.parent)

SCRIPT = textwrap.dedent('''
    import json, os, sys, time
    import numpy as np
    import stoker.fn as fn
    import stoker.types as types
    from stoker import pipeline_def, settings

    root, hostile_path = sys.argv[1], sys.argv[2]
    os.environ["PYTHONPATH"] = hostile_path  # added after this process started

    def make():
        @pipeline_def(batch_size=8, num_threads=2, device_id=None, seed=7)
        def p():
            jpegs, labels = fn.readers.file(file_root=root, random_shuffle=True, name="reader")
            images = fn.decoders.image_random_crop(jpegs, device="cpu", output_type=types.RGB)
            images = fn.resize(images, resize_x=40, resize_y=32)
            images = fn.crop_mirror_normalize(images, dtype=types.FLOAT, output_layout="CHW",
                                              mean=[128.0] * 3, std=[64.0] * 3, mirror=fn.random.coin_flip())
            return images, labels
        pipe = p()
        pipe.build()
        return pipe

    os.environ.update(STOKER_CPU_PROCESSES="2", STOKER_READER_PROCESS="1")
    settings.reload()  # (a setting is read once: this process may have used these already)
    pipe = make()
    got, deadline = [], time.monotonic() + 90
    while True:  # until the workers (ready after importing stoker and torch) computed batches
        out, labels = pipe.run()
        got.append((out.as_array().copy(), labels.as_array().copy()))
        workers = pipe._executor._chain_workers
        if workers is not None and workers.batches_done >= 2 and len(got) >= 4:
            break
        if time.monotonic() > deadline:
            sys.exit("the chain workers computed no batch")
        time.sleep(0.05)
    helpers = [w.proc.pid for w in workers.workers]
    reader = pipe._graph.instance("reader")._worker
    helpers.append(reader.proc.pid if reader is not None else None)
    info = {"batches_done": workers.batches_done, "helpers": []}
    for pid in helpers:
        if pid is None:
            info["helpers"].append(None)
            continue
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = dict(e.split(b"=", 1) for e in f.read().split(b"\\0") if b"=" in e)
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().decode().split("\\0")
        info["helpers"].append({"argv": argv, "env": {k.decode(): v.decode() for k, v in env.items()
                                                      if k.endswith(b"_THREADS") or k.endswith(b"THREADS_NUM")}})
    pipe.close()

    os.environ.update(STOKER_CPU_PROCESSES="0", STOKER_READER_PROCESS="0")
    settings.reload()
    ref = make()
    for k, (images, labels) in enumerate(got):
        r_images, r_labels = ref.run()
        assert np.array_equal(images, r_images.as_array()), f"batch {k} differs from the in-process one"
        assert np.array_equal(labels, r_labels.as_array())
    ref.close()
    info["batches"] = len(got)
    print("INFO", json.dumps(info))
''')

HOSTILE = '''
import os
with open({marker!r}, "a") as f:
    f.write("{where}:{name} imported in process %d\\n" % os.getpid())
'''


def _plant(folder: Path, where: str, marker: Path) -> None:
    """Hostile ``stoker`` and ``numpy`` packages and a ``socket`` module in ``folder``."""
    for name in ("stoker", "numpy"):
        (folder / name).mkdir(parents=True)
        (folder / name / "__init__.py").write_text(HOSTILE.format(marker=str(marker), where=where, name=name))
    (folder / "socket.py").write_text(HOSTILE.format(marker=str(marker), where=where, name="socket"))


def test_helpers_import_nothing_from_cwd_or_a_later_pythonpath(tmp_path):
    marker = tmp_path / "marker.txt"
    cwd, later_path, scripts, data = (tmp_path / n for n in ("cwd", "later_path", "scripts", "data"))
    _plant(cwd, "cwd", marker)
    _plant(later_path, "PYTHONPATH", marker)
    scripts.mkdir()
    script = scripts / "run.py"  # not in the current directory: the pipeline's own process is sound
    script.write_text(SCRIPT)
    data.mkdir()
    write_class_folders(data, 12, lambda c, i: jpeg_bytes(photo(60, 80, seed=10 * c + i)))

    env = dict(os.environ, PYTHONPATH=STOKER_ROOT)
    for key in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OPENCV_FOR_THREADS_NUM"):
        env[key] = "8"  # the workers get 1 whatever the pipeline's process has
    res = subprocess.run([sys.executable, str(script), str(data), str(later_path)], cwd=cwd, env=env,
                         capture_output=True, text=True, timeout=150)
    planted = marker.read_text() if marker.exists() else ""
    assert not planted, f"planted modules ran in stoker's helper processes:\n{planted}"
    assert res.returncode == 0, res.stderr[-3000:]
    info = json.loads(next(line for line in res.stdout.splitlines() if line.startswith("INFO"))[5:])
    assert info["batches_done"] >= 2 and info["batches"] >= 4
    *workers, reader = info["helpers"]
    assert len(workers) == 2 and reader is not None, info
    for helper in [*workers, reader]:
        assert "-I" in helper["argv"][1:3], helper["argv"]  # isolated mode
    for w in workers:
        for key in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OPENCV_FOR_THREADS_NUM"):
            assert w["env"].get(key) == "1", (key, w["env"])


def test_decode_helpers_ignore_a_later_pythonpath(tmp_path, monkeypatch):
    """The mixed decoders' JPEG helpers (a script run by path) take numpy from the pipeline's
    import path, not from a PYTHONPATH entry set later."""
    from stoker.operators.decoders import turbo

    if not turbo.available():
        pytest.skip("no TurboJPEG 3 library")
    from stoker.operators.decoders.mixed.helper_processes import DecodeProcesses

    marker = tmp_path / "marker.txt"
    _plant(tmp_path / "later_path", "PYTHONPATH", marker)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "later_path"))
    monkeypatch.chdir(tmp_path / "later_path")
    procs = DecodeProcesses(1, 1, turbo.library_path(), pin=False)
    try:
        data = np.frombuffer(jpeg_bytes(photo(40, 56, seed=3)), np.uint8)
        window, out_bytes = (4, 8, 20, 30), 20 * 30 * 3  # (y, x, h, w): decoded into the slot's start
        lease = procs.lease(out_bytes + data.size)
        lease.view[out_bytes:out_bytes + data.size] = data
        pending = procs.submit(lease, [(out_bytes, data.size, *window, 0)])
        assert pending.failed() == []
        want = turbo.decode_window(data, window)
        np.testing.assert_array_equal(lease.view[:out_bytes].reshape(want.shape), want)
        assert "-I" in procs.helpers[0].proc.args[1:3]
    finally:
        procs.close()
    planted = marker.read_text() if marker.exists() else ""
    assert not planted, f"planted modules ran in the decode helper:\n{planted}"
