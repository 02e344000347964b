"""Keeping freed heap memory in the process for the audio front end's large per-sample arrays.

Why: each utterance allocates a few arrays of 0.2 to 2 MB (waveform, filtered waveform,
spectrogram, mel bands, decibels), and a whole batch of them is freed at once when the pipeline
is done with it. glibc's malloc hands the free top of an arena back to the kernel as soon as it
passes the trim threshold, and the next batch faults those pages in again, zero-filled. With two
pipeline threads (two arenas) that was ~400 page faults and ~1 ms of kernel time per 11 s
utterance on 2 cores, about a fifth of the front end's CPU time, where one thread had ~50 faults;
DALI keeps its buffers. A top pad of 64 MiB lets each arena keep that much free memory for the
next batch: ~1 fault per utterance, for ~5-20 MB more resident memory in the benchmark
(benchmarks/audio_frontend.py).

This is process-wide, as Python's switch interval is (stoker.pipeline.gil): set once, when the
first audio operator is built, only under glibc, and not where the user chose a top pad already
(``MALLOC_TOP_PAD_`` or the ``glibc.malloc.top_pad`` tunable).
"""

from __future__ import annotations

import ctypes
import os
import threading

from stoker import settings

TOP_PAD = 64 << 20
_M_TOP_PAD = -2  # mallopt's parameter number (malloc.h)
_lock = threading.Lock()
_state: list = []  # [result] once tried


def keep_freed_memory() -> bool:
    """Set glibc's malloc top pad to ``TOP_PAD`` once per process; True where it was set now or
    earlier, False where not (another C library, or the user's own setting)."""
    with _lock:
        if not _state:
            _state.append(_set_top_pad())
        return _state[0]


def _set_top_pad() -> bool:
    if settings.external_env("MALLOC_TOP_PAD_") is not None \
            or "glibc.malloc.top_pad" in settings.external_env("GLIBC_TUNABLES", ""):
        return False
    try:
        if not os.confstr("CS_GNU_LIBC_VERSION").startswith("glibc"):
            return False
        return bool(ctypes.CDLL(None).mallopt(_M_TOP_PAD, TOP_PAD))
    except (AttributeError, OSError, ValueError, TypeError):  # not Linux/glibc: nothing to set
        return False
