"""The "mixed" image decoders: encoded bytes on the host in, decoded HWC uint8 on the GPU out.

Implements ``decoders.image``, ``decoders.image_random_crop``,
``decoders.image_crop`` and ``decoders.image_slice`` with ``device="mixed"``.

Two paths, chosen per operator:

* **Hardware engines** (default where nvJPEG's hardware backend exists: A100,
  H100, H200; ``STOKER_NVJPEG_HW=0`` turns it off). In the CPU stage each
  header is scanned (:func:`stoker.backend.nvjpeg.hardware_eligible`), the
  window drawn, and every sample given a slot in one flat output buffer; the
  baseline JPEGs (colour and grayscale) then decode in one nvJPEG call on the decoder's own
  thread (no GIL held), overlapping the previous batch's GPU work, while the
  others (progressive, PNG, ...) and a share of the JPEGs
  (``STOKER_CPU_DECODE_SHARE``: steered per batch by default, see
  :meth:`_State.balance_share`) decode in helper processes or on the thread
  pool and are copied into their slots. The batch leaves as a flat ``TensorListGPU``: no
  per-sample Python object.
* **nvImageCodec** otherwise: headers parsed as ``CodeStream`` s, one batched
  ``decode`` with ROI on the legacy stream, the CPU share and the formats it
  cannot take on the pool.

Random crop windows come from
:func:`stoker.operators.random.crop_window.sample_crop_window` with the
sample's own random stream, so they do not depend on the device or the path.
Samples the GPU fails on are retried on the CPU; a sample that fails there
too raises an error naming the file.
"""
from __future__ import annotations

import collections
import os
import threading
import time

import cv2
import numpy as np

from stoker import settings
from stoker.backend.nvjpeg import has_end_marker
from stoker.operators.base import SAMPLE_ERRORS, SampleContext
from stoker.operators.gpu_registry import register_gpu
from stoker.operators.image.geometry import crop_anchor
from stoker.operators.random.crop_window import sample_crop_window
from stoker.pipeline.gil import shorten_switch_interval

_GPU_CODECS = {"jpeg"}


def _cupy_mod():
    from stoker.backend.cuda import _cupy

    return _cupy()


def _nv():
    from nvidia import nvimgcodec

    return nvimgcodec


def _pair(v, default):
    if v is None:
        return default
    a = [float(x) for x in np.asarray(v, dtype=np.float64).reshape(-1)]
    return (a[0], a[-1]) if a else default


def _first(v, default=None):
    if v is None:
        return default
    a = np.asarray(v).reshape(-1)
    return a[0].item() if a.size else default


_MAX_AUTO_SHARE = 0.4  # the automatic share's ceiling: the rest of the pipeline needs host cores too


