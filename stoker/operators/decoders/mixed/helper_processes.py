"""Random-crop JPEG decoding in helper processes: the mixed decoders' CPU share, without the GIL.

Why: the GPU training pipeline is held back by the hardware JPEG engines (one
call per batch of 256 takes 13-22 ms on an H100), so a share of each batch
should decode on the host at the same time, as DALI's ``hw_decoder_load`` splits
it. Decoding that share on the pipeline's own thread pool made the pipeline
almost three times slower (a quarter of each batch, on an H100): every
libjpeg-turbo call hands the GIL back and forth with the pipeline's Python
threads. Here a few helper processes decode with their own GIL each.

Data path: per batch, the pipeline takes a *slot* (an anonymous shared memory
file, mapped in every process and registered with CUDA as pinned memory),
copies the share's encoded bytes behind the slot's output region, and sends each
helper a list of jobs (where the bytes are, the crop window, where the pixels
go). Helpers decode the window with libjpeg-turbo (``turbo.decode_window``, the
same function and pixels as the CPU decoder) straight into the output region;
the GPU stage then uploads the region with one copy. A job that cannot be done
(the library refused the file) is reported back and decoded in the pipeline's
process instead, where its error is raised or reported as usual.

The helper is this file run as a script; it loads ``turbo.py`` and
``stoker/workers/messages.py`` (message framing) by path, so it starts without
importing stoker's operators or CUDA. :class:`DecodeProcesses` is the pipeline-side
handle; its slots are :class:`stoker.workers.slots.PinnedSlot`.
"""

from __future__ import annotations

import collections
import importlib.util
import mmap
import os
import queue
import socket
import sys
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from stoker.workers.slots import PinnedSlot

_HERE = os.path.dirname(os.path.abspath(__file__))
_DECODERS = os.path.dirname(_HERE)  # stoker/operators/decoders: turbo.py
_MESSAGES = os.path.join(os.path.dirname(os.path.dirname(_DECODERS)), "workers", "messages.py")


