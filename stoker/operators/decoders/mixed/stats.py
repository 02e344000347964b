"""Where the mixed decoder's time goes: counters and per-batch timelines, kept apart from the logic.

:class:`DecodeStats` is what ``benchmarks/gpu_stage_profile.py`` reads (``_mixed_state.stats``).
The decode path calls its methods at fixed points; none of them changes what is decoded.
"""
from __future__ import annotations

import collections
import time


class DecodeStats:
    """Seconds and counts summed over batches, and the last batches' timelines.

    ``timing`` keys (seconds unless named ``*_images`` or ``batches``): ``prep_scan_s`` (headers
    and windows), ``prep_engines_stage_s`` (staging the engines' call), ``proc_send_s`` /
    ``proc_images`` (sending to the helper processes), ``prep_s`` (the whole host half),
    ``hw_decode_call_s`` / ``hw_engines_s`` / ``hw_images`` (the engines' job, nvJPEG's call
    alone, images), ``hw_copy_wait_s`` / ``hw_ready_wait_s`` / ``hw_call_only_s`` (the last call's
    waits, see :attr:`stoker.backend.nvjpeg.HardwareDecoder.last_run`), ``hw_wait_s`` /
    ``proc_wait_s`` (the GPU stage waiting for the engines / the helpers), ``share_sum`` (the
    automatic share, summed), ``list_batches`` (batches that could not stay flat),
    ``decode_call_s`` (nvImageCodec's call), ``total_s`` and ``batches``.

    ``trace``: one dict per batch of ``time.perf_counter`` seconds: prepare, sent, engines_start,
    engines_end, helpers_start, helpers_end, gpu_stage, inputs_ready."""

    def __init__(self, keep: int = 512):
        self.timing: collections.Counter = collections.Counter()
        self.trace: collections.deque = collections.deque(maxlen=keep)

    def add(self, key: str, value: float) -> None:
        """Add ``value`` to the counter ``key``."""
        self.timing[key] += value

    def since(self, key: str, t0: float) -> float:
        """Add the seconds since ``t0`` (``time.perf_counter``) to ``key``; returns now."""
        now = time.perf_counter()
        self.timing[key] += now - t0
        return now

    def engines_call(self, clock: dict, images: int, t0: float, t_call: float, t_end: float,
                     waits: tuple | None) -> None:
        """One engines' job: started at ``t0``, nvJPEG's call from ``t_call`` to ``t_end``, and
        the call's own waits (staging copy, stream, nvJPEG) when it succeeded."""
        if waits is not None:  # where the call's time went: the staging copy, the stream, nvJPEG
            self.timing.update(dict(zip(("hw_copy_wait_s", "hw_ready_wait_s", "hw_call_only_s"), waits)))
        self.timing["hw_decode_call_s"] += t_end - t0  # from the job's start
        self.timing["hw_engines_s"] += t_end - t_call  # nvJPEG's call alone
        clock["engines_start"] = min(clock.get("engines_start", t_call), t_call)
        clock["engines_end"] = max(clock.get("engines_end", t_end), t_end)
        self.timing["hw_images"] += images

    def batch_done(self, clock: dict) -> None:
        """A batch's timeline is complete."""
        self.trace.append(clock)

    def clear(self) -> None:
        self.timing.clear()
        self.trace.clear()
