"""The mixed decoders' path through nvJPEG's hardware engines, host half and device half.

Host half (:func:`prepare_hardware`, run in the executor's CPU stage):

* each header is scanned (:func:`stoker.backend.nvjpeg.hardware_eligible`; the file
  reader's I/O process sends the frame headers with the batch) and every window
  drawn, random crops for the whole batch at once;
* :func:`stoker.operators.decoders.mixed.plan.plan_batch` gives every sample a slot in one
  flat device buffer: first the engines' images, then, back to back, those decoded on the
  host. The buffer is allocated on the pipeline's stream by the first decode job that runs,
  once fewer than ``STOKER_DECODES_AHEAD`` earlier batches hold theirs
  (:class:`stoker.operators.decoders.mixed.engines.OutputBuffer`);
* JPEGs over the decoder's ``max_pixels`` or ``max_aspect_ratio`` and JPEGs without an end marker go
  to the CPU decoder, which refuses or reports them; under ``on_error`` skip or
  substitute the CPU-decoded samples are awaited here, so that a bad one is
  dropped and refilled in the CPU stage (:func:`stoker.operators.decoders.mixed.common.check_cpu_failures`);
* the engines' call starts on the decoder's thread (GIL released for the call), and the host
  decodes (formats the engines cannot take, ``STOKER_CPU_DECODE_SHARE``, the images cheapest
  on the host) in the helper processes or on the pool
  (:mod:`stoker.operators.decoders.mixed.host_share`), each writing its result into pinned
  staging laid out like the buffer's CPU region.

Device half (:func:`finish_hardware`, in the GPU stage): wait for the calls,
one upload of the CPU region, and the batch leaves as a flat ``TensorListGPU``
(no per-sample Python object).
"""

from __future__ import annotations

import dataclasses
import time
from concurrent.futures import Future

import numpy as np

from stoker.operators.base import HostHalf
from stoker.operators.decoders.mixed import host_share
from stoker.operators.decoders.mixed.common import clip, cpu_one, first, header, pair, strict_sound, window
from stoker.operators.decoders.mixed.engines import OutputBuffer, engines_job, engines_refusal
from stoker.operators.decoders.mixed.plan import DecodePlan, plan_batch

_RANDOM_CROP_ARGS = ("random_area", "random_aspect_ratio", "num_attempts")


@dataclasses.dataclass
class PreparedBatch(HostHalf):
    """The host half's result for one batch (``batch.prepared`` in the GPU stage)."""

    enc: list
    """The batch's encoded samples."""
    heads: list
    """Each sample's (code stream or None, codec, h, w) (see :func:`scan`)."""
    wins: list
    """Each sample's clipped window (y0, x0, h, w), None where its size is unknown."""
    out: OutputBuffer
    """The batch's flat device buffer (allocated by the first job that runs)."""
    host: host_share.HostShare
    """The host decodes started for the batch, and its plan (``host.plan``)."""
    engines: Future | None
    """The engines' job on the decoder's thread (returns (error or None, done event or None)),
    or None when no sample went to the engines."""
    redone: dict | None
    """{sample: future of its host image} for an engines' call refused in the CPU stage."""
    clock: dict
    """This batch's timeline (see :class:`stoker.operators.decoders.mixed.stats.DecodeStats`)."""
    sources: list
    """The samples' sources (file names), for the output and errors."""

    @property
    def plan(self) -> DecodePlan:
        """Where each sample decodes and lands (:class:`DecodePlan`)."""
        return self.host.plan

    def cancel(self) -> None:
        """The batch was dropped before its GPU stage: its decode jobs skip their work and the
        device buffer's permit returns now (the executor calls this)."""
        self.out.cancel()


