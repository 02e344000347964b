"""Leak checks: building, running and closing a pipeline many times returns to the same threads and
roughly the same memory.

RSS is read from /proc/self/status (VmRSS; psutil is not a dependency). The
bound allows for allocator fragmentation and caches that fill once (OpenCV,
NumPy); a real leak of the decoded batches (~100 KiB per cycle here) or of the
pools would exceed it within 100 cycles.
"""

from __future__ import annotations

import gc
import sys
import threading

import pytest
from generated_images import write_class_folders
from reliability_images import jpeg_bytes, photo

import stoker.fn as fn
from stoker import pipeline_def, types

CYCLES = 100
RSS_GROWTH_LIMIT_MB = 24  # over CYCLES cycles, after a warm-up
pytestmark = [pytest.mark.timeout(120),
              pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")]


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    raise RuntimeError("no VmRSS in /proc/self/status")


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """16 small JPEGs in 2 classes, plus one corrupt file so that the skip path runs too."""
    root = write_class_folders(tmp_path_factory.mktemp("leak_data"), 8,
                               lambda c, i: jpeg_bytes(photo(48, 64, seed=8 * c + i)),
                               broken=(1, jpeg_bytes(photo())[:50]))
    return str(root)


def _cycle(root: str, k: int) -> None:
    @pipeline_def(batch_size=4, num_threads=2, device_id=None, seed=k, on_error="skip",
                  prefetch_queue_depth=2)
    def p():
        jpegs, labels = fn.readers.file(file_root=root, random_shuffle=True)
        images = fn.decoders.image(jpegs, output_type=types.RGB)
        images = fn.resize(images, resize_x=32, resize_y=24)
        return fn.crop_mirror_normalize(images, dtype=types.FLOAT, mean=[128.0] * 3, std=[64.0] * 3), labels

    pipe = p()
    pipe.build()
    for _ in range(3):
        out, labels = pipe.run()
        assert len(out) == 4
    pipe.close()


def _baseline_threads() -> int:
    """Threads alive once earlier pipelines' closing has finished: a pipeline dropped without
    close() closes on a short-lived thread of its own (Pipeline.__del__)."""
    for _ in range(250):
        if not any(t.name == "stoker-close" for t in threading.enumerate()):
            break
        threading.Event().wait(0.02)
    return threading.active_count()


def _settled_threads(baseline: int) -> int:
    for _ in range(100):
        n = threading.active_count()
        if n <= baseline:
            return n
        threading.Event().wait(0.02)
    return threading.active_count()


def test_build_run_close_100_times_leaks_no_threads_or_memory(dataset):
    for k in range(10):  # warm-up: lazy imports, OpenCV/NumPy caches, the allocator's arenas
        _cycle(dataset, k)
    gc.collect()
    threads0, rss0 = _baseline_threads(), rss_mb()
    peak_threads = threads0
    for k in range(CYCLES):
        _cycle(dataset, 100 + k)
        peak_threads = max(peak_threads, _settled_threads(threads0))
    gc.collect()
    growth = rss_mb() - rss0
    assert _settled_threads(threads0) == threads0, f"threads: {threads0} before, {threading.active_count()} after"
    assert peak_threads == threads0, "a closed pipeline left threads running"
    assert growth < RSS_GROWTH_LIMIT_MB, f"RSS grew {growth:.1f} MB over {CYCLES} build/run/close cycles"


def test_unclosed_pipelines_are_released_by_garbage_collection(dataset):
    """A pipeline dropped without close() stops its threads when collected."""
    gc.collect()
    baseline = _baseline_threads()

    @pipeline_def(batch_size=4, num_threads=2, device_id=None, seed=0, on_error="skip")
    def p():
        jpegs, _ = fn.readers.file(file_root=dataset)
        return fn.decoders.image(jpegs)

    for _ in range(5):
        pipe = p()
        pipe.build()
        pipe.run()
        del pipe
        gc.collect()
    assert _settled_threads(baseline) == baseline


def test_dropping_a_busy_pipeline_does_not_wait_for_its_threads():
    """Garbage collection may run a pipeline's finalizer on any thread, even one that holds a lock
    the pipeline's own threads wait for; so dropping a pipeline must not join its threads there.
    Here the CPU stage is stuck in a source callback while the pipeline is dropped: the drop
    returns at once, and the threads still end once the callback returns."""
    import time

    import numpy as np

    gate = threading.Event()
    gc.collect()
    baseline = _baseline_threads()

    def source(info):
        if info.iteration > 0:
            gate.wait(20)
        return [np.full((2, 2), info.iteration, np.uint8)]

    @pipeline_def(batch_size=1, num_threads=2, device_id=None, prefetch_queue_depth=2)
    def p():
        return fn.external_source(source=source, batch=True, batch_info=True)

    pipe = p()
    pipe.build()
    (out,) = pipe.run()
    assert int(out.as_array().max()) == 0
    time.sleep(0.1)  # the CPU stage is now waiting in iteration 1's callback
    t0 = time.monotonic()
    del pipe, out
    gc.collect()
    assert time.monotonic() - t0 < 2.0
    gate.set()
    assert _settled_threads(baseline) == baseline


def test_collecting_a_closed_pipeline_closes_nothing_again(dataset, monkeypatch):
    """close() once, then garbage collection: the operators are not closed a second time (and no
    closing thread starts for it)."""

    @pipeline_def(batch_size=4, num_threads=2, device_id=None, seed=0, on_error="skip")
    def p():
        jpegs, _ = fn.readers.file(file_root=dataset)
        return fn.decoders.image(jpegs)

    pipe = p()
    pipe.build()
    pipe.run()
    closes = []
    for inst in pipe._graph.instances.values():
        if hasattr(inst, "close"):
            original = inst.close
            monkeypatch.setattr(inst, "close", lambda original=original: (closes.append(1), original())[1])
    pipe.close()
    closed_once = len(closes)
    started = threading.Thread.start
    spawned = []
    monkeypatch.setattr(threading.Thread, "start", lambda self: (spawned.append(self.name), started(self))[1])
    del pipe
    gc.collect()
    assert closed_once > 0 and len(closes) == closed_once
    assert "stoker-close" not in spawned