class _State:
    """Decoder instance and settings kept on the operator between batches."""

    def __init__(self, device_id: int):
        conf = settings.get()
        self._nv_threads = conf.nvimgcodec_threads or os.cpu_count() or 4
        self._nv_decoder = None  # nvImageCodec's decoder and parameters: made on first use (see decoder)
        self._nv_params = None
        self._nv_lock = threading.Lock()
        self.lock = threading.Lock()
        # Share of the engines' JPEGs decoded by the helper processes instead: a number, or "auto"
        # (the default): on the hardware path it is then steered batch by batch (balance_share).
        self.share_auto = conf.cpu_decode_share is None
        self.cpu_stage_helpers_wait = 0.0  # seconds the CPU stage last waited for the helpers
        self.cpu_share = 0.0 if self.share_auto else conf.cpu_decode_share
        shorten_switch_interval()  # its worker threads wait for the GIL per image
        # Decoded images of earlier batches, kept until the pipeline stream has passed an event
        # recorded after their consumers' launches: nvImageCodec frees them in its own stream order.
        self.in_use: collections.deque = collections.deque()
        self.timing = collections.Counter()  # seconds spent, for benchmarks
        self.out_bytes = 0  # the largest decoded batch so far (bytes): every batch's buffer size
        # The last batches' timelines (perf_counter seconds: prepare, sent, engines_start/_end,
        # helpers_start/_end, gpu_stage, inputs_ready), for benchmarks/gpu_stage_profile.py.
        self.trace: collections.deque = collections.deque(maxlen=512)
        self.device_id = device_id
        self.hw = None  # nvJPEG hardware engines (stoker.backend.nvjpeg), made on first use
        self.worker = None  # the thread(s) that run the hardware decode calls
        self.lanes: list = []  # (decoder, its own stream or None for the pipeline's, lock)
        # Share of each batch for nvJPEG's GPU-hybrid backend beside the engines (as DALI's
        # hw_decoder_load splits a batch); STOKER_HYBRID_SHARE.
        self.hybrid_share = conf.hybrid_share
        self.hybrid_lane = None
        self.hybrid_worker = None
        self.hybrid_problem = None
        self.ahead = threading.Semaphore(max(1, conf.decodes_ahead))
        self.closing = False
        # On unless STOKER_NVJPEG_HW=0. Its output is within 0.6 levels of libjpeg-turbo on average
        # on the benchmark set (luma within 0.1; the engines upsample chroma more simply), and it
        # doubled the training pipeline on an H100 (benchmarks/results_log.md).
        self.hw_problem = None if conf.nvjpeg_hw else "disabled"
        # JPEGs the engines cannot take (progressive, arithmetic-coded) and any CPU share decode in helper
        # processes (_decode_worker) rather than on the pipeline's pool, which holds the GIL the
        # rest of the pipeline needs: STOKER_CPU_DECODE_PROCESSES helpers (default 4; 0: the pool)
        # of STOKER_CPU_DECODE_THREADS threads each. H100, ImageNet-like set (8 % such files):
        # train 11.3-11.8k -> 14.9-16.0k img/s with 2 helpers, 16.8k with 4; val 10.9k -> 14.4k.
        self.procs = None
        self.procs_count = conf.cpu_decode_processes
        # The helpers set their own niceness; read here too, so that a bad value stops the
        # pipeline with its message rather than the helpers.
        self.procs_nice = conf.cpu_decode_nice
        self.procs_threads = max(1, conf.cpu_decode_threads)
        # Cores the helpers leave to the pipeline's own threads (_decode_worker.helper_cores says why).
        from stoker.operators.decoders._decode_worker import default_spare_cores

        spare = conf.cpu_decode_spare_cores
        self.procs_spare = default_spare_cores() if spare is None else spare

    def balance_share(self, engines_wait: float, helpers_wait: float) -> None:
        """Steer the automatic CPU share from one batch's waits (seconds) in the GPU stage: for
        the engines' call, then for the helper processes. Waiting on the helpers lowers the
        share at once; waiting on the engines while the helpers were done raises it a little.
        So the share settles where both finish together, on the machine at hand (DALI's
        ``hw_decoder_load`` is the same split, fixed by hand)."""
        if not self.share_auto or self.procs is None or not self.procs.ready():
            return
        if helpers_wait > 0.5e-3:
            self.cpu_share = max(0.0, self.cpu_share - 0.02)
        elif engines_wait > 1e-3:
            self.cpu_share = min(_MAX_AUTO_SHARE, self.cpu_share + 0.01)
        self.timing["share_sum"] += self.cpu_share

    def decode_processes(self):
        """The helper processes for the CPU share, when asked for and possible; else None."""
        if self.procs is None and self.procs_count > 0:
            from stoker.operators.decoders import turbo
            from stoker.operators.decoders._decode_worker import DecodeProcesses, helper_cores

            if not turbo.available() or not hasattr(os, "memfd_create"):
                self.procs_count = 0  # the pipeline's pool decodes the share instead
                return None
            self.procs = DecodeProcesses(self.procs_count, self.procs_threads, turbo.library_path(),
                                         cores=helper_cores(self.procs_spare))
        return self.procs

    def drop_processes(self, why: str) -> None:
        """A helper process failed (it could not start, or died): the pool decodes from now on."""
        import logging

        logging.getLogger("stoker").warning("stoker: a JPEG decode helper process failed (%s); decoding on "
                                            "the pipeline's threads from now on", why)
        procs, self.procs, self.procs_count = self.procs, None, 0
        if self.share_auto:
            self.cpu_share = 0.0  # the pool would decode the share: slower than the engines
        if procs is not None:
            for helper in procs.helpers:
                helper.proc.kill()
            procs.close()

    @property
    def decoder(self):
        """nvImageCodec's decoder, made when a batch first needs it: importing nvImageCodec takes
        about a second, and a batch of baseline JPEGs decoded by the engines never needs it."""
        if self._nv_decoder is None:
            with self._nv_lock:
                if self._nv_decoder is None:
                    nv = _nv()
                    self._nv_params = {
                        gray: nv.DecodeParams(color_spec=nv.ColorSpec.GRAY if gray else nv.ColorSpec.SRGB,
                                              apply_exif_orientation=True, allow_any_depth=False)
                        for gray in (False, True)}
                    self._nv_decoder = nv.Decoder(device_id=self.device_id, max_num_cpu_threads=self._nv_threads)
        return self._nv_decoder

    @property
    def params(self) -> dict:
        """nvImageCodec's decode parameters, {gray: DecodeParams}."""
        self.decoder  # noqa: B018 - made together with the decoder
        return self._nv_params

    def hardware(self):
        """The hardware JPEG decoder, or None where nvJPEG's hardware backend is unavailable."""
        if self.hw is None and self.hw_problem is None:
            from stoker.backend.nvjpeg import HardwareDecoder, NvjpegUnavailable

            try:
                self.hw = HardwareDecoder(self.device_id)
                # STOKER_NVJPEG_LANES=N (diagnostic; known to hang): each batch's engine share is split over N
                # decoders called at once from N threads (nvJPEG's host side of a batched call
                # runs on the calling thread: benchmarks/engines_probe.py, H100, 2 lanes 20.0k ->
                # 22.9k img/s). Every lane then has its own stream: with the first lane on the
                # pipeline's stream, two calls in flight hung inside nvJPEG (2026-11-25).
                conf = settings.get()
                lanes = max(1, conf.nvjpeg_lanes)
                if lanes > 1:
                    import logging

                    logging.getLogger("stoker").warning(
                        "STOKER_NVJPEG_LANES=%d is a diagnostic switch known to hang: pipelines stopped with "
                        "two engine calls in flight (benchmarks/results_log.md)", lanes)
                # STOKER_NVJPEG_STREAM=own: a single lane calls on a stream of its own too, ordered
                # after the buffer's allocation by an event. Not the default: with the session-9
                # code (H100, 2026-11-25, interleaved) it was slower in training (17.4k/15.6k
                # against 17.6k/16.3k img/s) and validation (15.1k/14.8k against 15.7k/15.6k);
                # an earlier pair had favoured it (benchmarks/results_log.md, session 9).
                own = conf.nvjpeg_stream
                cp = _cupy_mod()
                with cp.cuda.Device(self.device_id):
                    alone = lanes == 1 and own == "pipeline"
                    self.lanes = [(self.hw, None if alone else cp.cuda.Stream(non_blocking=True), threading.Lock())]
                    # STOKER_NVJPEG_LANE_HANDLES=shared: the lanes share the first decoder's nvJPEG
                    # handle, each with its own state (the other way to meet nvJPEG's rules for
                    # threads; to try against the hang above).
                    shared = self.hw if conf.nvjpeg_lane_handles == "shared" else None
                    for _ in range(lanes - 1):
                        self.lanes.append((HardwareDecoder(self.device_id, share_handle=shared),
                                           cp.cuda.Stream(non_blocking=True), threading.Lock()))
            except (NvjpegUnavailable, OSError) as e:
                self.hw_problem = str(e)
        return self.hw

    def hybrid(self):
        """nvJPEG's GPU-hybrid decoder (its own thread and stream), when a hybrid share is asked
        for and the hardware path is on; else None."""
        if self.hybrid_lane is None and self.hybrid_share > 0 and self.hardware() is not None \
                and self.hybrid_problem is None:
            from stoker.backend.nvjpeg import HybridDecoder, NvjpegUnavailable

            cp = _cupy_mod()
            try:
                with cp.cuda.Device(self.device_id):
                    self.hybrid_lane = (HybridDecoder(self.device_id), cp.cuda.Stream(non_blocking=True),
                                        threading.Lock())
            except (NvjpegUnavailable, OSError) as e:
                self.hybrid_problem = str(e)
        return self.hybrid_lane

    def submit_hybrid(self, job):
        if self.hybrid_worker is None:
            from concurrent.futures import ThreadPoolExecutor

            self.hybrid_worker = ThreadPoolExecutor(1, thread_name_prefix="stoker-nvjpeg-hybrid")
        return self.hybrid_worker.submit(job)

    def submit(self, job):
        """Run ``job`` on the decoder's own thread(s), beside the pipeline's stages."""
        if self.worker is None:
            from concurrent.futures import ThreadPoolExecutor

            self.worker = ThreadPoolExecutor(len(self.lanes), thread_name_prefix="stoker-nvjpeg")
        return self.worker.submit(job)

    def close(self) -> None:
        self.closing = True
        for worker in (self.worker, self.hybrid_worker):
            if worker is not None:
                worker.shutdown(wait=True)
        self.worker = self.hybrid_worker = None
        if self.hybrid_lane is not None:
            self.hybrid_lane[0].close()
            self.hybrid_lane = None
        for decoder, _, _ in reversed(self.lanes):  # the first lane's handle may be shared: last
            decoder.close()
        self.lanes = []
        self.hw = None
        if self.procs is not None:
            self.procs.close()
            self.procs = None

    def retire(self, stream) -> None:
        cp = _cupy_mod()
        if self.in_use and self.in_use[-1][1] is None:
            ev = cp.cuda.Event(disable_timing=True)
            ev.record(stream)
            for entry in self.in_use:
                if entry[1] is None:
                    entry[1] = ev
        while self.in_use and self.in_use[0][1] is not None and self.in_use[0][1].done:
            self.in_use.popleft()


