"""The mixed decoders' path through nvJPEG: hardware engines, the GPU-hybrid backend and the CPU.

Host half (:func:`prepare_hardware`, run in the executor's CPU stage):

* each header is scanned (:func:`stoker.backend.nvjpeg.hardware_eligible`; the file
  reader's I/O process sends the frame headers with the batch) and every window
  drawn, random crops for the whole batch at once;
* every sample gets a slot in one flat device buffer: first the engines'
  images, then the hybrid backend's, then, back to back, those decoded on the
  CPU pool. The buffer is allocated on the pipeline's stream by the first
  decode job that runs, once fewer than ``STOKER_DECODES_AHEAD`` earlier
  batches hold theirs (:class:`_OutputBuffer`);
* JPEGs over the decoder's ``max_pixels`` or ``max_aspect_ratio`` and JPEGs without an end marker go
  to the CPU decoder, which refuses or reports them; under ``on_error`` skip or
  substitute the CPU-decoded samples are awaited here, so that a bad one is
  dropped and refilled in the CPU stage (:func:`check_cpu_failures`);
* the engines' call starts on the decoder's thread (GIL released for the
  call), the hybrid backend's call on its own thread and stream
  (``STOKER_HYBRID_SHARE`` of each batch, whole images then cropped into their
  slots by one kernel), and the CPU decodes (formats the engines cannot take,
  ``STOKER_CPU_DECODE_SHARE``, the images cheapest on the host) in the
  helper processes or on the pool, each writing its result into pinned
  staging laid out like the buffer's CPU region.

Device half (:func:`finish_hardware`, in the GPU stage): wait for the calls,
one upload of the CPU region, and the batch leaves as a flat ``TensorListGPU``
(no per-sample Python object).
"""

from __future__ import annotations

import threading
import time

import numpy as np

from stoker import settings
from stoker.operators.decoders.mixed import (
    _clip,
    _cpu_one,
    _cupy_mod,
    _first,
    _header,
    _pair,
    _window,
    strict_sound,
)
from stoker.operators.gpu_registry import flat_offsets

_RANDOM_CROP_ARGS = ("random_area", "random_aspect_ratio", "num_attempts")


def _windows(op, kind, batch, arg_inputs, sizes: np.ndarray) -> tuple[list, np.ndarray]:
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
        area = getattr(op, "area", None) or _pair(args.get("random_area"), (0.08, 1.0))
        aspect = getattr(op, "aspect", None) or _pair(args.get("random_aspect_ratio"), (3 / 4, 4 / 3))
        attempts = int(_first(args.get("num_attempts"), 10))
        u = batch_uniforms(op.op_seed, batch.iteration, batch.sample_indices(n), draws_needed(attempts))
        arr = np.asarray(sample_crop_windows(u, sizes[:, 0], sizes[:, 1], area, aspect, attempts), np.int64)
    elif kind == "image_slice" and (arr := op.batch_windows(arg_inputs, sizes, known)) is not None:
        pass  # (anchor and shape inputs: the whole batch at once)
    else:
        out = []
        for i, ((h, w), k) in enumerate(zip(sizes.tolist(), known)):
            win = _window(op, kind, op.sample_args(arg_inputs, i), i, batch, h, w) if k else None
            out.append(None if not k else (0, 0, h, w) if win is None else _clip(win, h, w))
        return out, np.array([w or (0, 0, 0, 0) for w in out], np.int64).reshape(n, 4)
    arr[~known] = 0
    return [tuple(w) if k else None for w, k in zip(arr.tolist(), known)], arr


def _cheapest_on_the_host(eligible: list, wins: list, sizes: np.ndarray, count: int) -> list:
    """The ``count`` samples of ``eligible`` whose window costs libjpeg-turbo least relative to
    what the engines spend on them. The engines decode every bitstream whole, whatever the
    window; libjpeg-turbo reads the Huffman data only down to the window's last row and
    transforms only the window, so a small window near the top of its image is cheap on the
    host and as dear as any on the engines. Cost model, as a fraction of a whole decode: 0.6 for
    the entropy decoding of rows ``0..y+h`` and 0.4 for the window's pixels."""
    idx = np.asarray(eligible, np.int64)
    win = np.asarray([wins[i] for i in eligible], np.float64).reshape(-1, 4)
    h, w = sizes[idx, 0].astype(np.float64), sizes[idx, 1].astype(np.float64)
    cost = 0.6 * (win[:, 0] + win[:, 2]) / h + 0.4 * (win[:, 2] * win[:, 3]) / (h * w)
    return sorted(idx[np.argsort(cost, kind="stable")[:count]].tolist())