def windows(op, kind, batch, arg_inputs, sizes: np.ndarray) -> tuple[list, np.ndarray]:
    """Windows (y0, x0, h, w), clipped, of every sample whose size is known (else None), and
    the same as an (N, 4) int64 array (zero rows where unknown: no slot).

    Random crops with batch-wide arguments are drawn for the whole batch at once
    (:func:`sample_crop_windows`, the same windows as the per-sample sampler)."""
    from stoker.operators.random.crop_window import draws_needed, sample_crop_windows
    from stoker.random_state import batch_uniforms

    n = len(sizes)
    known = sizes[:, 0] > 0
    if kind == "image":
        arr = np.zeros((n, 4), np.int64)
        arr[:, 2:] = sizes
    elif kind == "image_random_crop" and not set(arg_inputs) & set(_RANDOM_CROP_ARGS):
        args = op.args
        area = getattr(op, "area", None) or pair(args.get("random_area"), (0.08, 1.0))
        aspect = getattr(op, "aspect", None) or pair(args.get("random_aspect_ratio"), (3 / 4, 4 / 3))
        attempts = int(first(args.get("num_attempts"), 10))
        u = batch_uniforms(op.op_seed, batch.iteration, batch.sample_indices(n), draws_needed(attempts))
        arr = np.asarray(sample_crop_windows(u, sizes[:, 0], sizes[:, 1], area, aspect, attempts), np.int64)
    elif kind == "image_slice" and (arr := op.batch_windows(arg_inputs, sizes, known)) is not None:
        pass  # (anchor and shape inputs: the whole batch at once)
    else:
        out = []
        for i, ((h, w), k) in enumerate(zip(sizes.tolist(), known)):
            win = window(op, kind, op.sample_args(arg_inputs, i), i, batch, h, w) if k else None
            out.append(None if not k else (0, 0, h, w) if win is None else clip(win, h, w))
        return out, np.array([w or (0, 0, 0, 0) for w in out], np.int64).reshape(n, 4)
    arr[~known] = 0
    return [tuple(w) if k else None for w, k in zip(arr.tolist(), known)], arr


def scan(op, arrays: list, hints, batch=None) -> tuple[list, np.ndarray, list]:
    """(heads, sizes, eligible) of a batch: each sample's (code stream or None, codec, h, w),
    its (h, w) as an (N, 2) array (zero where unknown or over ``max_pixels`` or ``max_aspect_ratio``: no slot, the CPU
    decoder refuses it with the reason), and the samples for the engines. ``hints``: the frame
    hints the file reader's I/O process sent with the batch (:func:`hardware_eligible_hints`),
    or None to scan here."""
    from stoker.backend.nvjpeg import hardware_eligible, hardware_eligible_hints
    from stoker.operators.decoders.image import over_limits

    n = len(arrays)
    if hints is not None and len(hints) == n:
        mask = hardware_eligible_hints(hints)
        sizes = np.where(mask[:, None], hints[:, 2:4], 0)
    else:
        found = [hardware_eligible(a) for a in arrays]
        mask = np.fromiter((f is not None for f in found), bool, n)
        sizes = np.asarray([f or (0, 0) for f in found], np.int64).reshape(n, 2)
    heads: list = [(None, "jpeg", h, w) for h, w in sizes.tolist()]
    for i in np.flatnonzero(~mask).tolist():  # the others: nvImageCodec reads their header
        heads[i] = header(arrays[i])
        sizes[i] = heads[i][2], heads[i][3]
    over = over_limits(op, sizes[:, 0], sizes[:, 1])
    if over.any():
        sizes[over] = 0
        mask &= ~over
    # strict: JPEGs with a broken scan structure go to the CPU decoder, which names them (the
    # engines decode them into garbage silently); they keep their size, decoded there
    return heads, sizes, strict_sound(op, arrays, np.flatnonzero(mask).tolist(), hints, batch)


def prepare_hardware(op, kind, batch, enc, arg_inputs, st, hints=None, located=None) -> PreparedBatch:
    """Host half of a decode through nvJPEG (see the module docstring). ``hints`` and
    ``located``: the batch's JPEG frame hints (see :func:`scan`) and its samples' (addresses,
    sizes) in the file reader's buffer, when the reader sent them."""
    from stoker.backend import cuda

    clock = {"prepare": time.perf_counter()}  # this batch's timeline (see DecodeStats.trace)
    n = len(enc)
    arrays = [np.asarray(d) for d in enc]
    if located is not None and len(located[0]) != n:
        located = None
    heads, sizes, eligible = scan(op, arrays, hints, batch)
    wins, win_arr = windows(op, kind, batch, arg_inputs, sizes)
    st.stats.since("prep_scan_s", clock["prepare"])  # headers and windows
    plan = plan_batch(sizes, win_arr, wins, eligible, st.cpu_share)
    stream = cuda.current_stream(batch)
    # Each batch's buffer is as large as the largest so far, so that the pool serves every batch
    # from the same blocks: with a size per batch (random crops), the pool kept blocks of several
    # sizes and the device memory held varied from run to run.
    st.out_bytes = max(st.out_bytes, plan.total, 1)
    out = OutputBuffer(st, st.out_bytes, stream, batch.device_id or 0)
    job = None
    if plan.engines:
        t_jobs = time.perf_counter()
        job = st.submit(engines_job(st, arrays, win_arr, plan.engines, out, plan.offsets, stream, n, clock,
                                    located))
        st.stats.since("prep_engines_stage_s", t_jobs)
    share = host_share.start(op, kind, batch, arg_inputs, st, plan, enc, arrays, heads, wins, clock)
    redone = engines_refusal(op, kind, batch, enc, heads, wins, arg_inputs, job, plan.engines)
    st.stats.since("prep_s", clock["prepare"])
    return PreparedBatch(enc=enc, heads=heads, wins=wins, out=out, host=share, engines=job, redone=redone,
                         clock=clock, sources=list(batch.sources))


