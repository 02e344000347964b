"""Reliability tests: a thread-leak guard around every test."""

from __future__ import annotations

import threading
import time

import pytest


@pytest.fixture(autouse=True)
def no_thread_leak():
    """Every reliability test must leave no stoker thread running once its pipelines are closed."""
    before = {t.ident for t in threading.enumerate()}
    yield
    deadline = time.monotonic() + 5
    while True:
        extra = [t for t in threading.enumerate() if t.ident not in before and t.is_alive()]
        if not extra or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert not extra, f"threads left running: {[t.name for t in extra]}"
