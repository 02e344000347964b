"""Pipelines with many threads shorten the interpreter's GIL switch interval (stoker.pipeline.gil):
with Python's 5 ms, a thread back from C code waits behind another's Python for up to 5 ms, dozens
of times per sample. ``STOKER_SWITCH_INTERVAL=0`` keeps Python's."""

import sys

import pytest

import stoker.fn as fn
from stoker import pipeline_def


@pytest.fixture
def default_interval():
    old = sys.getswitchinterval()
    sys.setswitchinterval(0.005)
    yield
    sys.setswitchinterval(old)


def _build(threads):
    @pipeline_def(batch_size=2, num_threads=threads, device_id=None)
    def p():
        return fn.random.uniform(range=(0, 1))

    pipe = p()
    pipe.build()
    pipe.run()
    pipe.close()


@pytest.mark.parametrize("threads, env, expected", [(4, None, 0.0002), (16, "0.001", 0.001), (2, None, 0.005),
                                                    (8, "0", 0.005)])
def test_switch_interval_follows_thread_count_and_variable(default_interval, monkeypatch, threads, env, expected):
    if env is None:
        monkeypatch.delenv("STOKER_SWITCH_INTERVAL", raising=False)
    else:
        monkeypatch.setenv("STOKER_SWITCH_INTERVAL", env)
    _build(threads)
    assert sys.getswitchinterval() == pytest.approx(expected)