def finish_hardware(op, kind, batch, prep: PreparedBatch, arg_inputs, st, stream, t_start):
    """Device half: wait for the calls, copy the CPU-decoded samples into their slots."""
    try:
        return _finish(op, kind, batch, prep, arg_inputs, st, stream, t_start)
    finally:
        prep.out.release()  # also when a sample's error is raised: the next batches go on


def _finish(op, kind, batch, prep: PreparedBatch, arg_inputs, st, stream, t_start):
    from stoker.operators.transfer import device_views, pinned_ring
    from stoker.tensors_gpu import TensorListGPU

    plan = prep.plan
    t0 = time.perf_counter()
    redo: list[int] = []
    if prep.engines is not None:
        error, done = prep.engines.result()
        if done is not None:
            stream.wait_event(done)
        if error is not None:  # nvJPEG refused the call: its images decode on the CPU instead
            redo = list(plan.engines)
    buf, _ = prep.out.get(permit=False)  # (allocated here when no decode job ran)
    engines_wait = time.perf_counter() - t0
    st.stats.add("hw_wait_s", engines_wait)
    st.stats.add("batches", 1)
    done, cpu_idx, helpers_wait = host_share.collect(op, kind, batch, arg_inputs, st, prep.host, prep.enc,
                                                     prep.heads, prep.wins, prep.clock)
    prep.clock["gpu_stage"], prep.clock["inputs_ready"] = t0, time.perf_counter()
    st.stats.batch_done(prep.clock)
    st.balance_share(engines_wait, max(helpers_wait, st.cpu_stage_helpers_wait))
    st.cpu_stage_helpers_wait = 0.0
    host = [img for img, _ in done]
    ring = pinned_ring(batch)
    fits = all(staged for _, staged in done)
    if fits and host:  # the CPU region of the buffer: one copy from the staging filled by the pool
        _upload_cpu_region(st, buf, prep.host, stream)
    if redo:
        extra = _redo_on_host(op, kind, batch, prep, arg_inputs, redo)
        if all(tuple(a.shape) == tuple(plan.shapes[i]) for i, a in zip(redo, extra)):
            ring.upload_to(extra, buf.data.ptr + plan.offsets[redo], stream)
        else:
            fits = False
        cpu_idx, host = cpu_idx + redo, host + extra
    sources = prep.sources[:plan.n] or None
    if fits:
        out = TensorListGPU.from_flat(buf, plan.offsets, plan.shapes, "HWC", sources)
    else:  # a sample whose size the header did not tell (or EXIF-rotated): a list batch
        st.stats.add("list_batches", 1)
        results = list(TensorListGPU.from_flat(buf, plan.offsets, plan.shapes).samples())
        dev, offs = ring.upload_many(host, stream)
        for i, view in zip(cpu_idx, device_views(dev, offs, host)):
            results[i] = view
        out = TensorListGPU(results, "HWC", sources)
    st.stats.since("total_s", t_start)
    return [out]


def _upload_cpu_region(st, buf, share: host_share.HostShare, stream) -> None:
    """One copy of the staged CPU region into its place in ``buf``, on ``stream``."""
    from stoker.operators.decoders.mixed.common import cupy_mod

    cp = cupy_mod()
    plan = share.plan
    cp.cuda.runtime.memcpyAsync(buf.data.ptr + plan.cpu_start, share.staging.ptr, plan.cpu_total,
                                cp.cuda.runtime.memcpyHostToDevice, stream.ptr)
    with st.lock:  # the staging stays alive until the stream has passed the copy
        st.in_use.append([share.staging, None])
        st.retire(stream)


def _redo_on_host(op, kind, batch, prep: PreparedBatch, arg_inputs, redo: list) -> list:
    """The images of a refused engines' call, decoded on the host: those redone in the CPU stage
    already (see :func:`engines_refusal`), the rest on the pool (or here, without one)."""

    def one(i):
        return cpu_one(op, kind, batch, prep.enc, prep.heads, prep.wins, arg_inputs, False, i)

    redone = prep.redone or {}
    again = {i: batch.pool.submit(one, i) for i in redo if i not in redone} if batch.pool else {}
    return [redone[i].result() if i in redone else again[i].result() if i in again else one(i) for i in redo]