def _state(op, batch):
    st = getattr(op, "_mixed_state", None)
    if st is None:
        st = op._mixed_state = _State(batch.device_id or 0)
    return st


def _header(data: np.ndarray):
    """(code stream or None, codec name, height, width) of one encoded sample."""
    nv = _nv()
    try:
        cs = nv.CodeStream(data)
        return cs, (cs.codec_name or "").lower(), int(cs.height), int(cs.width)
    except Exception:  # noqa: BLE001 - unknown formats go to the CPU, which reports real errors
        return None, "", 0, 0


def _window(op, kind, args, i, batch, h, w):
    """(y0, x0, wh, ww) of sample i, or None for the whole image."""
    if kind == "image":
        return None
    if kind == "image_random_crop":
        ctx = SampleContext(batch.sample_index(i), batch.iteration, op.op_seed, batch.source(i))
        area = getattr(op, "area", None) or _pair(args.get("random_area"), (0.08, 1.0))
        aspect = getattr(op, "aspect", None) or _pair(args.get("random_aspect_ratio"), (3 / 4, 4 / 3))
        return sample_crop_window(ctx.rng, h, w, area, aspect, int(_first(args.get("num_attempts"), 10)))
    if kind == "image_crop":
        crop = args.get("crop")
        ch = cw = 0
        if crop is not None:
            c = np.asarray(crop, dtype=np.float64).reshape(-1)
            ch, cw = (c[0], c[0]) if c.size == 1 else (c[-2], c[-1])
        ch = int(_first(args.get("crop_h"), 0) or ch) or h
        cw = int(_first(args.get("crop_w"), 0) or cw) or w
        py, px = float(_first(args.get("crop_pos_y"), 0.5)), float(_first(args.get("crop_pos_x"), 0.5))
        # the CPU decoder's anchor rule, so both devices cut the same window
        return crop_anchor(h, ch, py), crop_anchor(w, cw, px), ch, cw
    if kind == "image_slice":  # (its anchor and shape inputs arrive as arguments, see _impl)
        return op.window_rule(args, args.get(op.ANCHOR_INPUT), args.get(op.SHAPE_INPUT))(h, w)
    raise NotImplementedError(f"decoders.{kind} with device='mixed' is not implemented yet")


