"""A script that never calls ``close()`` exits cleanly: exit code 0, no C++ abort, no helper
process left behind.

The bug this guards: the Getting Started script (README, CPU variant) aborted at exit in 6 of
10 runs with "terminate called without an active exception" (exit code 134). A daemon stage
thread was inside OpenCV with the GIL released when the interpreter finalized; coming back, it
was ended by pthread_exit, whose unwinding through OpenCV's C++ frames called std::terminate.
Pipelines are now closed by an atexit hook before finalization (``stoker.pipeline.pipeline``).

Each case runs the README's pipeline (file reader -> random-crop decode -> resize ->
crop_mirror_normalize) in a fresh interpreter, 20 runs in all, four at a time (about 30 s on 2
cores). The images are photo-sized so that the stage thread spends most of its time in native
code when the main thread exits: before the fix 8 and 9 of the 20 runs failed in two tries
(aborts, segfaults, and helper tracebacks on Ctrl-C).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from generated_images import write_class_folders
from reliability_images import jpeg_bytes, photo

import stoker

pytestmark = [pytest.mark.timeout(240),
              pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc; memfd helpers")]

# The stoker under test, for the child interpreters (its folder's parent on their PYTHONPATH).
STOKER_ROOT = str(Path(stoker.__file__).resolve().parent.parent)

SCRIPT = textwrap.dedent('''
    import gc, os, signal, sys
    import stoker.fn as fn
    import stoker.types as types
    from stoker import pipeline_def

    mode, threads, root = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    if mode == "sigterm_exit":  # what a training script that handles SIGTERM does
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))

    @pipeline_def(batch_size=16, num_threads=threads, device_id=None, seed=42)
    def train_pipeline(root):
        jpegs, labels = fn.readers.file(file_root=root, random_shuffle=True, name="reader")
        images = fn.decoders.image_random_crop(jpegs, device="cpu", output_type=types.RGB)
        images = fn.resize(images, resize_x=224, resize_y=224)
        images = fn.crop_mirror_normalize(images, dtype=types.FLOAT, output_layout="CHW",
                                          mean=[0.485 * 255, 0.456 * 255, 0.406 * 255],
                                          std=[0.229 * 255, 0.224 * 255, 0.225 * 255],
                                          mirror=fn.random.coin_flip())
        return images, labels

    def children():
        me = str(os.getpid())
        out = []
        for pid in os.listdir("/proc"):
            try:
                with open(f"/proc/{pid}/stat") as f:
                    if pid.isdigit() and f.read().rsplit(")", 1)[1].split()[1] == me:
                        out.append(pid)
            except (OSError, IndexError):
                pass
        return out

    pipe = train_pipeline(root)
    if mode.startswith("torch"):
        from stoker.plugin.pytorch import DALIClassificationIterator, LastBatchPolicy
        batches = (b[0]["data"] for b in DALIClassificationIterator(
            pipe, reader_name="reader", last_batch_policy=LastBatchPolicy.PARTIAL, auto_reset=True))
    else:
        pipe.build()
        batches = iter(lambda: pipe.run()[0], None)
    for i, batch in enumerate(batches):
        assert len(batch) == 16
        if i == 2:
            print("CHILDREN", *children(), flush=True)
            if mode == "raise":
                raise RuntimeError("boom in the training loop")
            if mode.startswith("sig"):
                print("READY", flush=True)  # the test sends SIGTERM now; the loop goes on
                continue
            break
    if mode.endswith("_gc"):  # dropped without close(): closed by garbage collection
        del batches, pipe
        gc.collect()
    print("DONE", flush=True)
''')

# (mode, num_threads, STOKER_CPU_PROCESSES, runs)
CASES = [
    ("run", 1, "0", 4),
    ("torch", 1, "0", 4),
    ("run", 4, "0", 2),  # 4 threads: the thread pool, and the reader's I/O helper process
    ("torch", 4, "2", 2),  # 2 chain worker processes
    ("run_gc", 1, "0", 2),
    ("raise", 1, "2", 2),
    ("sigterm_exit", 1, "2", 2),
    ("sigterm_default", 2, "2", 1),
    ("sigint_group", 4, "2", 1),  # Ctrl-C in a terminal: SIGINT to the script and its helpers
]


@pytest.fixture(scope="module")
def script_and_data(tmp_path_factory):
    base = tmp_path_factory.mktemp("clean_exit")
    script = base / "getting_started.py"
    script.write_text(SCRIPT)
    data = base / "data"
    data.mkdir()
    write_class_folders(data, 24, lambda c, i: jpeg_bytes(photo(480, 640, seed=100 * c + i)))
    return str(script), str(data)


def _run(script: str, data: str, mode: str, threads: int, processes: str):
    """Run one case; returns (exit code, stdout, stderr, helper pids the script had)."""
    env = dict(os.environ, PYTHONPATH=STOKER_ROOT, STOKER_CPU_PROCESSES=processes)
    # The torch modes also resize through torch's kernel (an opt-in), so that an exit inside it is
    # covered; the others resize with Pillow (the default): no torch to import in script or workers.
    env["STOKER_TORCH_RESIZE"] = "1" if mode.startswith("torch") else "0"
    proc = subprocess.Popen([sys.executable, script, mode, str(threads), data], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
    head = ""
    if mode.startswith("sig"):
        for line in proc.stdout:  # wait until the training loop is under way
            head += line
            if line.startswith("READY"):
                time.sleep(0.3)
                if mode == "sigint_group":
                    os.killpg(proc.pid, signal.SIGINT)
                else:
                    proc.send_signal(signal.SIGTERM)
                break
    try:
        out, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        err += "\n(test: timed out)"
    out = head + out
    return proc.returncode, out, err, _children_line(out)


def _children_line(out: str) -> list[int] | None:
    for line in out.splitlines():
        if line.startswith("CHILDREN"):
            return [int(p) for p in line.split()[1:]]
    return None


def _gone(pid: int, within: float = 5.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True  # exited; its parent is gone, so init reaps it
        except (FileNotFoundError, ProcessLookupError):
            return True
        time.sleep(0.05)
    return False


def test_getting_started_script_exits_cleanly(script_and_data):
    script, data = script_and_data
    shm_before = set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()
    runs = [(mode, threads, procs) for mode, threads, procs, n in CASES for _ in range(n)]
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda r: (r, _run(script, data, *r)), runs))
    failures = []
    for (mode, threads, procs), (rc, out, err, children) in results:
        what = f"{mode} threads={threads} STOKER_CPU_PROCESSES={procs}: exit code {rc}"
        # (an uncaught KeyboardInterrupt ends Python by SIGINT)
        expected = {"raise": 1, "sigterm_default": -signal.SIGTERM, "sigint_group": -signal.SIGINT}.get(mode, 0)
        if rc != expected or "terminate called" in err:
            failures.append(f"{what} (expected {expected}); stderr: {err.strip()[-600:]}")
            continue
        if mode in ("raise", "sigint_group"):
            # The script's own error, once: no traceback from a helper process.
            own = "boom in the training loop" if mode == "raise" else "KeyboardInterrupt"
            if own not in err or err.count("Traceback") != 1:
                failures.append(f"{what}: expected one traceback ({own}) on stderr: {err.strip()[-1500:]}")
        if children is None:
            failures.append(f"{what}: the script did not reach its third batch; stdout: {out!r}")
            continue
        if procs != "0" and len(children) < int(procs):
            failures.append(f"{what}: expected {procs} chain workers, the script had {children}")
        left = [pid for pid in children if not _gone(pid)]
        if left:
            failures.append(f"{what}: helper processes {left} still running after the script ended")
    shm_after = set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()
    assert not failures, f"{len(failures)} of {len(runs)} runs did not end cleanly:\n" + "\n".join(failures)
    assert shm_after <= shm_before, f"shared memory left in /dev/shm: {sorted(shm_after - shm_before)}"


LATE_HANDLER_SCRIPT = r'''
import atexit, sys
import numpy as np
import stoker.fn as fn
from stoker import pipeline_def


@pipeline_def(batch_size=4, num_threads=2, device_id=None, seed=1)
def pipe():
    return fn.random.uniform(range=(0.0, 1.0), shape=(8,))


p = pipe()
p.build()
p.run()
import json  # a library imported after stoker registers its own handler later (CuPy does)


def library_teardown():
    # What a library's teardown would free must no longer be in use by the pipeline's threads.
    ex = p._executor
    print("TEARDOWN closed=%s" % (ex is None or ex._closed), flush=True)


atexit.register(library_teardown)
print("RAN", flush=True)
'''


def test_pipelines_close_before_atexit_handlers_registered_after_stoker(tmp_path):
    """atexit runs the last-registered handler first: a library imported after stoker (CuPy)
    would tear down its state while a stage thread still uses it. stoker's exit hook moves itself
    to the front at interpreter shutdown, so the pipeline is closed before such a handler runs."""
    script = tmp_path / "late_handler.py"
    script.write_text(LATE_HANDLER_SCRIPT)
    env = dict(os.environ, PYTHONPATH=STOKER_ROOT, STOKER_CPU_PROCESSES="0")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "RAN" in done.stdout
    assert "TEARDOWN closed=True" in done.stdout, done.stdout