def _load(name: str, path: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def turbo_suitable(data) -> bool:
    """Whether libjpeg-turbo decodes this JPEG to the same RGB pixels as the CPU decoder: a JPEG
    ending with its end marker, 1 or 3 components, Huffman-coded (baseline or progressive), and
    without EXIF (whose orientation the CPU decoder applies)."""
    from stoker.backend.nvjpeg import has_end_marker, jpeg_frame

    frame = jpeg_frame(data) if len(data) >= 4 and has_end_marker(data) else None
    # baseline, extended or progressive Huffman (not lossless or arithmetic-coded), 8-bit
    return frame is not None and frame[0] in (0xC0, 0xC1, 0xC2) and frame[1] == 8 and frame[4] in (1, 3)


# --- the helper process ------------------------------------------------------------------------

def _serve(sock: socket.socket, threads: int) -> None:
    import time
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np

    messages = _load("_stoker_workers_messages", _MESSAGES)
    turbo = _load("_stoker_turbo", os.path.join(_DECODERS, "turbo.py"))
    # Below the pipeline's own threads (the thread feeding the JPEG engines above all), which
    # must not wait for a core while the helpers decode.
    from stoker import settings  # (the helper imports stoker: stoker.workers.processes.start_helper)

    nice = settings.get().cpu_decode_nice
    if nice:
        os.nice(nice)
    cores = settings.external_env("_STOKER_DECODE_AFFINITY", "")
    if cores:  # before any thread starts: the pool's threads inherit it
        os.sched_setaffinity(0, {int(c) for c in cores.split(",")})
    maps: dict[int, tuple] = {}  # slot id -> (mmap, uint8 view)
    pool = ThreadPoolExecutor(threads)
    replies: queue.SimpleQueue = queue.SimpleQueue()  # (futures of one batch, start time), in order
    replier = threading.Thread(target=_reply_in_order, args=(sock, messages, replies), daemon=True)
    replier.start()
    messages.send_ready(sock)  # the pipeline sends work only from now on

    def run(view, job) -> bool:
        src, length, y, x, h, w, dst = job
        img = turbo.decode_window(view[src:src + length], (y, x, h, w))
        if img is None or img.shape != (h, w, 3):
            return False
        view[dst:dst + img.nbytes] = img.reshape(-1)
        return True

    while True:
        try:
            _, fds, (kind, slot, payload) = messages.recv_tagged(sock)
        except (EOFError, ConnectionError):
            return
        if kind == "map":  # a new slot: its file descriptor came with the message
            old = maps.pop(slot, None)
            if old is not None:
                old[0].close()
            mm = mmap.mmap(fds[0], payload, flags=mmap.MAP_SHARED)
            os.close(fds[0])
            maps[slot] = (mm, np.frombuffer(mm, np.uint8))
            continue
        view = maps[slot][1]
        started = time.perf_counter()  # CLOCK_MONOTONIC: the pipeline's clock too
        replies.put(([pool.submit(run, view, job) for job in payload], started))


def _reply_in_order(sock, messages, replies) -> None:
    """Send each batch's answer once its jobs are done, in the order the batches came. Why a
    thread: the receiving loop then hands the next batch's jobs to the pool at once, so the pool's
    threads start on it while the previous batch's last (largest) images finish, instead of
    idling until the whole batch is done (half the helpers' threads were idle so on an H100)."""
    import time

    while True:
        item = replies.get()
        if item is None:
            return
        futures, started = item
        failed = [k for k, f in enumerate(futures) if f.exception() is not None or not f.result()]
        try:
            messages.send_msg(sock, (failed, started, time.perf_counter()))
        except OSError:  # the pipeline went away
            return


# --- the pipeline side -------------------------------------------------------------------------

def _allowed_cores() -> list[int] | None:
    """The cores this process's pipelines use (its affinity, or its rank's share of it:
    stoker.pipeline.host_cores), or None where that cannot be asked (not Linux)."""
    from stoker.pipeline.host_cores import rank_cores

    return rank_cores()


def default_spare_cores() -> int:
    """Cores kept free of the helpers by default: a quarter of those allowed, from 8 up."""
    n = len(_allowed_cores() or ()) or os.cpu_count() or 1
    return n // 4 if n >= 8 else 0


def helper_cores(spare: int) -> list[int] | None:
    """The cores the helpers may run on: all this process may use but its first ``spare``, or
    None (no restriction) when that would leave the helpers fewer than two.

    Why: nvJPEG's call for the engines is mostly a host thread that submits work and sleeps
    until the engines answer, many times per batch. With the helpers' threads on every core, each
    wake-up waits for a core: replayed on an H100 beside 16 busy processes, the same calls took
    15.9 ms instead of 8.4 (8 busy processes: 9.1 ms), and in the pipeline they took 12.5 ms
    while the helpers kept 9.3 of the 16 cores busy. Cores the helpers never use keep those
    wake-ups (and the pipeline's other threads) prompt."""
    allowed = _allowed_cores()
    if allowed is None or spare <= 0 or len(allowed) - spare < 2:
        return None
    return allowed[spare:]


class Lease:
    """A slot lent to one batch. It goes back to the free list once this object is dropped and
    every helper has answered for it (helpers may still write into it after a batch is called off)."""

    def __init__(self, owner: DecodeProcesses, slot: PinnedSlot):
        self.owner, self.slot = owner, slot
        self.view, self.ptr = slot.view, slot.ptr

    def __del__(self):
        self.owner._give_back(self.slot)


class Pending:
    """The helpers' work for one batch; :meth:`failed` waits for it."""

    def __init__(self, lease: Lease, parts: list):
        self.lease = lease
        self.parts = parts  # (helper, positions of its jobs in the batch's job list)
        self.answers: dict[int, list] = {}
        self.spans: dict[int, tuple] = {}  # part -> (started, finished) on the helper's clock
        self.sent: list[tuple] = []  # (helper, part) of the parts whose jobs went out
        self.event = threading.Event()

    def failed(self) -> list[int]:
        """Positions (in the job list) of the jobs the helpers could not do."""
        for helper, _ in self.parts:
            helper.wait_for(self)
        out = []
        for k, (_, positions) in enumerate(self.parts):
            out += [positions[j] for j in self.answers.get(k, [])]
        return sorted(out)

    def span(self) -> tuple[float, float]:
        """(first start, last finish) of the helpers' work on this batch (``time.perf_counter``
        seconds, the same clock in every process); call after :meth:`failed`."""
        spans = list(self.spans.values()) or [(0.0, 0.0)]
        return min(a for a, _ in spans), max(b for _, b in spans)


class _Helper:
    def __init__(self, threads: int, library: str, cores: list[int] | None = None):
        from stoker import settings
        from stoker.workers import messages
        from stoker.workers.processes import start_helper

        # The helper loads the library this process found, on the cores it is given.
        env = settings.child_environ(turbojpeg_lib=library)
        env["_STOKER_DECODE_AFFINITY"] = ",".join(map(str, cores or ()))
        self.proc, self.sock = start_helper([os.path.abspath(__file__)], [str(threads)], env=env)
        self.send_lock, self.recv_lock = threading.Lock(), threading.Lock()
        self.mapped: dict[int, int] = {}  # slot key -> capacity the helper has mapped
        self.waiting: collections.deque = collections.deque()  # (pending, part index), in send order
        self.messages = messages
        self.ready = False

    def is_ready(self, wait: bool = False) -> bool:
        """Whether the helper has started (its ready byte has come), waiting for it if asked."""
        if self.ready:  # without the lock: the GPU stage may hold it while it waits for answers
            return True
        with self.recv_lock:
            if not self.ready and self.messages.ready_came(
                    self.sock, wait, "a decode helper process exited before it was ready"):
                self.ready = True
        return self.ready

    def send(self, slot: PinnedSlot, jobs: list, pending: Pending, part: int) -> None:
        with self.send_lock:
            if self.mapped.get(slot.key) != slot.capacity:  # M: a new slot, its descriptor with the tag
                self.messages.send_tagged(self.sock, b"M", ("map", slot.key, slot.capacity), [slot.fd])
                self.mapped[slot.key] = slot.capacity
            self.waiting.append((pending, part))
            pending.sent.append((self, part))
            self.messages.send_tagged(self.sock, b"J", ("jobs", slot.key, jobs))

    def wait_for(self, pending: Pending) -> None:
        """Read answers in order until ``pending``'s have come (earlier ones belong to batches
        sent before, possibly called off). Whether they have is read from ``pending`` itself, not
        by a scan of ``waiting``, which the CPU stage's sends append to meanwhile (a scan then
        raised "deque mutated during iteration" in the GPU stage)."""
        self.is_ready(wait=True)
        with self.recv_lock:
            while any(h is self and k not in pending.answers for h, k in list(pending.sent)):
                failed, started, finished = self.messages.recv_msg(self.sock)
                done, part = self.waiting.popleft()
                done.answers[part] = failed
                done.spans[part] = (started, finished)

    def close(self) -> None:
        from stoker.workers.processes import stop_helper

        stop_helper(self.proc, self.sock)


class DecodeProcesses:
    """``processes`` helper processes of ``threads`` decoding threads each, decoding with the
    libjpeg-turbo at ``library`` (``turbo.library_path()``), on ``cores`` only when given
    (:func:`helper_cores`). Slots are registered with CUDA as pinned memory unless ``pin`` is False."""

    def __init__(self, processes: int, threads: int, library: str, pin: bool = True,
                 cores: list[int] | None = None):
        self.helpers = [_Helper(threads, library, cores) for _ in range(processes)]
        self.pin = pin
        self.free: list[PinnedSlot] = []
        self.slots: list[PinnedSlot] = []
        self.lock = threading.Lock()
        self.closed = False
        self.next_key = 0

    def lease(self, nbytes: int) -> Lease:
        """A slot of at least ``nbytes`` for one batch."""
        with self.lock:
            fitting = [s for s in self.free if s.capacity >= nbytes]
            if fitting:
                slot = min(fitting, key=lambda s: s.capacity)
                self.free.remove(slot)
                return Lease(self, slot)
            if self.free:  # replace a free slot that is too small rather than keep one more
                old = self.free.pop(0)
                self.slots.remove(old)
                old.close()
            from stoker.workers.slots import PinnedSlot

            self.next_key += 1  # never reused: a helper keeps its mapping of a key until told otherwise
            slot = PinnedSlot(self.next_key, max(nbytes + nbytes // 4, 8 << 20), self.pin)
            self.slots.append(slot)
        return Lease(self, slot)

    def _give_back(self, slot: PinnedSlot) -> None:
        with self.lock:
            if not self.closed and slot in self.slots and slot not in self.free:
                self.free.append(slot)

    def submit(self, lease: Lease, jobs: list) -> Pending:
        """Send ``jobs`` [(src offset, length, y, x, h, w, dst offset)] (offsets in the slot) to the
        helpers, split by encoded size."""
        order = sorted(range(len(jobs)), key=lambda k: -jobs[k][1])
        loads = [0] * len(self.helpers)
        split: list[list[int]] = [[] for _ in self.helpers]
        for k in order:  # largest first to the least loaded helper
            h = loads.index(min(loads))
            split[h].append(k)
            loads[h] += jobs[k][1]
        parts = [(helper, positions) for helper, positions in zip(self.helpers, split) if positions]
        pending = Pending(lease, parts)
        for part, (helper, positions) in enumerate(parts):
            helper.send(lease.slot, [jobs[k] for k in positions], pending, part)
        return pending

    def alive(self) -> bool:
        return all(h.proc.poll() is None for h in self.helpers)

    def ready(self) -> bool:
        """Whether every helper has started. The pipeline's first batches do not wait for them
        (the pool decodes meanwhile), so the helpers cost the first batch no time."""
        return all(h.is_ready() for h in self.helpers)

    def close(self) -> None:
        for helper in self.helpers:
            helper.close()
        with self.lock:
            self.closed = True
            for slot in self.slots:
                slot.close()
            self.slots, self.free = [], []


if __name__ == "__main__":
    _serve(socket.socket(fileno=int(sys.argv[1])), int(sys.argv[2]))