def _clip(win, h, w):
    y0, x0, wh, ww = win
    y1, x1 = min(h, y0 + wh), min(w, x0 + ww)
    y0, x0 = max(0, y0), max(0, x0)
    return y0, x0, max(0, y1 - y0), max(0, x1 - x0)


def cpu_decode(data: np.ndarray, gray: bool, win):
    """OpenCV decode of one sample, cropped to ``win`` (y0, x0, h, w), as RGB (or gray) HWC uint8."""
    img = cv2.imdecode(np.asarray(data, np.uint8), cv2.IMREAD_GRAYSCALE if gray else cv2.IMREAD_COLOR)
    if img is None:
        raise ValueError("the image could not be decoded (unknown or corrupt format)")
    if win is not None:
        y0, x0, h, w = _clip(win, img.shape[0], img.shape[1])
        img = img[y0:y0 + h, x0:x0 + w]
    if gray:
        return np.ascontiguousarray(img)[..., None]
    return cv2.cvtColor(img, cv2.COLOR_BGR2RGB)


def _cpu_one(op, kind, batch, enc, heads, wins, arg_inputs, gray, i):
    """Decode sample ``i`` on the host: the operator's own CPU implementation when it has one."""
    from stoker.errors import OperatorError

    try:
        if hasattr(op, "run_sample") and hasattr(op, "decode"):
            ctx = SampleContext(batch.sample_index(i), batch.iteration, op.op_seed, batch.source(i))
            return np.ascontiguousarray(op.run_sample((enc[i],), op.sample_args(arg_inputs, i), ctx))
        win = wins[i]
        if win is None and kind != "image":
            h, w = heads[i][2], heads[i][3]
            if h == 0:  # header unknown to nvImageCodec: decode first, then choose the window
                probe = cv2.imdecode(np.asarray(enc[i], np.uint8), cv2.IMREAD_UNCHANGED)
                if probe is None:
                    raise ValueError("the image could not be decoded (unknown or corrupt format)")
                h, w = probe.shape[:2]
            win = _window(op, kind, op.sample_args(arg_inputs, i), i, batch, h, w)
        return cpu_decode(enc[i], gray, win)
    except OperatorError:
        raise
    except (*SAMPLE_ERRORS, cv2.error) as e:  # the data's fault: this sample's error
        raise OperatorError(str(e), operator=op.instance_name, origin=op.origin, source=batch.source(i),
                            sample_index=i) from e
    except Exception as e:  # noqa: BLE001 - a bug (OperatorBugError), raised whatever on_error says
        raise op.sample_failure(e, batch, i) from e