def _scan(op, arrays: list, hints, batch=None) -> tuple[list, np.ndarray, list]:
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
        heads[i] = _header(arrays[i])
        sizes[i] = heads[i][2], heads[i][3]
    over = over_limits(op, sizes[:, 0], sizes[:, 1])
    if over.any():
        sizes[over] = 0
        mask &= ~over
    # strict: JPEGs with a broken scan structure go to the CPU decoder, which names them (the
    # engines decode them into garbage silently); they keep their size, decoded there
    return heads, sizes, strict_sound(op, arrays, np.flatnonzero(mask).tolist(), hints, batch)


def prepare_hardware(op, kind, batch, enc, arg_inputs, st, hints=None, located=None) -> dict:
    """Host half of a decode through nvJPEG (see the module docstring). ``hints`` and
    ``located``: the batch's JPEG frame hints (see :func:`_scan`) and its samples' (addresses,
    sizes) in the file reader's buffer, when the reader sent them."""
    from stoker.backend import cuda

    cp = cuda._cupy()
    clock = {"prepare": time.perf_counter()}  # this batch's timeline (see _State.trace)
    n = len(enc)
    arrays = [np.asarray(d) for d in enc]
    if located is not None and len(located[0]) != n:
        located = None
    heads, sizes, eligible = _scan(op, arrays, hints, batch)
    wins, win_arr = _windows(op, kind, batch, arg_inputs, sizes)
    st.timing["prep_scan_s"] += time.perf_counter() - clock["prepare"]  # headers and windows
    shapes = np.zeros((n, 3), np.int64)
    shapes[:, :2] = win_arr[:, 2:]
    shapes[:, 2] = np.where(sizes[:, 0] > 0, 3, 0)

    # Shares: the CPU takes the images cheapest for it (_cheapest_on_the_host); the hybrid backend
    # the windows covering most of their image (it decodes whole images, so those waste the least).
    n_cpu = int(round(len(eligible) * st.cpu_share))
    moved = _cheapest_on_the_host(eligible, wins, sizes, n_cpu) if n_cpu else []
    if moved:
        chosen = set(moved)
        eligible = [i for i in eligible if i not in chosen]
    hyb_fixed = int(round(n * st.hybrid_share)) if st.hybrid() is not None else 0
    hyb_idx: list[int] = []
    if hyb_fixed and eligible:
        cover = np.array([shapes[i, 0] * shapes[i, 1] / max(1, sizes[i, 0] * sizes[i, 1]) for i in eligible])
        picked = set(np.asarray(eligible)[np.argsort(-cover, kind="stable")[:hyb_fixed]].tolist())
        hyb_idx = [i for i in eligible if i in picked]
        eligible = [i for i in eligible if i not in picked]
    hw_idx = eligible
    taken = set(hw_idx) | set(hyb_idx)
    cpu_idx = [i for i in range(n) if i not in taken and i not in moved] + moved

    order = hw_idx + hyb_idx + cpu_idx
    nbytes = shapes.prod(axis=1)
    offsets = np.zeros(n, np.int64)
    offsets[order] = flat_offsets(nbytes[order])
    cpu_start = int(nbytes[hw_idx].sum() + nbytes[hyb_idx].sum())
    stream = cuda.current_stream(batch)
    device_id = batch.device_id or 0
    # Each batch's buffer is as large as the largest so far, so that the pool serves every batch
    # from the same blocks: with a size per batch (random crops), the pool kept blocks of several
    # sizes and the training pipeline held 697-857 MiB from run to run (H100, 2026-11-25).
    st.out_bytes = max(st.out_bytes, int(nbytes.sum()), 1)
    out = _OutputBuffer(st, st.out_bytes, stream, device_id)
    jobs = {}
    engine_parts = _split(hw_idx, len(st.lanes))

    def submit_gpu_jobs():
        t_jobs = time.perf_counter()
        for lane, part in enumerate(engine_parts):
            jobs[f"hw{lane}"] = st.submit(_engines_job(st, arrays, win_arr, part, out, offsets, stream,
                                                       -(-n // len(st.lanes)), st.lanes[lane], clock, located))
        if hyb_idx:
            jobs["hybrid"] = st.submit_hybrid(_hybrid_job(st, arrays, wins, sizes, hyb_idx, out, offsets,
                                                          hyb_fixed, device_id))
        st.timing["prep_engines_stage_s"] += time.perf_counter() - t_jobs

    # STOKER_HELPERS_FIRST=1 (to measure; off until a benchmark decides) sends the JPEGs to the
    # decode helpers before staging the engines' call, not after: in a profile of the training
    # pipeline (H100, 2026-11-25) the helpers finished 6 ms after the GPU stage began to wait and
    # the engines 3 ms after, so the engines' staging delays the helpers' start.
    helpers_first = settings.get().helpers_first
    if not helpers_first:
        submit_gpu_jobs()
    # The CPU share lands in pinned staging laid out as the buffer's CPU region: each pool task
    # (or helper process) writes its own result there, and the GPU stage only issues one upload.
    cpu_total = int(nbytes[cpu_idx].sum()) if cpu_idx else 0
    # (with an automatic share the helpers start with the first batch, to take a share later)
    procs = st.decode_processes() if cpu_idx or st.share_auto else None
    try:
        if procs is not None and not procs.ready():
            procs = None  # still starting: the pool decodes this batch
    except (EOFError, OSError) as e:  # a helper could not start
        st.drop_processes(str(e))
        procs = None
    args = (op, kind, batch, enc, heads, wins, arg_inputs, False)
    proc_idx, pending = [], None
    if procs is not None:
        from stoker.operators.decoders._decode_worker import turbo_suitable

        # The share moved off the engines, and the JPEGs they cannot take that libjpeg-turbo
        # decodes as the CPU decoder would (progressive ones; not EXIF-rotated ones).
        chosen = set(moved)
        proc_idx = [i for i in cpu_idx if i in chosen or (wins[i] is not None and turbo_suitable(arrays[i]))]
    if proc_idx:
        t_send = time.perf_counter()
        staging = procs.lease(cpu_total + sum(arrays[i].size for i in proc_idx))
        stage = staging.view[:cpu_total]
        pending = _send_to_processes(procs, staging, arrays, wins, proc_idx, offsets, cpu_start, cpu_total)
        clock["sent"] = time.perf_counter()
        st.timing["proc_send_s"] += time.perf_counter() - t_send
        st.timing["proc_images"] += len(proc_idx)
    else:
        staging = cp.cuda.alloc_pinned_memory(max(cpu_total, 1)) if cpu_idx else None
        stage = np.frombuffer(staging, np.uint8, cpu_total) if staging is not None else None
    if helpers_first:
        submit_gpu_jobs()
    if proc_idx and (op.args.get("on_error") or batch.on_error) != "raise":
        t_procs = time.perf_counter()  # failures are found here, in the CPU stage
        proc_idx, pending = _without_failed(st, proc_idx, pending), None
        st.cpu_stage_helpers_wait = time.perf_counter() - t_procs
    taken_by_procs = set(proc_idx)
    pool_idx = [i for i in cpu_idx if i not in taken_by_procs]
    tasks = [(args, i, stage, int(offsets[i]) - cpu_start, tuple(shapes[i].tolist())) for i in pool_idx]
    futures = [batch.pool.submit(_cpu_staged, *t) for t in tasks] if pool_idx and batch.pool else None
    if futures is not None:
        check_cpu_failures(op, batch, pool_idx, futures)
    job_idx = {f"hw{lane}": part for lane, part in enumerate(engine_parts)}
    job_idx["hybrid"] = hyb_idx
    redone = _engines_refusal(op, kind, batch, enc, heads, wins, arg_inputs, jobs, job_idx)
    st.timing["prep_s"] += time.perf_counter() - clock["prepare"]
    return {"hardware": True, "cancel": out.cancel, "n": n, "enc": enc, "heads": heads, "wins": wins, "gray": False,
            "out": out, "redone": redone, "job_idx": job_idx, "clock": clock,
            "hw_idx": hw_idx, "hyb_idx": hyb_idx, "cpu_idx": pool_idx, "futures": futures, "tasks": tasks,
            "proc_idx": proc_idx, "pending": pending, "stage": stage,
            "jobs": jobs, "shapes": shapes, "offsets": offsets, "cpu_start": cpu_start, "cpu_total": cpu_total,
            "staging": staging, "sources": list(batch.sources)}


def _split(idx: list, parts: int) -> list:
    """``idx`` cut into up to ``parts`` runs of nearly equal length (none empty)."""
    if not idx:
        return []
    bounds = np.linspace(0, len(idx), min(parts, len(idx)) + 1).astype(int)
    return [idx[a:b] for a, b in zip(bounds[:-1], bounds[1:])]


def _engines_refusal(op, kind, batch, enc, heads, wins, arg_inputs, jobs, job_idx) -> dict | None:
    """Under ``on_error="skip"``/``"substitute"``, wait here (in the CPU stage) for the engines'
    calls. When nvJPEG refused a call (a file whose header is fine but whose entropy data is
    not), its images are decoded on the pool now, so that the bad one is recorded in
    ``batch.failures`` and dropped before the GPU stage, where nothing can be dropped any more.
    Returns {sample: future of its image} of those redone, or None. Under "raise" nothing waits."""
    engines = [name for name in jobs if name.startswith("hw")]
    if not engines or (op.args.get("on_error") or batch.on_error) == "raise":
        return None
    hw_idx = [i for name in engines if jobs[name].result()[0] is not None for i in job_idx[name]]
    if not hw_idx:
        return None
    from stoker.operators.decoders.mixed import _cpu_one

    def one(i):
        return _cpu_one(op, kind, batch, enc, heads, wins, arg_inputs, False, i)

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


def _send_to_processes(procs, lease, arrays, wins, idx, offsets, cpu_start: int, cpu_total: int):
    """Copy the encoded bytes of samples ``idx`` behind the slot's output region and hand their
    windows to the helper processes."""
    pos, jobs = cpu_total, []
    for i in idx:
        a = arrays[i]
        lease.view[pos:pos + a.size] = a
        y, x, h, w = wins[i]
        jobs.append((pos, a.size, y, x, h, w, int(offsets[i]) - cpu_start))
        pos += a.size
    return procs.submit(lease, jobs)


def _without_failed(st, idx: list, pending) -> list:
    """``idx`` less the samples the helper processes could not decode (waits for them): the
    pipeline's pool then decodes those, and reports or raises their error."""
    return [i for k, i in enumerate(idx) if k not in _failed(st, pending, len(idx))]


def _failed(st, pending, count: int) -> set:
    """Positions of the jobs the helpers could not do; all of them when a helper died (the
    pool then decodes the batch's share and the helpers are not used again)."""
    try:
        return set(pending.failed())
    except (EOFError, OSError) as e:
        st.drop_processes(str(e))
        return set(range(count))


def check_cpu_failures(op, batch, cpu_idx, futures) -> None:
    """Under ``on_error="skip"``/``"substitute"``, wait here (in the CPU stage) for the samples
    decoded on the host and record the ones that failed in ``batch.failures``: the executor then
    drops and refills them before the GPU stage, as for a CPU operator. Under "raise" nothing
    waits; the error surfaces in the GPU stage."""
    from stoker.errors import OperatorBugError, OperatorError, detached

    if (op.args.get("on_error") or batch.on_error) == "raise":
        return
    for i, future in zip(cpu_idx, futures):
        try:
            future.result()
        except OperatorBugError:
            raise
        except OperatorError as e:
            batch.failures[i] = detached(e)  # its frames would hold the batch's device buffer


def _release(semaphore, held: list) -> None:
    if held:
        held.clear()
        semaphore.release()


class _OutputBuffer:
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

        Decode jobs take a permit first (they run in batch order on each decoder thread);
        the GPU stage of a batch without decode jobs allocates without one, since waiting
        there for later batches to finish would never end."""
        with self.lock:
            if self.cancelled:
                raise _Cancelled()
            if self.buf is None:
                while permit and not self.st.ahead.acquire(timeout=0.1):
                    if self.st.closing or self.cancelled:
                        raise _Cancelled()
                if permit:
                    self._held.append(True)
                cp = _cupy_mod()
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


class _Cancelled(Exception):
    """A decode job whose batch was dropped (or whose decoder closed) before it ran."""


def _engines_job(st, arrays, win_arr, idx, out, offsets, stream, n, lane, clock, located=None):
    """The hardware engines' call for samples ``idx`` on ``lane`` (decoder, own stream or None,
    lock), padded to ``n`` images: returns (error or None, done event or None). Notes when the
    call started and ended in ``clock``. ``win_arr``: the batch's windows as an (N, 4) array;
    ``located``: its samples' (addresses, sizes), if known."""
    from stoker.backend.nvjpeg import NvjpegUnavailable

    cp = _cupy_mod()
    decoder, own_stream, lock = lane
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
        except _Cancelled:
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
        t_end = time.perf_counter()
        if error is None:  # where the call's time went: the staging copy, the stream, nvJPEG
            waits = dict(zip(("hw_copy_wait_s", "hw_ready_wait_s", "hw_call_only_s"), decoder.last_run))
            st.timing.update(waits)
        st.timing["hw_decode_call_s"] += t_end - t0  # from the job's start
        st.timing["hw_engines_s"] += t_end - t_call  # nvJPEG's call alone
        clock["engines_start"] = min(clock.get("engines_start", t_call), t_call)
        clock["engines_end"] = max(clock.get("engines_end", t_end), t_end)
        st.timing["hw_images"] += len(idx)
        return error, done

    return job


def _hybrid_job(st, arrays, wins, sizes, idx, out, offsets, fixed, device_id):
    """The GPU-hybrid backend's call for samples ``idx``: whole images into scratch memory, then
    one crop kernel into their slots, all on the hybrid stream. Returns (error, done event, keep)."""
    from stoker.backend import cuda
    from stoker.backend.nvjpeg import NvjpegUnavailable
    from stoker.operators.gpu_registry import grid_for

    cp = _cupy_mod()
    decoder, own_stream, lock = st.hybrid_lane
    data = [arrays[i] for i in idx]
    full = sizes[idx]
    full_bytes = full[:, 0] * full[:, 1] * 3
    full_offsets = flat_offsets(full_bytes)
    windows = np.asarray([wins[i] for i in idx], np.int64).reshape(-1, 4)

    def job():
        t0 = time.perf_counter()
        try:
            buf, start = out.get()
        except _Cancelled:
            return None, None, None
        own_stream.wait_event(start)
        with cp.cuda.Device(device_id), own_stream:
            scratch = cp.empty(max(int(full_bytes.sum()), 1), cp.uint8)
            try:
                with lock:
                    decoder.decode_full_into(data, full, scratch.data.ptr + full_offsets, own_stream,
                                             fixed_batch=fixed)
            except NvjpegUnavailable as e:
                return e, None, None
            table = np.zeros((len(idx), 10), np.int64)  # crop_flip.cu's per-sample table
            table[:, 0] = scratch.data.ptr + full_offsets
            table[:, 1] = full[:, 1] * 3
            table[:, 2:4] = full
            table[:, 4:8] = windows
            table[:, 9] = buf.data.ptr + offsets[idx]
            device_table = cp.asarray(table)
            grid, block = grid_for(int((windows[:, 2] * windows[:, 3]).max()), len(idx))
            cuda.load_kernel("crop_flip", "crop_flip")(grid, block, (device_table, np.int32(3)))
            done = cp.cuda.Event(disable_timing=True)
            done.record(own_stream)
        st.timing["hybrid_call_s"] += time.perf_counter() - t0
        # scratch and table are freed to the hybrid stream's pool once the stage drops them:
        # later work there is ordered after the crop.
        return None, done, (scratch, device_table)

    return job


def _cpu_staged(args, i, stage, offset: int, shape: tuple):
    """Decode sample ``i`` on the host and copy it into its place in the pinned staging buffer.
    Returns (image, whether it was staged: False when its shape is not the slot's)."""
    img = _cpu_one(*args, i)
    if tuple(img.shape) != shape or img.dtype != np.uint8:
        return img, False
    stage[offset:offset + img.nbytes].reshape(shape)[...] = img
    return img, True


def finish_hardware(op, kind, batch, prep, arg_inputs, st, stream, t_start):
    """Device half: wait for the calls, copy the CPU-decoded samples into their slots."""
    try:
        return _finish(op, kind, batch, prep, arg_inputs, st, stream, t_start)
    finally:
        prep["out"].release()  # also when a sample's error is raised: the next batches go on


def _finish(op, kind, batch, prep, arg_inputs, st, stream, t_start):
    from stoker.operators.transfer import _ring, device_views
    from stoker.tensors_gpu import TensorListGPU

    cp = _cupy_mod()
    n, shapes, offsets = prep["n"], prep["shapes"], prep["offsets"]
    cpu_idx, futures = list(prep["cpu_idx"]), prep["futures"]
    t0 = time.perf_counter()
    redo: list[int] = []
    for name, future in prep["jobs"].items():
        error, done, *_ = future.result()
        if done is not None:
            stream.wait_event(done)
        if error is not None:  # nvJPEG refused the call: its images decode on the CPU instead
            redo += prep["job_idx"][name]
    buf, _ = prep["out"].get(permit=False)  # (allocated here when no decode job ran)
    engines_wait = time.perf_counter() - t0
    st.timing["hw_wait_s"] += engines_wait
    st.timing["batches"] += 1
    helpers_wait = 0.0

    def cpu_one(i):
        return _cpu_one(op, kind, batch, prep["enc"], prep["heads"], prep["wins"], arg_inputs, False, i)

    done = [f.result() for f in futures] if futures is not None else [_cpu_staged(*t) for t in prep["tasks"]]
    proc_idx = prep["proc_idx"]
    if proc_idx:  # decoded by the helper processes into the staging (or, when they could not, here)
        t_procs = time.perf_counter()
        failed = _failed(st, prep["pending"], len(proc_idx)) if prep["pending"] is not None else set()
        helpers_wait = time.perf_counter() - t_procs
        st.timing["proc_wait_s"] += helpers_wait
        args = (op, kind, batch, prep["enc"], prep["heads"], prep["wins"], arg_inputs, False)
        for k, i in enumerate(proc_idx):
            off, shape = int(offsets[i]) - prep["cpu_start"], tuple(shapes[i].tolist())
            done.append(_cpu_staged(args, i, prep["stage"], off, shape) if k in failed else
                        (prep["stage"][off:off + int(np.prod(shape))].reshape(shape), True))
        cpu_idx = cpu_idx + list(proc_idx)
    # (under skip/substitute the CPU stage waited for the helpers instead: see prepare_hardware)
    clock = prep["clock"]
    clock["gpu_stage"], clock["inputs_ready"] = t0, time.perf_counter()
    if proc_idx and prep["pending"] is not None:
        clock["helpers_start"], clock["helpers_end"] = prep["pending"].span()
    st.trace.append(clock)
    st.balance_share(engines_wait, max(helpers_wait, st.cpu_stage_helpers_wait))
    st.cpu_stage_helpers_wait = 0.0
    host = [img for img, _ in done]
    ring = _ring(batch)
    fits = all(staged for _, staged in done)
    if fits and host:  # the CPU region of the buffer: one copy from the staging filled by the pool
        cp.cuda.runtime.memcpyAsync(buf.data.ptr + prep["cpu_start"], prep["staging"].ptr, prep["cpu_total"],
                                    cp.cuda.runtime.memcpyHostToDevice, stream.ptr)
        with st.lock:  # the staging stays alive until the stream has passed the copy
            st.in_use.append([prep["staging"], None])
            st.retire(stream)
    if redo:
        redone = prep["redone"] or {}  # decoded in the CPU stage already (see _engines_refusal)
        again = {i: batch.pool.submit(cpu_one, i) for i in redo if i not in redone} if batch.pool else {}
        extra = [redone[i].result() if i in redone else again[i].result() if i in again else cpu_one(i)
                 for i in redo]
        if all(tuple(a.shape) == tuple(shapes[i]) for i, a in zip(redo, extra)):
            ring.upload_to(extra, buf.data.ptr + offsets[redo], stream)
        else:
            fits = False
        cpu_idx, host = cpu_idx + redo, host + extra
    sources = prep["sources"][:n] or None
    if fits:
        out = TensorListGPU.from_flat(buf, offsets, shapes, "HWC", sources)
    else:  # a sample whose size the header did not tell (or EXIF-rotated): a list batch
        st.timing["list_batches"] += 1
        results = list(TensorListGPU.from_flat(buf, offsets, shapes).samples())
        dev, offs = ring.upload_many(host, stream)
        for i, view in zip(cpu_idx, device_views(dev, offs, host)):
            results[i] = view
        out = TensorListGPU(results, "HWC", sources)
    st.timing["total_s"] += time.perf_counter() - t_start
    return [out]
