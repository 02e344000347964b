"""What a mixed decoder keeps between batches: its decoders, threads, helper processes, share.

One :class:`DecoderState` per operator instance (``op._mixed_state``, made by :func:`decoder_state`),
closed by the operator's ``close`` (``Pipeline.close``).
"""
from __future__ import annotations

import collections
import os
import threading
from typing import NamedTuple

from stoker import settings
from stoker.operators.decoders.mixed.common import cupy_mod, nv
from stoker.operators.decoders.mixed.plan import steer_share
from stoker.operators.decoders.mixed.stats import DecodeStats
from stoker.pipeline.gil import shorten_switch_interval
from stoker.pipeline.host_cores import usable_cores


class EngineLane(NamedTuple):
    """The hardware decoder, the stream its call runs on (None: the pipeline's), and its lock."""

    decoder: object
    stream: object
    lock: threading.Lock


class DecoderState:
    """Decoder instance and settings kept on the operator between batches."""

    def __init__(self, device_id: int):
        conf = settings.get()
        self._nv_threads = conf.nvimgcodec_threads or usable_cores()
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
        self.stats = DecodeStats()  # seconds spent and timelines, for benchmarks/gpu_stage_profile.py
        self.out_bytes = 0  # the largest decoded batch so far (bytes): every batch's buffer size
        self.device_id = device_id
        self.hw = None  # nvJPEG hardware engines (stoker.backend.nvjpeg), made on first use
        self._hw_lock = threading.Lock()
        self.lane: EngineLane | None = None  # the engines' decoder, stream and lock
        self.worker = None  # the thread that runs the hardware decode calls
        self.ahead = threading.Semaphore(max(1, conf.decodes_ahead))
        self.closing = False
        # On unless STOKER_NVJPEG_HW=0. Its output is within 0.6 levels of libjpeg-turbo on average
        # on the benchmark set (luma within 0.1; the engines upsample chroma more simply), and it
        # doubled the training pipeline on an H100 (benchmarks/results_log.md).
        self.hw_problem = None if conf.nvjpeg_hw else "disabled"
        # JPEGs the engines cannot take (progressive, arithmetic-coded) and any CPU share decode in helper
        # processes (helper_processes) rather than on the pipeline's pool, which holds the GIL the
        # rest of the pipeline needs: STOKER_CPU_DECODE_PROCESSES helpers (default 4; 0: the pool)
        # of STOKER_CPU_DECODE_THREADS threads each (benchmarks/RESULTS.md has the figures).
        self.procs = None
        self.procs_count = conf.cpu_decode_processes
        # The helpers set their own niceness; read here too, so that a bad value stops the
        # pipeline with its message rather than the helpers.
        self.procs_nice = conf.cpu_decode_nice
        self.procs_threads = max(1, conf.cpu_decode_threads)
        # Cores the helpers leave to the pipeline's own threads (helper_processes.helper_cores says why).
        from stoker.operators.decoders.mixed.helper_processes import default_spare_cores

        spare = conf.cpu_decode_spare_cores
        self.procs_spare = default_spare_cores() if spare is None else spare

    def balance_share(self, engines_wait: float, helpers_wait: float) -> None:
        """Steer the automatic CPU share from one batch's waits (seconds) in the GPU stage
        (:func:`stoker.operators.decoders.mixed.plan.steer_share`); only while the helper
        processes are up and the share is automatic."""
        if not self.share_auto or self.procs is None or not self.procs.ready():
            return
        self.cpu_share = steer_share(self.cpu_share, engines_wait, helpers_wait)
        self.stats.add("share_sum", self.cpu_share)

    def decode_processes(self):
        """The helper processes for the CPU share, when asked for and possible; else None."""
        if self.procs is None and self.procs_count > 0:
            from stoker.operators.decoders import turbo
            from stoker.operators.decoders.mixed.helper_processes import DecodeProcesses, helper_cores

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
                    codec = nv()
                    self._nv_params = {
                        gray: codec.DecodeParams(color_spec=codec.ColorSpec.GRAY if gray else codec.ColorSpec.SRGB,
                                                 apply_exif_orientation=True, allow_any_depth=False)
                        for gray in (False, True)}
                    self._nv_decoder = codec.Decoder(device_id=self.device_id, max_num_cpu_threads=self._nv_threads)
        return self._nv_decoder

    @property
    def params(self) -> dict:
        """nvImageCodec's decode parameters, {gray: DecodeParams}."""
        self.decoder  # noqa: B018 - made together with the decoder
        return self._nv_params

    def hardware(self):
        """The hardware JPEG decoder, or None where nvJPEG's hardware backend is unavailable (made
        once, by whichever thread asks first: :func:`start_engines_early`'s or the first batch's)."""
        with self._hw_lock:
            return self._hardware()

    def _hardware(self):
        if self.hw is None and self.hw_problem is None:
            from stoker.backend.nvjpeg import HardwareDecoder, NvjpegUnavailable

            try:
                self.hw = HardwareDecoder(self.device_id)
                # STOKER_NVJPEG_STREAM=own: the call runs on a stream of its own, ordered after the
                # buffer's allocation by an event. Not the default: it was slower in training and
                # validation on an H100 (benchmarks/results_log.md).
                own = settings.get().nvjpeg_stream == "own"
                cp = cupy_mod()
                with cp.cuda.Device(self.device_id):
                    self.lane = EngineLane(self.hw, cp.cuda.Stream(non_blocking=True) if own else None,
                                           threading.Lock())
            except (NvjpegUnavailable, OSError) as e:
                self.hw_problem = str(e)
        return self.hw

    def submit(self, job):
        """Run ``job`` on the decoder's own thread, beside the pipeline's stages."""
        if self.worker is None:
            from concurrent.futures import ThreadPoolExecutor

            self.worker = ThreadPoolExecutor(1, thread_name_prefix="stoker-nvjpeg")
        return self.worker.submit(job)

    def close(self) -> None:
        self.closing = True
        if self.worker is not None:
            self.worker.shutdown(wait=True)
        self.worker = None
        if self.lane is not None:
            self.lane.decoder.close()
        self.lane = None
        self.hw = None
        if self.procs is not None:
            self.procs.close()
            self.procs = None

    def retire(self, stream) -> None:
        """Drop the images of earlier batches that the pipeline's ``stream`` has passed: an event
        recorded now on ``stream`` marks those not yet marked."""
        cp = cupy_mod()
        if self.in_use and self.in_use[-1][1] is None:
            ev = cp.cuda.Event(disable_timing=True)
            ev.record(stream)
            for entry in self.in_use:
                if entry[1] is None:
                    entry[1] = ev
        while self.in_use and self.in_use[0][1] is not None and self.in_use[0][1].done:
            self.in_use.popleft()


def decoder_state(op, batch) -> DecoderState:
    """The operator's :class:`DecoderState`, made on its first batch."""
    st = getattr(op, "_mixed_state", None)
    if st is None:
        st = op._mixed_state = DecoderState(batch.device_id or 0)
    return st
