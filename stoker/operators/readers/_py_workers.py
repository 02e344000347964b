"""Worker processes for ``external_source(parallel=True)``.

The user's callback reaches each worker once, through the pool's initializer:
with the "fork" start method it is inherited (so lambdas and closures work, as
in DALI); with "spawn" it must be picklable. Tasks then carry only the
SampleInfo/BatchInfo values to compute.
"""

from __future__ import annotations

import multiprocessing
from concurrent.futures import Future, ProcessPoolExecutor

_source = None  # the callback, in each worker process

STOP = "__stoker_stop_iteration__"  # returned instead of raising StopIteration across processes


def _init(source) -> None:
    global _source
    _source = source


def _run_samples(infos: list) -> list | str:
    out = []
    for info in infos:
        try:
            out.append(_source(info))
        except StopIteration:
            return STOP
    return out


def _run_batch(arg) -> object:
    try:
        return _source(arg)
    except StopIteration:
        return STOP


class WorkerPool:
    """A process pool bound to one callback."""

    def __init__(self, source, num_workers: int, start_method: str):
        ctx = multiprocessing.get_context(start_method or "fork")
        self.num_workers = max(1, int(num_workers))
        self._pool = ProcessPoolExecutor(self.num_workers, mp_context=ctx, initializer=_init,
                                         initargs=(source,))

    def start(self) -> None:
        """Start the processes now (before the pipeline starts its threads, which matters for fork)."""
        self._pool.submit(int, 0).result()

    def samples(self, infos: list) -> list[Future]:
        """Compute per-sample calls, split into one chunk per worker; futures in order."""
        n = len(infos)
        chunks = max(1, min(self.num_workers, n))
        bounds = [n * c // chunks for c in range(chunks + 1)]
        return [self._pool.submit(_run_samples, infos[bounds[c]:bounds[c + 1]]) for c in range(chunks)]

    def batch(self, arg) -> Future:
        return self._pool.submit(_run_batch, arg)

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
