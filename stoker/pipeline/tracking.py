"""Per-sample bookkeeping of an iteration when bad samples are skipped or substituted.

With ``on_error="raise"`` a batch is simply the next ``batch_size`` samples of
the readers' streams. With "skip"/"substitute" samples leave the batch and
others take their place, so the executor keeps, for every sample of the
batch:

* its *ordinal*: its rank among the samples taken from the sources in this
  iteration (take order; refills continue the count), which puts substitutes
  back in the position of the sample they replace;
* for every reader that walks its data set in passes (``readers/_order.py``),
  its *mark* ``(pass, real)``: the reader's pass (epoch) it was read in, and
  whether it is a real sample or ``pad_last_batch`` padding. The framework
  iterators end their epochs on these marks (see
  :mod:`stoker.plugin._pass_tracking`), so that skipped files do not make the
  epochs drift against the reader's passes;
* its validity: False for a substitute (``fn.valid_mask()``).

Readers with ``pad_last_batch`` never let a batch cross into the next pass:
when skipped samples leave a pass's last batch short, it is padded with the
pass's last good sample, as the reader pads its passes. Every pass then starts
on a batch boundary and every good sample is delivered exactly once per pass,
whatever the last-batch policy of the iterator.

A framework iterator given ``reader_name`` asks the same of a reader without
``pad_last_batch`` (:meth:`Tracker.bound_passes`): otherwise the tail of a
pass's last batch is the head of the next pass, which ``PARTIAL`` cut off and
``DROP`` dropped (issue 17: up to a batch of good files missing per epoch, in
no report) and ``FILL`` delivered in the wrong epoch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from stoker.errors import PipelineBuildError


class ReaderPasses:
    """The pass structure of one reader, from its ``meta()`` (DALI's reader metadata) and
    ``state()`` (``{"epoch", "position"}``): the rules of :class:`ShardedOrder`."""

    def __init__(self, reader, batch_size: int):
        from stoker.operators.readers._order import ShardedOrder

        meta = reader.meta()
        self.reader = reader
        self.order = ShardedOrder(int(meta["epoch_size"]), num_shards=int(meta["number_of_shards"]),
                                  shard_id=int(meta["shard_id"]), stick_to_shard=bool(meta["stick_to_shard"]),
                                  pad_last_batch=bool(meta["pad_last_batch"]), batch_size=batch_size)
        self.padded = bool(meta["pad_last_batch"])

    @staticmethod
    def of(reader, batch_size: int) -> ReaderPasses | None:
        """A ReaderPasses for ``reader`` if it walks passes, else None."""
        try:
            state = reader.state()
            if not {"epoch", "position"} <= set(state):
                return None
            return ReaderPasses(reader, batch_size)
        except (KeyError, TypeError, ValueError, NotImplementedError):
            return None

    def position(self) -> tuple[int, int]:
        st = self.reader.state()
        return int(st["epoch"]), int(st["position"])

    def room(self) -> int:
        """Samples left in the current pass (the reader's position is never at a pass's end)."""
        epoch, position = self.position()
        return self.order.pass_length(epoch) - position

    def padding_left(self) -> int:
        """Samples left in the current pass if they are all padding, else 0."""
        epoch, position = self.position()
        lo, hi = self.order.shard_range(self.order.shard_of_pass(epoch))
        return self.room() if position >= hi - lo else 0

    def marks(self, start: tuple[int, int], count: int) -> list[tuple[int, bool]] | None:
        """``(pass, real)`` of ``count`` samples taken from ``start``; None if the reader's position
        afterwards says it does not follow these rules."""
        epoch, position = start
        out: list[tuple[int, bool]] = []
        while len(out) < count:
            length = self.order.pass_length(epoch)
            if length <= 0:
                epoch, position = epoch + 1, 0
                if epoch > start[0] + count + 1:
                    return None
                continue
            lo, hi = self.order.shard_range(self.order.shard_of_pass(epoch))
            stop = min(length, position + count - len(out))
            out.extend((epoch, q < hi - lo) for q in range(position, stop))
            position = stop
            if position == length:
                epoch, position = epoch + 1, 0
        return out if (epoch, position) == self.position() else None


@dataclass
class Track:
    """The bookkeeping of one iteration (see the module docstring)."""

    slots: list = field(default_factory=list)  # ordinal of each sample of the batch, in batch order
    taken: int = 0  # samples taken from the sources so far in this iteration
    marks: dict = field(default_factory=dict)  # reader name -> {ordinal: (pass, real)}
    substitutes: list = field(default_factory=list)  # ordinals of samples to substitute in place
    target: int = 0  # samples the batch should hold
    valid: list | None = None  # per sample, after repair: False for substitutes
    pass_start: int | None = None  # pass the iteration began in (padded readers)

    def child(self) -> Track:
        return Track(taken=self.taken, pass_start=self.pass_start)

    def merge(self, sub: Track) -> None:
        self.slots.extend(sub.slots)
        self.taken = sub.taken
        self.pass_start = sub.pass_start
        for name, m in sub.marks.items():
            self.marks.setdefault(name, {}).update(m)
        self.substitutes.extend(sub.substitutes)

    def sample_marks(self) -> dict[str, list]:
        """Per reader: the ``(pass, real)`` mark of each sample of the batch, in batch order."""
        return {name: [m.get(o, (None, False)) for o in self.slots] for name, m in self.marks.items()}

    def is_padding(self, ordinal: int) -> bool:
        """Whether the sample is pad_last_batch padding (a repeat of its pass's last sample)."""
        return any(ordinal in m and not m[ordinal][1] for m in self.marks.values())

    def epoch_of(self, ordinal: int) -> int | None:
        for m in self.marks.values():
            if ordinal in m:
                return m[ordinal][0]
        return None


class Tracker:
    """What the executor needs to keep per-sample bookkeeping for a graph (one per executor)."""

    def __init__(self, graph, batch_size: int, on_error: str):
        from stoker.operators.base import Reader

        self.graph = graph
        policies = {on_error} | {n.args.get("on_error") for n in graph.nodes if n.args.get("on_error")}
        self.active = bool(policies - {"raise"})
        self._batch_size = batch_size
        self._reader_nodes = [n for n in graph.source_nodes if self.active
                              and isinstance(graph.instances[n.id], Reader)]
        self._readers: dict[str, ReaderPasses] | None = None
        self._bounded: set[str] = set()  # readers whose batches end with their passes (bound_passes)
        self.padded: list[ReaderPasses] = []  # readers whose passes end on a batch boundary
        self.can_skip = False  # the sources may be advanced without using their samples (all readers)
        self.mask_nodes = [n for n in graph.nodes if getattr(graph.instances[n.id], "valid_mask", False)]
        mask_ids = {n.id for n in self.mask_nodes}
        for node in graph.cpu_nodes:
            for x in [*node.inputs, *node.arg_inputs.values()]:
                if x.source.id in mask_ids:
                    raise PipelineBuildError(
                        f"valid_mask() at {x.source.origin} feeds {node.describe()}: the mask is known only "
                        "once the batch is complete, so use it as a pipeline output (or after .gpu())")

    @property
    def readers(self) -> dict[str, ReaderPasses]:
        """The readers that walk passes, by name (made on first use: a lazy_init reader lists its
        files then)."""
        if self._readers is None:
            found = {n.instance_name: ReaderPasses.of(self.graph.instances[n.id], self._batch_size)
                     for n in self._reader_nodes}
            self._readers = {name: rp for name, rp in found.items() if rp is not None}
            self._find_padded()
        return self._readers

    def _find_padded(self) -> None:
        self.padded = [rp for name, rp in self._readers.items() if rp.padded or name in self._bounded]

    def bound_passes(self, name: str) -> bool:
        """End the batches of reader ``name`` where its passes end, as ``pad_last_batch`` does (the
        short last batch of a pass is padded with its last good sample, marked as padding), so that
        no batch holds samples of two passes. Asked by the framework iterators given ``reader_name``,
        whose epochs are the reader's passes. Returns False where the reader does not walk passes."""
        if name not in self.readers:
            return False
        self._bounded.add(name)
        self._find_padded()
        return True

    def room(self) -> int:
        """Samples an advance may take without crossing a padded reader's pass."""
        return min(rp.room() for rp in self.padded)

    def advance(self, it, advance, count: int, has_samples: bool) -> int:
        """Call ``advance(k)`` (the sources' advance) for up to ``count`` samples and record their
        ordinals and marks; returns k. ``has_samples``: the batch already holds good samples."""
        tr = it.track
        take = count
        if self.readers and self.padded and self.can_skip:  # (refilling and padding need readers only)
            # A padded reader's pass ends on a batch boundary: take no sample of the next pass
            # into this batch (it is padded instead), unless it has no sample to pad with.
            left = self.padded[0].padding_left()
            if not has_samples and left:
                advance(left)  # skipped samples moved the padding into a batch of its own: drop it
            epoch = self.padded[0].position()[0]
            if tr.pass_start is None or (epoch != tr.pass_start and not has_samples):
                tr.pass_start = epoch
            take = 0 if epoch != tr.pass_start else min(count, self.room())
        if take == 0:
            return 0
        starts = {name: rp.position() for name, rp in self.readers.items()}
        advance(take)
        for name, rp in self.readers.items():
            marks = rp.marks(starts[name], take)
            if marks is not None:
                tr.marks.setdefault(name, {}).update(zip(range(tr.taken, tr.taken + take), marks))
        tr.slots.extend(range(tr.taken, tr.taken + it.batch_size))
        tr.taken += take
        return take


def complete_batch(it, pad: int, take) -> None:
    """Finish a repaired batch: substitutes go back where the samples they replace were, and
    ``pad`` copies of the batch's last sample end it (a padded reader's pass ended). Sets
    ``it.track.valid``. ``take(batch, indices)`` picks samples of a batch."""
    tr = it.track
    good = list(tr.slots)
    n = len(good)
    if n == 0 or (not tr.substitutes and not pad):
        return
    order = sorted(good + tr.substitutes)
    pos = {o: k for k, o in enumerate(good)}
    donors = [pos[o] if o in pos else _donor(o, good, tr) for o in order]
    last = order[-1]
    extra = list(range(tr.taken, tr.taken + pad))
    for m in tr.marks.values():
        epoch = m.get(last, (tr.pass_start, True))[0]
        m.update((o, (epoch, False)) for o in extra)
    donors += [donors[-1]] * pad
    tr.taken += pad
    for key, value in list(it.values.items()):
        if len(value) == n:
            it.values[key] = take(value, donors)
    tr.valid = [o in pos for o in order] + [True] * pad
    tr.slots = order + extra
    it.batch_size = len(tr.slots)


def _donor(ordinal: int, good: list, tr: Track) -> int:
    """The sample that stands in for ``ordinal``: the nearest good sample before it in take order
    from the same pass (else after it; else any), so the choice is deterministic."""
    epoch = tr.epoch_of(ordinal)
    same = [k for k, g in enumerate(good) if tr.epoch_of(g) == epoch] or list(range(len(good)))
    before = [k for k in same if good[k] < ordinal]
    return before[-1] if before else same[0]


def fill_masks(it, mask_nodes) -> None:
    """Set the outputs of ``fn.valid_mask()`` from the finished batch's validity."""
    import numpy as np

    from stoker.tensors import TensorListCPU

    valid = it.track.valid if it.track is not None and it.track.valid is not None else [True] * it.batch_size
    for node in mask_nodes:
        it.values[(node.id, 0)] = TensorListCPU([np.array(v, dtype=np.bool_) for v in valid])
