"""Two CPU-stage threads taking turns where order matters, for pipelines whose CPU stage waits.

Why: in a GPU pipeline whose CPU stage sends batch operators to the helper process
(:mod:`stoker.pipeline.batch_offload`: ``random_bbox_crop``, ``box_encoder``), one CPU-stage
thread sits idle while the helper computes, and the CPU stage sets the pipeline's pace (the SSD
pipeline: ``random_bbox_crop`` alone was a third of its time, benchmarks/RESULTS.md).
With two threads ("lanes"), iteration i+1's CPU work runs while iteration i waits for the helper.

What stays in order (one lane at a time, by schedule order, :class:`Turns`):

* the *advance* turn: the sources pick the batch's samples, the readers and external sources
  produce it, and the source state for checkpoints is taken: every bit of state that carries
  from one iteration to the next;
* the *hand-over* turn: the GPU nodes' host halves (a mixed decoder stages its engines' call and
  its helpers' share) and the put on the GPU stage's queue, so the GPU stage and the decoders see
  iterations in order.

Between the two, the other CPU operators of two iterations may run at once. They are stateless
between batches (random values come from counter-based streams keyed by the iteration and the
sample), so results are bit-identical to one lane (tests/pipeline/test_cpu_lanes.py).

Used only where nothing else depends on the order of the middle part: no skip / substitute
bookkeeping (refills advance the sources from the middle), no per-sample masks, and stages not
serialised. ``STOKER_CPU_LANES`` (1-4) overrides; auto: 2 exactly when the batch-operator
helper runs, which in turn is started by default exactly where two lanes can run: the helper
alone, with one lane waiting for it, made the SSD pipeline slower (benchmarks/RESULTS.md).
"""

from __future__ import annotations

import contextlib
import threading

from stoker import settings
from stoker.errors import StokerError
from stoker.pipeline import deferred_offload, fusion

MAX_LANES = 4  # (each lane holds an iteration: more than the prefetch depth would only wait)


def start(ex, marker) -> int:
    """Start executor ``ex``'s CPU-stage lanes when it gets more than one (:func:`lane_count`);
    returns the count (1: none started, the executor runs its plain CPU worker)."""
    lanes = lane_count(ex)
    if lanes > 1:
        turns, steps = Turns(lambda: ex.closed), split_source_steps(ex)
        stop = LaneStop(ex, lanes, marker)
        for k in range(lanes):
            ex.start_thread(lambda: run_lane(ex, turns, *steps, stop), f"stoker-cpu-stage-{k}")
    return lanes


def lanes_possible(ex) -> bool:
    """Whether executor ``ex`` can run two lanes (see the module docstring for the conditions)."""
    if not ex.asynchronous or not ex.graph.gpu_nodes or settings.get().serial_stages:
        return False
    return not (ex.tracker.active or ex.tracker.mask_nodes)


def lane_count(ex) -> int:
    """How many CPU-stage threads executor ``ex`` runs (1: the plain worker)."""
    if not lanes_possible(ex):
        return 1
    wanted = settings.get().cpu_lanes
    if wanted is not None:
        return max(1, min(MAX_LANES, wanted))
    return 2 if ex.batch_offload is not None else 1


class Turns:
    """Sections that iterations enter one at a time, in their schedule order (``it.seq``)."""

    def __init__(self, closed):
        self._cv = threading.Condition()
        self._next: dict[str, int] = {}
        self._closed = closed  # () -> bool: stop waiting once the executor closes

    @contextlib.contextmanager
    def turn(self, name: str, seq: int):
        with self._cv:
            while self._next.get(name, 0) != seq:
                if self._closed():
                    raise StokerError("the pipeline was closed")
                self._cv.wait(0.1)
        try:
            yield
        finally:
            with self._cv:
                self._next[name] = seq + 1
                self._cv.notify_all()


def split_source_steps(ex) -> tuple[list, list]:
    """The CPU steps of the sources (run in the advance turn) and the others."""
    ids = {n.id for n in ex.graph.source_nodes}
    sources = [s for s in ex.cpu_steps if getattr(s, "id", None) in ids]
    return sources, [s for s in ex.cpu_steps if getattr(s, "id", None) not in ids]


def run_lane(ex, turns: Turns, source_steps: list, other_steps: list, stop) -> None:
    """One CPU-stage thread: iterations from ``ex.next_scheduled()`` through the three parts; ``stop()`` is
    called when the executor's stop marker comes."""
    while True:
        it = ex.next_scheduled()
        if it is stop.marker:
            stop()
            return
        try:
            with turns.turn("advance", it.seq):
                _advance(ex, it, source_steps)
            it.deferred = []  # (a batch operator's helper answer may wait for the hand-over)
            if it.error is None and not ex.closed:
                _middle(ex, it, other_steps)
            with turns.turn("hand", it.seq):
                if it.error is None and not ex.closed:
                    _hand_over(ex, it)
                deferred_offload.collect(ex, it)
                if ex.closed and it.error is None:
                    it.error = StokerError("the pipeline was closed")
                ex.hand_on(it)
        except StokerError as e:  # closed while waiting for a turn: the stage threads are ending
            it.error = e
            deferred_offload.collect(ex, it)  # (a helper it holds is free again for the other lane)
            ex.hand_on(it)


def _advance(ex, it, source_steps: list) -> None:
    if ex.closed:
        it.error = StokerError("the pipeline was closed")
        return
    if ex.ended:
        it.error = StopIteration()
        return
    try:
        ex.advance_sources(it, ex.batch_size)
        fusion.run_steps(ex, source_steps, it)
        it.state = ex.graph.source_state(it.index + 1)
    except StopIteration as e:
        ex.ended = True
        it.error = e
    except BaseException as e:  # noqa: BLE001 - handed to the consumer, who re-raises
        it.error = e


def _middle(ex, it, other_steps: list) -> None:
    try:
        fusion.run_steps(ex, other_steps, it)
    except BaseException as e:  # noqa: BLE001 - handed to the consumer, who re-raises
        it.error = e


def _hand_over(ex, it) -> None:
    try:
        ex.prepare_gpu_nodes(it)
    except BaseException as e:  # noqa: BLE001 - handed to the consumer, who re-raises
        it.error = e


class LaneStop:
    """Counts the lanes that met the stop marker; the last one passes it to the GPU stage."""

    def __init__(self, ex, lanes: int, marker):
        self.ex, self.left, self.marker = ex, lanes, marker
        self._lock = threading.Lock()

    def __call__(self) -> None:
        with self._lock:
            self.left -= 1
            last = self.left == 0
        if last:
            self.ex.hand_on(self.marker)
