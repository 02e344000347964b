"""``fn.experimental.inputs.video``: stream the frames of long encoded videos, fed from Python, as
batches of sequences over many iterations.

As DALI's: an input operator (no graph inputs) fed with ``Pipeline.feed_input(name, videos)`` (or
``pipe.run(name=videos)``), where a video is the encoded bytes of a whole file (uint8, 1-D). Fed
videos wait in the operator's queue and are streamed one after the other: each iteration gives the
next ``batch_size`` sequences of ``sequence_length`` consecutive frames, FHWC uint8 RGB, of the
current video; a batch never mixes two videos, so a video's last batch may be smaller. A video of
``n`` frames gives ``ceil(n / sequence_length)`` sequences; with ``last_sequence_policy="partial"``
(default) the last one holds the ``n % sequence_length`` remaining frames, with ``"pad"`` it is
completed with zero frames. Running with no frames left to stream is an error, as in DALI
(``blocking=True`` is accepted but stoker never waits: feed before running).

Frames are decoded in order by one decoder per video (:class:`.pyav.FrameStream`): each frame once,
never the whole video in memory. Demuxing the video (no decoding) when its turn comes gives its
frame count.

Differences from DALI 2.4:

* A fed batch may hold several videos: they are queued in order (DALI uses only the first).
* Fed data reaches the operator with the iteration scheduled next (as external_source's): data
  fed while iterations are already scheduled ahead (``prefetch_queue_depth``) serves the first
  one not yet scheduled. A scheduled iteration that finds no frames fails ("no video left to
  stream"), and the pipeline goes on with the next once fed (DALI's pipeline is then unusable).
  With the default prefetch_queue_depth=2 each run schedules the iteration after it: feed the
  next video before the current one runs out, or use prefetch_queue_depth=1.
* A video that cannot be opened, demuxed or decoded is a sample error: ``on_error="raise"``
  stops with an error naming the video ("fed video 3"); ``"skip"`` reports it
  (``Pipeline.error_report``) and goes on with the next queued video in the same iteration (DALI
  stops the pipeline). A decoding error in mid-video drops the sequence it hit and the rest of
  that video.
* ``device="mixed"`` decodes on the CPU (in the GPU stage, through ``gpu_registry.host_fallback``)
  and copies the batch to the GPU: there is no NVDEC path yet. The GPU stage has no on_error
  skipping, so there a bad video stops the pipeline.
* ``blocking``, ``affine`` and ``bytes_per_sample_hint`` are accepted and have no effect;
  checkpoints hold no state of this operator (fed data is not part of them).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from stoker.errors import StokerError, arg_error
from stoker.operators.base import SAMPLE_ERRORS, Operator
from stoker.operators.schema import REQUIRED, Arg, Schema, register
from stoker.operators.video import pyav
from stoker.tensors import TensorListCPU, to_numpy

POLICIES = ("partial", "pad")


@dataclass
class _Video:
    """One fed video in the queue, and how far it has been streamed."""

    data: np.ndarray
    where: str  # "fed video 3", for error messages and source info
    info: pyav.ClipInfo | None = None
    stream: pyav.FrameStream | None = None
    next_seq: int = 0
    sequences: int = 0
    failed: bool = False  # decoding failed in mid-video: the rest is dropped


@dataclass
class _Plan:
    """One iteration's samples: sequences ``(video, first, stop)`` or failed videos ``(video, error)``."""

    items: list = field(default_factory=list)