def strict_sound(op, arrays, idx: list, hints=None, batch=None) -> list:
    """The samples of ``idx`` that may decode on the GPU as far as ``strict`` is concerned: all of
    them when the decoder's ``strict`` is off; else those whose JPEG structure passes
    :func:`stoker.backend.jpeg_scan_check.scan_problem`. Why: the GPU decoders turn damaged
    entropy-coded data into garbage pixels without a word, so a file with a broken marker
    structure goes to the CPU decoder, which (strict) fails it with its name, as on device='cpu'.
    ``hints``: the batch's frame hints; readers.file's I/O process adds the check's result as a
    seventh column, so that the pipeline's process spends nothing on it."""
    from stoker.backend.jpeg_scan_check import structure_check_wanted

    if not idx or not structure_check_wanted(getattr(op, "strict", False), getattr(batch, "on_error", None)):
        return idx
    if hints is not None and np.ndim(hints) == 2 and np.shape(hints)[1] > 6 and len(hints) == len(arrays):
        bad = np.asarray(hints)[idx, 6] != 0
    else:
        from stoker.backend.jpeg_scan_check import damaged

        bad = damaged(arrays, idx)
    return [i for i, b in zip(idx, bad.tolist()) if not b]


def _frame_hints(data):
    """The batch's JPEG frame hints, when its reader gave them (readers.file's I/O process scans
    them) or its samples lie in one buffer (the container readers: scanned here in bulk, see
    :mod:`stoker.backend.jpeg_header_bulk`); None otherwise (the decoder scans each sample)."""
    hints = getattr(data, "_frame_hints", None)
    base = getattr(data, "_located_base", None)
    if hints is None and base is not None:
        from stoker.backend.jpeg_header_bulk import frame_hints

        addrs, sizes = data._located
        hints = frame_hints(base, (addrs - np.uint64(base.ctypes.data)).astype(np.int64), sizes.astype(np.int64))
    return hints


