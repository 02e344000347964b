"""How the mixed decoders split a batch between the hardware engines and the helper processes:
which images go to the host (plan.cheapest_on_the_host) and how the automatic share moves
(DecoderState.balance_share). Pure host logic, so it runs without a GPU."""

import types as pytypes

import numpy as np
import pytest

from stoker import settings
from stoker.operators.decoders import mixed
from stoker.operators.decoders.mixed.plan import cheapest_on_the_host as _cheapest_on_the_host
from stoker.operators.decoders.mixed.stats import DecodeStats
from stoker.settings import SettingsError


def test_small_windows_near_the_top_go_to_the_host():
    sizes = np.array([[400, 600]] * 5)
    wins = [(200, 0, 200, 600),  # whole bottom half: every row read
            (0, 0, 40, 60),  # small, at the top: cheapest
            (0, 0, 400, 600),  # the whole image: dearest
            (300, 500, 40, 60),  # small but at the bottom: all rows above it are read
            (10, 10, 100, 100)]
    assert _cheapest_on_the_host([0, 1, 2, 3, 4], wins, sizes, 2) == [1, 4]
    assert _cheapest_on_the_host([0, 2, 3], wins, sizes, 1) == [3]  # only among the eligible ones
    assert _cheapest_on_the_host([0, 1, 2, 3, 4], wins, sizes, 5) == [0, 1, 2, 3, 4]


def _state(share=0.0, auto=True, ready=True):
    procs = pytypes.SimpleNamespace(ready=lambda: ready)
    st = pytypes.SimpleNamespace(share_auto=auto, cpu_share=share, procs=procs, stats=DecodeStats())
    return st


def _balance(st, engines_wait, helpers_wait):
    mixed.DecoderState.balance_share(st, engines_wait, helpers_wait)


def test_waiting_on_the_engines_raises_the_share_up_to_its_ceiling():
    st = _state()
    for _ in range(10):
        _balance(st, engines_wait=5e-3, helpers_wait=0.0)
    assert st.cpu_share == pytest.approx(0.10)
    for _ in range(100):
        _balance(st, 5e-3, 0.0)
    assert st.cpu_share == pytest.approx(mixed.MAX_AUTO_SHARE)


def test_waiting_on_the_helpers_lowers_it_faster_and_not_below_zero():
    st = _state(share=0.1)
    _balance(st, engines_wait=5e-3, helpers_wait=2e-3)  # the helpers' wait wins
    assert st.cpu_share == pytest.approx(0.08)
    for _ in range(10):
        _balance(st, 0.0, 2e-3)
    assert st.cpu_share == 0.0
    _balance(st, 0.0, 0.0)  # nobody waited: the split is right, it stays
    assert st.cpu_share == 0.0


@pytest.mark.parametrize("state", [dict(auto=False, share=0.3), dict(ready=False), dict()])
def test_a_fixed_share_or_missing_helpers_keep_the_share(state):
    st = _state(**state)
    if state == {}:
        st.procs = None  # no helper processes (no libjpeg-turbo): nothing to hand a share to
    before = st.cpu_share
    _balance(st, 5e-3, 0.0)
    assert st.cpu_share == before


def _fake_nv(monkeypatch):
    from stoker.operators.decoders.mixed import state

    monkeypatch.setattr(state, "nv", lambda: pytypes.SimpleNamespace(
        Decoder=lambda **k: None, DecodeParams=lambda **k: None, ColorSpec=pytypes.SimpleNamespace(GRAY=0, SRGB=1)))


@pytest.mark.parametrize("value", ["lots", "1.5", "-0.1", "nan"])
def test_share_setting_is_checked(monkeypatch, stoker_environ, value):
    _fake_nv(monkeypatch)
    stoker_environ(STOKER_CPU_DECODE_SHARE=value)
    with pytest.raises(SettingsError, match="STOKER_CPU_DECODE_SHARE"):
        mixed.DecoderState(0)
    with pytest.raises(SettingsError, match="STOKER_CPU_DECODE_SHARE"), settings.override(cpu_decode_share=value):
        pass


@pytest.mark.parametrize("value", ["high", "1.5"])
def test_helper_niceness_setting_is_checked(monkeypatch, stoker_environ, value):
    _fake_nv(monkeypatch)
    stoker_environ(STOKER_CPU_DECODE_NICE=value)
    with pytest.raises(SettingsError, match="STOKER_CPU_DECODE_NICE"):
        mixed.DecoderState(0)
    stoker_environ(STOKER_CPU_DECODE_NICE="")
    with settings.override(cpu_decode_nice="-2"):
        assert mixed.DecoderState(0).procs_nice == -2  # an integer is taken