@register
class VideoInput(Operator):
    """Streams fed encoded videos as batches of sequences (``fn.experimental.inputs.video``)."""

    schema = Schema(
        name="experimental.inputs.video",
        doc="Streams and decodes videos fed with Pipeline.feed_input (encoded bytes, one video per sample; fed "
            "videos are queued): each iteration gives the next batch of sequences of sequence_length consecutive "
            "frames, (F, H, W, 3) uint8 RGB, layout 'FHWC', of the current video (a batch never mixes videos). "
            "The last sequence of a video is shorter ('partial') or padded with zero frames ('pad'). CPU decoding "
            "through PyAV (FFmpeg); 'mixed' copies the frames to the GPU.",
        args=[
            Arg("sequence_length", "int", REQUIRED, doc="frames per sequence"),
            Arg("last_sequence_policy", "str", "partial",
                doc="the last sequence of a video: 'partial' (fewer frames) or 'pad' (zero frames added)"),
            Arg("affine", "bool", True, doc="accepted for compatibility (thread pinning of the mixed backend)"),
            Arg("blocking", "bool", False, doc="accepted for compatibility: stoker never waits for feed_input, "
                                                "running with no video left is an error"),
            Arg("no_copy", "bool", False, doc="keep the fed arrays instead of copying them (do not modify them "
                                               "until they are streamed)"),
        ],
        inputs=(0, 0),
        devices=("cpu", "mixed"),
    )

    parallel_samples = False  # one decoder per video reads the sequences in order

    def setup(self) -> None:
        pyav.require_av()
        a = self.args
        self.label = self.schema.name + (f" '{a['name']}'" if a.get("name") else "")
        if isinstance(a["sequence_length"], bool) or a["sequence_length"] < 1:
            raise arg_error(self.schema.name, "sequence_length", f"must be at least 1, got {a['sequence_length']}")
        if a["last_sequence_policy"] not in POLICIES:
            raise arg_error(self.schema.name, "last_sequence_policy",
                            f"must be 'partial' or 'pad', got {a['last_sequence_policy']!r}")
        self._queue: deque[_Video] = deque()
        self._current: _Video | None = None
        self._fed = 0  # videos fed so far (numbers them)
        self.max_batch_size = 1
        self.last_batch_size = None
        self._policy = a.get("on_error")
        self.needs_feed = False  # an iteration needs no new feed while the queue holds frames

    def bind_pipeline(self, pipe) -> None:
        """Called at build: the batch size (sequences per iteration) and the error policy."""
        self.max_batch_size = pipe.batch_size
        self._policy = self.args.get("on_error") or getattr(pipe, "on_error", "raise")

    def output_layouts(self, input_layouts):
        return ["FHWC"]

    # --- feeding ---------------------------------------------------------------------------
    def feed(self, data, layout=None, cuda_stream=None) -> list[np.ndarray]:
        """Check the videos given to feed_input / run(name=...): one encoded video per sample."""
        if isinstance(data, (bytes, bytearray, memoryview)):
            samples = [data]
        elif isinstance(data, TensorListCPU):
            samples = list(data.samples())
        elif isinstance(data, (list, tuple)):
            samples = list(data)
        else:
            try:
                arr = to_numpy(data)
            except (TypeError, ValueError, RuntimeError):
                raise TypeError(f"{self.label}: feed a list of encoded videos (uint8 1-D arrays or bytes), got "
                                f"{type(data).__name__}") from None
            samples = [arr] if arr.ndim == 1 else list(arr)
        if not samples:
            raise ValueError(f"{self.label}: feed_input got no video (an empty batch)")
        out = []
        for k, s in enumerate(samples):
            if isinstance(s, (bytes, bytearray, memoryview)):
                arr = np.frombuffer(s, np.uint8)
            else:
                try:
                    arr = to_numpy(s)
                except (TypeError, ValueError, RuntimeError):
                    raise TypeError(f"{self.label}: sample {k}: an encoded video must be a uint8 1-D array or "
                                    f"bytes, got {type(s).__name__}") from None
            if arr.dtype != np.uint8 or arr.ndim != 1:
                raise TypeError(f"{self.label}: sample {k}: an encoded video must be a uint8 1-D array (the "
                                f"file's bytes, e.g. np.fromfile(path, np.uint8)), got {arr.dtype} {arr.shape}")
            out.append(arr if self.args["no_copy"] else np.array(arr, copy=True))
        return out

    # --- planning (in iteration order) ----------------------------------------------------------
    def advance(self, batch):
        """The samples of the next iteration: up to batch_size sequences of the current video."""
        for data in batch.prepared or ():
            self._queue.append(_Video(data, f"fed video {self._fed}"))
            self._fed += 1
        plan = _Plan()
        cur = self._current_video(plan)
        if cur is not None:
            take = min(max(self.max_batch_size, 1), cur.sequences - cur.next_seq)
            n, length = cur.info.frames, self.args["sequence_length"]
            for q in range(cur.next_seq, cur.next_seq + take):
                plan.items.append((cur, q * length, min((q + 1) * length, n)))
            cur.next_seq += take
        elif not plan.items:
            raise StokerError("no video left to stream: feed one with "
                              f"pipe.feed_input({self.args.get('name') or '<name>'!r}, [encoded video]) (or "
                              "pass it to run() by name) before running; fed videos are streamed one after "
                              "another")
        self.last_batch_size = len(plan.items)
        return plan

    def _current_video(self, plan: _Plan) -> _Video | None:
        """The video to stream from (demuxed on its first turn), or None when the queue ran out.
        Videos that fail to demux go to ``plan`` as failed samples; under on_error="raise" the
        first one ends the search (its batch is that failure)."""
        cur = self._current
        if cur is not None and (cur.failed or cur.next_seq >= cur.sequences):
            cur = None  # (its stream closes after its last frame; planned sequences still hold it)
        while cur is None and self._queue:
            cur = self._queue.popleft()
            try:
                cur.info = pyav.probe(cur.data, repr(cur.where))
            except SAMPLE_ERRORS as e:
                plan.items.append((cur, e))
                cur.data = None
                if (self._policy or "raise") == "raise":
                    return None
                cur = None
                continue
            cur.sequences = -(-cur.info.frames // self.args["sequence_length"])
            cur.stream = pyav.FrameStream(cur.data, cur.info, repr(cur.where))
            cur.data = None  # (the stream holds it)
        self._current = cur
        return cur

    # --- decoding -------------------------------------------------------------------------
    # The plans' sequences are decoded in iteration order: by the CPU stage (device="cpu"), or by
    # the GPU stage through gpu_registry.host_fallback (device="mixed"), which then copies them up.
    # advance() only plans, so it may run ahead of the decoding on another thread.
    def run_cpu(self, batch, inputs, arg_inputs):
        plan: _Plan = batch.prepared
        sources = [self._source(item) for item in plan.items]
        batch.sources = sources
        results = self.map_samples(batch, len(plan.items), lambda i: self._sample(plan.items[i]))
        kept = [i for i in range(len(results)) if results[i] is not None]
        return [TensorListCPU([results[i] for i in kept], "FHWC", [sources[i] for i in kept])]

    @staticmethod
    def _source(item) -> str:
        if len(item) == 2:
            return item[0].where
        video, first, stop = item
        return f"{video.where}, frames {first}..{stop - 1}"

    def _sample(self, item) -> np.ndarray:
        if len(item) == 2:
            raise item[1]
        video, first, stop = item
        if video.failed:
            raise OSError(f"cannot read video {video.where!r}: an earlier sequence of it failed to decode")
        try:
            frames = video.stream.read(first, stop)
        except SAMPLE_ERRORS:
            video.failed = True
            raise
        if stop == video.info.frames:
            video.stream.close()  # (planning is done with it: advance never touches a stream)
        seq = pyav.stack(frames, repr(video.where))
        length = self.args["sequence_length"]
        if seq.shape[0] < length and self.args["last_sequence_policy"] == "pad":
            seq = np.concatenate([seq, np.zeros((length - seq.shape[0], *seq.shape[1:]), np.uint8)])
        return seq

    # --- state ----------------------------------------------------------------------------
    def state(self) -> dict:
        return {}  # fed data is not part of a checkpoint (as external_source's feed_input)
