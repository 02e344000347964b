"""Closing an executor whose CPU stage runs ahead of a GPU stage held by the consumer (stage
queues full) must end both stage threads at once. The stages are stubbed (no GPU here): what is
exercised is the hand-over between the stage threads, the GPU stage's permits and close()."""

import contextlib
import queue
import threading
import time

import pytest

from stoker.pipeline.executor import Executor


def _stub_executor(cpu_queue: int, gpu_queue: int, split: bool = False) -> Executor:
    ex = Executor.__new__(Executor)
    ex.asynchronous, ex._closed, ex._pending, ex._seq = True, False, 0, 0
    ex._out, ex._in = queue.Queue(), queue.Queue()
    ex._mid = queue.Queue(maxsize=gpu_queue)
    ex._gpu_outputs = threading.Semaphore(max(1, gpu_queue - 1))
    ex._threads, ex._lock, ex._stage_lock = [], threading.Lock(), contextlib.nullcontext()
    ex._close_lock = threading.Lock()
    ex.pool, ex._chain_workers = None, None
    ex.graph = type("Graph", (), {"gpu_nodes": [object()]})()
    ex._run_cpu_stage = lambda it: None
    ex._run_gpu_stage = lambda it, nodes=None, finish=True: None
    ex.start_thread(ex._cpu_worker, "cpu-stage")
    if split:  # the GPU stage on two threads (stage_setup.split_gpu_nodes)
        ex._gpu_parts, ex._gpu_mid = ([object()], [object()]), queue.Queue(maxsize=1)
        ex.start_thread(lambda: ex._gpu_worker(1), "gpu-stage")
        ex.start_thread(lambda: ex._gpu_worker(2), "gpu-ops")
    else:
        ex.start_thread(ex._gpu_worker, "gpu-stage")
    return ex


@pytest.mark.parametrize("split", [False, True], ids=["one GPU thread", "split GPU stage"])
@pytest.mark.parametrize("cpu_queue,gpu_queue", [(2, 2), (3, 2), (1, 1)])
def test_close_with_full_stage_queues_ends_both_stage_threads(cpu_queue, gpu_queue, split):
    ex = _stub_executor(cpu_queue, gpu_queue, split)
    for i in range(cpu_queue + gpu_queue):  # what Pipeline schedules first
        ex.schedule({}, i)
    ex.pop()
    ex.schedule({}, 99)  # and then one per output taken, as an iterator does
    time.sleep(0.3)  # the GPU stage now waits for the consumer, the CPU stage on a full queue
    t0 = time.monotonic()
    ex.close()
    assert time.monotonic() - t0 < 5.0
    assert not any(t.is_alive() for t in ex._threads)