def prepare(op, kind, batch, inputs, arg_inputs) -> dict:
    """Host-side half of a mixed decode (runs in the CPU stage when the executor allows).

    Parses headers, draws windows, cuts ROI code streams, splits the batch
    between nvImageCodec and the CPU, and starts the CPU share on the pool.
    """
    st = _state(op, batch)
    enc = inputs[0].samples()
    n = len(enc)
    out_type = op.args.get("output_type")
    gray = out_type is not None and getattr(out_type, "name", str(out_type)).endswith("GRAY")
    dtype = op.args.get("dtype")
    on_gpu = (gray or out_type is None or getattr(out_type, "name", "") == "RGB") and \
        (dtype is None or np.dtype(dtype) == np.uint8)
    # Baseline JPEGs go to the hardware engines through nvJPEG (one GIL-free call per
    # batch, on the decoder's own thread); the rest (progressive, EXIF-rotated) to the CPU.
    hw = st.hardware() if on_gpu and not gray else None
    if hw is not None:
        from stoker.operators.decoders._hardware_path import prepare_hardware

        return prepare_hardware(op, kind, batch, enc, arg_inputs, st, _frame_hints(inputs[0]),
                                getattr(inputs[0], "_located", None))
    nv = _nv()
    heads = [_header(np.asarray(d)) for d in enc]
    wins: list = [None] * n
    # Images over the pixel or aspect limits go to the CPU decoder, which refuses them from the
    # header. So do JPEGs without an end marker: a GPU decoder may return a truncated one half-grey,
    # where the CPU decoder reports it (and on_error can skip it in the CPU stage).
    from stoker.operators.decoders.image import over_limits

    over = over_limits(op, [hd[2] for hd in heads], [hd[3] for hd in heads]).tolist() if heads else []
    gpu_idx = [i for i, hd in enumerate(heads) if hd[1] in _GPU_CODECS and has_end_marker(enc[i])
               and not over[i]] if on_gpu else []
    # (only readers.file's I/O process sends the check's flag: no bulk scan here for it)
    gpu_idx = strict_sound(op, enc, gpu_idx, getattr(inputs[0], "_frame_hints", None), batch)
    n_cpu_jpeg = int(round(len(gpu_idx) * st.cpu_share))
    cpu_idx = sorted(set(range(n)) - set(gpu_idx)) + gpu_idx[len(gpu_idx) - n_cpu_jpeg:]
    gpu_idx = gpu_idx[:len(gpu_idx) - n_cpu_jpeg]
    subs = []
    for i in gpu_idx:
        cs, _, h, w = heads[i]
        wins[i] = _window(op, kind, op.sample_args(arg_inputs, i), i, batch, h, w)
        if wins[i] is not None:
            y0, x0, wh, ww = _clip(wins[i], h, w)
            cs = cs.get_sub_code_stream(region=nv.Region(y0, x0, y0 + wh, x0 + ww))
        subs.append(cs)
    args = (op, kind, batch, enc, heads, wins, arg_inputs, gray)
    if cpu_idx and batch.pool is not None:
        futures = [batch.pool.submit(_cpu_one, *args, i) for i in cpu_idx]
        from stoker.operators.decoders._hardware_path import check_cpu_failures

        check_cpu_failures(op, batch, cpu_idx, futures)
    else:
        futures = None
    prep = {"n": n, "enc": enc, "heads": heads, "wins": wins, "gray": gray, "subs": subs,
            "gpu_idx": gpu_idx, "cpu_idx": cpu_idx, "futures": futures, "sources": list(batch.sources)}
    if gpu_idx and batch.pool is not None and (op.args.get("on_error") or batch.on_error) != "raise":
        # Under skip/substitute the GPU decode runs here, in the CPU stage: a file nvImageCodec
        # cannot decode (bad entropy data behind good headers) is retried on the CPU now, and if
        # that fails too it is dropped and refilled before the GPU stage, where nothing can be.
        from stoker.backend import cuda
        from stoker.operators.decoders._hardware_path import check_cpu_failures

        prep["imgs"] = _nvimgcodec_call(st, prep, batch, cuda.current_stream(batch))
        retry = [i for i, img in zip(gpu_idx, prep["imgs"]) if img is None]
        prep["retry"] = {i: batch.pool.submit(_cpu_one, *args, i) for i in retry}
        check_cpu_failures(op, batch, retry, list(prep["retry"].values()))
    return prep


