"""How often Python hands the GIL between threads (used by the mixed decoders).

With Python's default 5 ms switch interval, a thread coming back from C code
(a JPEG decode, an OpenCV call, a ctypes call) waits behind a thread running
Python code for up to 5 ms, and a pipeline thread does that dozens of times per
sample. The mixed decoders showed it (H100: a decode loop beside one busy
Python thread ran at 194 img/s with 5 ms and 3,051 img/s with 0.2 ms).

CPU-only pipelines do not change it: on the H100 machine's 16 cores the CPU
training pipeline at 16 threads ran at the same speed with 0.2 ms and 5 ms
(733-742 img/s) and validation slower with 0.2 ms (336-365 against 582 img/s),
benchmarks/results_log.md.
"""

from __future__ import annotations

import sys

from stoker import settings


def shorten_switch_interval() -> float:
    """Set the interpreter's switch interval to ``STOKER_SWITCH_INTERVAL`` seconds (default
    0.0002) unless it is shorter already; ``STOKER_SWITCH_INTERVAL=0`` keeps Python's. This is
    process-wide, hence the variable. Returns the interval in force."""
    value = settings.get().switch_interval
    if value > 0 and sys.getswitchinterval() > value:
        sys.setswitchinterval(value)
    return sys.getswitchinterval()
