"""How often Python hands the GIL between threads (used by the mixed decoders).

With Python's default 5 ms switch interval, a thread coming back from C code
(a JPEG decode, an OpenCV call, a ctypes call) waits behind a thread running
Python code for up to 5 ms, and a pipeline thread does that dozens of times per
sample. The mixed decoders showed it: a decode loop beside one busy Python
thread ran an order of magnitude faster with 0.2 ms than with 5 ms.

CPU-only pipelines do not change it: on 16 cores the CPU training pipeline ran
at the same speed either way and validation slower with 0.2 ms (figures in
benchmarks/results_log.md).
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