def _nvimgcodec_call(st, prep, batch, stream) -> list:
    """nvImageCodec's decode of ``prep["subs"]``: its images (None where it failed), ordered
    before later work on ``stream``."""
    cp = _cupy_mod()
    # nvImageCodec runs fastest on the legacy default stream (measured); the pipeline's stream
    # then waits for it through an event.
    t0 = time.perf_counter()
    with st.lock:
        st.retire(stream)
        imgs = st.decoder.decode(prep["subs"], params=st.params[prep["gray"]], cuda_stream=0)
        st.in_use.append([imgs, None])
    st.timing["decode_call_s"] += time.perf_counter() - t0
    st.timing["batches"] += 1
    ev = cp.cuda.Event(disable_timing=True)
    ev.record(cp.cuda.Stream.null)
    stream.wait_event(ev)
    return imgs


def mixed_decode(op, kind, batch, inputs, arg_inputs):
    """Decode a batch of encoded samples to a ragged ``TensorListGPU`` of HWC uint8 images."""
    from stoker.backend import cuda
    from stoker.operators.transfer import _ring, device_views
    from stoker.tensors_gpu import TensorListGPU

    cp = cuda._cupy()
    st = _state(op, batch)
    stream = cuda.current_stream(batch)
    t_start = time.perf_counter()
    prep = batch.prepared if isinstance(batch.prepared, dict) and "n" in batch.prepared else None
    if prep is None:
        prep = prepare(op, kind, batch, inputs, arg_inputs)
    if prep.get("hardware"):
        from stoker.operators.decoders._hardware_path import finish_hardware

        return finish_hardware(op, kind, batch, prep, arg_inputs, st, stream, t_start)
    n, gray, gpu_idx = prep["n"], prep["gray"], prep["gpu_idx"]
    cpu_idx, futures = list(prep["cpu_idx"]), prep["futures"]
    results: list = [None] * n
    pool = batch.pool

    def cpu_one(i):
        return _cpu_one(op, kind, batch, prep["enc"], prep["heads"], prep["wins"], arg_inputs, gray, i)

    if gpu_idx:
        dev = batch.device_id or 0
        imgs = prep["imgs"] if "imgs" in prep else _nvimgcodec_call(st, prep, batch, stream)
        retry = []
        for i, img in zip(gpu_idx, imgs):
            if img is None:
                retry.append(i)
            else:
                a = _wrap_image(cp, img, dev)
                a = a if a.ndim == 3 else a[..., None]
                win = prep["wins"][i]
                if win is not None:
                    y0, x0, wh, ww = _clip(win, prep["heads"][i][2], prep["heads"][i][3])
                    if a.shape[0] != wh or a.shape[1] != ww:
                        # a backend that ignored the ROI returned the whole image: crop a view
                        a = a[y0:y0 + wh, x0:x0 + ww]
                results[i] = a
        if retry:
            cpu_idx += retry
            early = prep.get("retry", {})  # started in the CPU stage (see prepare)
            if futures is not None or early:
                futures = (futures or []) + [early[i] if i in early else pool.submit(cpu_one, i) for i in retry]
    if cpu_idx:
        host = [f.result() for f in futures] if futures is not None else [cpu_one(i) for i in cpu_idx]
        buf, offsets = _ring(batch).upload_many(host, stream)
        for i, view in zip(cpu_idx, device_views(buf, offsets, host)):
            results[i] = view  # (a 16-bit PNG under ANY_DATA stays uint16)
    out = TensorListGPU(results, "HWC", prep["sources"][:n] or None)
    st.timing["total_s"] += time.perf_counter() - t_start
    return [out]


