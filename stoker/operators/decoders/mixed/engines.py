"""The hardware engines' side of a batch: its output buffer and the one nvJPEG call.

:class:`OutputBuffer` is the batch's flat device buffer, allocated by the first decode job that
runs; :func:`engines_job` stages the call in the CPU stage and returns the job the decoder's
thread runs; :func:`engines_refusal` redoes a refused call's images on the host in the CPU
stage under ``on_error`` skip/substitute.
"""
from __future__ import annotations

import threading
import time

from stoker.operators.decoders.mixed.common import check_cpu_failures, cpu_one, cupy_mod, raises_on_error


def _release(semaphore, held: list) -> None:
    if held:
        held.clear()
        semaphore.release()


class Cancelled(Exception):
    """A decode job whose batch was dropped (or whose decoder closed) before it ran."""


class OutputBuffer:
    """A batch's flat output buffer, allocated by the first decode job that runs, once fewer
    than ``STOKER_DECODES_AHEAD`` (default 2) earlier batches hold theirs: the executor's CPU
    stage prepares batches ahead, and a decoded full-size batch is the largest thing a pipeline
    keeps on the device. The permit returns when the batch's decode has been handed on (or the
    batch is dropped)."""

    def __init__(self, st, nbytes: int, stream, device_id: int):
        import weakref

        self.st, self.nbytes, self.stream, self.device_id = st, nbytes, stream, device_id
        self.buf = self.start = None
        self.cancelled = False
        self.lock = threading.Lock()
        self._held: list = []
        self.release = weakref.finalize(self, _release, st.ahead, self._held)

    def get(self, permit: bool = True):
        """(buffer, event recorded on the pipeline stream after its allocation).

        Decode jobs take a permit first (they run in batch order on the decoder's thread);
        the GPU stage of a batch without decode jobs allocates without one, since waiting
        there for later batches to finish would never end."""
        with self.lock:
            if self.cancelled:
                raise Cancelled()
            if self.buf is None:
                while permit and not self.st.ahead.acquire(timeout=0.1):
                    if self.st.closing or self.cancelled:
                        raise Cancelled()
                if permit:
                    self._held.append(True)
                cp = cupy_mod()
                with cp.cuda.Device(self.device_id), self.stream:
                    # On the pipeline's stream: memory CuPy's pool hands back was last used by work
                    # already queued there, and every decode is ordered after this point.
                    self.buf = cp.empty(self.nbytes, cp.uint8)
                    self.start = cp.cuda.Event(disable_timing=True)
                    self.start.record(self.stream)
            return self.buf, self.start

    def cancel(self) -> None:
        """The batch was dropped before its GPU stage (a sample failed and it is prepared
        again): its jobs skip their work and the permit returns now."""
        self.cancelled = True
        self.release()


def engines_job(st, arrays, win_arr, idx, out, offsets, stream, n, clock, located=None):
    """The hardware engines' call for samples ``idx`` on the state's lane (decoder, own stream or
    None, lock), padded to ``n`` images: returns the job, which returns (error or None, done
    event or None). The call's start and end go to ``clock``. ``win_arr``: the batch's windows
    as an (N, 4) array; ``located``: its samples' (addresses, sizes), if known."""
    from stoker.backend.nvjpeg import NvjpegUnavailable

    cp = cupy_mod()
    decoder, own_stream, lock = st.lane
    windows = win_arr[idx].reshape(-1, 4)
    dst = offsets[idx]
    where = None if located is None else (located[0][idx], located[1][idx])
    # The call's arguments are built here, in the CPU stage: the decoder's thread then runs next to
    # no Python between calls, so the engines do not idle while it waits for the GIL.
    try:
        call, staging_error = decoder.stage([arrays[i] for i in idx], windows, fixed_batch=n, located=where), None
    except NvjpegUnavailable as e:
        call, staging_error = None, e

    def job():
        if staging_error is not None:
            return staging_error, None
        t0 = time.perf_counter()
        try:
            buf, start = out.get()
        except Cancelled:
            decoder.discard(call)
            return None, None
        on, done = stream, None
        if own_stream is not None:  # a lane with its own stream: it waits for the allocation point
            own_stream.wait_event(start)
            on = own_stream
        t_call = time.perf_counter()
        try:
            with lock:
                # (the host waits for ``start`` first: the engines do not wait for the stream)
                decoder.run(call, buf.data.ptr + dst, on, ready=start)
            error = None
        except NvjpegUnavailable as e:
            error = e
        if own_stream is not None:
            done = cp.cuda.Event(disable_timing=True)
            done.record(own_stream)
        st.stats.engines_call(clock, len(idx), t0, t_call, time.perf_counter(),
                              decoder.last_run if error is None else None)
        return error, done

    return job


def engines_refusal(op, kind, batch, enc, heads, wins, arg_inputs, job, hw_idx) -> dict | None:
    """Under ``on_error="skip"``/``"substitute"``, wait here (in the CPU stage) for the engines'
    call. When nvJPEG refused it (a file whose header is fine but whose entropy data is not),
    its images are decoded on the pool now, so that the bad one is recorded in
    ``batch.failures`` and dropped before the GPU stage, where nothing can be dropped any more.
    Returns {sample: future of its image} of those redone, or None. Under "raise" nothing waits."""
    if job is None or raises_on_error(op, batch):
        return None
    if job.result()[0] is None or not hw_idx:
        return None

    def one(i):
        return cpu_one(op, kind, batch, enc, heads, wins, arg_inputs, False, i)

    futures = [batch.pool.submit(one, i) for i in hw_idx] if batch.pool else None
    if futures is None:
        from concurrent.futures import Future

        futures = []
        for i in hw_idx:
            f = Future()
            try:
                f.set_result(one(i))
            except Exception as e:  # noqa: BLE001 - recorded below like a pool task's error
                f.set_exception(e)
            futures.append(f)
    check_cpu_failures(op, batch, hw_idx, futures)
    return dict(zip(hw_idx, futures))
