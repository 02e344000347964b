"""Batch-wide CPU operators run in a helper process, off the pipeline's interpreter lock.

Why: some CPU-stage operators compute the whole batch in NumPy steps on small arrays
(``random_bbox_crop``'s search, ``box_encoder``'s matching). Their time is mostly Python between
NumPy calls, so in the pipeline's process they hold the GIL for most of it: the GPU stage, the
decoders' threads and the reader then wait, and the CPU stage itself waits for them. In an SSD
pipeline on an H100 these two operators took 13.7 and 8.4 ms of wall time per batch of 256 in the
pipeline's process, against 7.4 and 5.8 ms on an idle core, and set its pace.

An operator class opts in with ``offload_cpu = True`` (its instance must pickle, and its
``run_cpu`` must not depend on the thread pool or state kept between batches). The executor then
sends each batch's inputs to one helper process, which runs the same operator instance on them
and sends the outputs back; the pipeline's CPU stage thread waits on a socket, without the GIL.
The helper computes what the pipeline would (same instance, same arguments, same counter-based
random streams), so the outputs are the same to the bit. Until the helper has started, when it
fails, or when a sample fails in it, the batch is computed in the pipeline's process as before, so
errors, skips and reports are exactly those of that path.
"""

from __future__ import annotations

import logging
import pickle
import queue
import socket
import sys
import threading

from stoker import settings
from stoker.workers.messages import ready_came, recv_msg, send_msg, send_ready
from stoker.workers.processes import start_helper, stop_helper

_log = logging.getLogger("stoker")

# The batch's fields a helper needs to rebuild its BatchContext (no pool: it runs on one thread).
_CONTEXT_FIELDS = ("batch_size", "iteration", "epoch", "sources", "on_error", "index_offset", "sample_ids")
# One thread per library in the helper: it runs one batch at a time, beside the pipeline's threads.
_SINGLE_THREADED = {name: "1" for name in (
    "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS", "BLIS_NUM_THREADS")}


def _serve(sock: socket.socket) -> None:
    """The helper: operator instances arrive once, then batches to run; each answer is the
    outputs, or "redo" (a sample failed or anything went wrong: the pipeline computes it)."""
    import stoker.operators
    from stoker.operators.base import BatchContext

    stoker.operators.load_all()
    send_ready(sock)  # until then the pipeline computes these batches itself
    ops: dict = {}
    while True:
        try:
            kind, *payload = recv_msg(sock)
        except (EOFError, ConnectionError):
            return
        if kind == "op":
            key, blob = payload
            ops[key] = pickle.loads(blob)
            continue
        key, fields, inputs, arg_inputs = payload
        ctx = BatchContext(**fields)
        try:
            outs = ops[key].run_cpu(ctx, inputs, arg_inputs)
            reply = ("ok", list(outs)) if not ctx.failures else ("redo",)
        except Exception:  # noqa: BLE001 - the pipeline computes the batch again and reports it
            reply = ("redo",)
        try:
            send_msg(sock, reply)
        except (OSError, pickle.PicklingError):
            send_msg(sock, ("redo",))


class _Connection:
    """One helper process and what the pipeline knows of it."""

    def __init__(self):
        self.proc, self.sock = start_helper(["-m", "stoker.pipeline.batch_offload"],
                                            env={**settings.child_environ(), **_SINGLE_THREADED})
        self.ready = False
        self.sent: set = set()  # keys of the operator instances this helper holds


class BatchOffload:
    """Helper processes running the opted-in operators' batches (see the module docstring): one
    per CPU-stage lane (stoker.pipeline.cpu_lanes), each batch going to whichever is free."""

    def __init__(self, helpers: int = 1):
        self.conns: list[_Connection] = []
        try:
            for _ in range(max(1, helpers)):
                self.conns.append(_Connection())
        except OSError:
            self.close()
            raise
        self._idle: queue.SimpleQueue = queue.SimpleQueue()
        for conn in self.conns:
            self._idle.put(conn)
        self.broken = False
        self._count_lock = threading.Lock()
        self.offloaded = 0  # batches the helpers computed (for tests and benchmarks)

    @property
    def proc(self):
        """The first helper's process (tests stop it to check the fall-back)."""
        return self.conns[0].proc

    def _ready(self, conn: _Connection) -> bool:
        """Whether ``conn``'s helper has started (its ready byte has come); never waits."""
        if not conn.ready and not self.broken:
            try:
                conn.ready = ready_came(conn.sock)
            except EOFError:
                self._give_up("it exited before it was ready")
                return False
        return conn.ready

    def is_ready(self) -> bool:
        """Whether every helper has started; never waits."""
        return all(self._ready(conn) for conn in self.conns)

    def run(self, inst, batch, inputs: list, arg_inputs: dict):
        """The operator's outputs for this batch computed by a helper, or None where the
        pipeline's process should compute them."""
        pending = self.submit(inst, batch, inputs, arg_inputs)
        return None if pending is None else self.result(pending)

    def submit(self, inst, batch, inputs: list, arg_inputs: dict):
        """Send the batch to a free helper (waiting for one to be free) and return at once: a
        handle for :meth:`result`, which must be called once, or None where the pipeline's process
        should compute the batch."""
        if self.broken:
            return None
        key = id(inst)
        fields = {name: getattr(batch, name) for name in _CONTEXT_FIELDS}
        fields["sources"] = list(fields["sources"])
        conn = self._idle.get()  # (a free helper; each is used by one thread at a time)
        try:
            if not self._ready(conn):
                self._idle.put(conn)
                return None
            if key not in conn.sent:
                send_msg(conn.sock, ("op", key, pickle.dumps(inst, protocol=pickle.HIGHEST_PROTOCOL)))
                conn.sent.add(key)
            send_msg(conn.sock, ("run", key, fields, inputs, arg_inputs))
        except (OSError, EOFError, pickle.PicklingError, TypeError, AttributeError) as e:
            self._give_up(f"{type(e).__name__}: {e}")
            self._idle.put(conn)
            return None
        return conn

    def result(self, conn):
        """The outputs of the batch :meth:`submit` sent to helper ``conn`` (waiting for them), or
        None where the pipeline's process should compute them."""
        try:
            reply = recv_msg(conn.sock)
        except (OSError, EOFError, pickle.PicklingError, TypeError, AttributeError) as e:
            self._give_up(f"{type(e).__name__}: {e}")
            return None
        finally:
            self._idle.put(conn)
        if reply[0] != "ok":
            return None
        with self._count_lock:
            self.offloaded += 1
        return reply[1]

    def _give_up(self, why: str) -> None:
        if not self.broken:
            _log.warning("stoker: the batch-operator helper process failed (%s); computing those "
                         "operators in the pipeline's process", why)
        self.broken = True

    def close(self) -> None:
        for conn in self.conns:
            if not conn.ready and conn.proc.poll() is None:
                conn.proc.kill()  # still importing: it holds nothing yet
            stop_helper(conn.proc, conn.sock)


if __name__ == "__main__":
    _serve(socket.socket(fileno=int(sys.argv[1])))