def _wrap_image(cp, img, device_id: int):
    """A CuPy view of a decoded nvImageCodec image, keeping the image alive.

    Built from the raw pointer rather than ``cp.asarray``: the image's
    ``__cuda_array_interface__`` names a stream, which would make CuPy
    synchronize on every sample; ordering is already handled by an event.
    """
    cai = img.__cuda_array_interface__
    shape = tuple(cai["shape"])
    strides = cai.get("strides")
    ptr = cai["data"][0]
    itemsize = np.dtype(cai["typestr"]).itemsize
    if strides is None:
        size = int(np.prod(shape)) * itemsize
    else:
        size = sum((n - 1) * st for n, st in zip(shape, strides)) + itemsize
    mem = cp.cuda.UnownedMemory(ptr, size, img, device_id)
    return cp.ndarray(shape, np.dtype(cai["typestr"]), cp.cuda.MemoryPointer(mem, 0), strides=strides)


def _slice_inputs(op, kind, inputs, arg_inputs):
    """image_slice's anchor and shape inputs moved into the per-sample arguments, so that every
    step of the mixed decode (windows, host decodes) sees one input, the encoded data."""
    if kind != "image_slice" or len(inputs) != 3:
        return inputs, arg_inputs
    return inputs[:1], {**arg_inputs, op.ANCHOR_INPUT: inputs[1].samples(), op.SHAPE_INPUT: inputs[2].samples()}


def _impl(kind):
    def run(op, batch, inputs, arg_inputs):
        return mixed_decode(op, kind, batch, *_slice_inputs(op, kind, inputs, arg_inputs))

    def prep(op, batch, inputs, arg_inputs):
        return prepare(op, kind, batch, *_slice_inputs(op, kind, inputs, arg_inputs))

    run.__name__ = f"mixed_{kind}"
    run.__doc__ = f"``fn.decoders.{kind}(device='mixed')``: nvImageCodec plus CPU threads."
    return run, prep


for _kind in ("image", "image_random_crop", "image_crop", "image_slice"):
    _run, _prep = _impl(_kind)
    register_gpu(f"decoders.{_kind}", devices=("mixed",), prepare=_prep)(_run)
