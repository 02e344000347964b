"""Ranks sharing a host take their own share of its cores (stoker.pipeline.host_cores)."""

import os

import pytest

from stoker import settings
from stoker.pipeline import host_cores

pytestmark = pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="core affinity is Linux's")


@pytest.fixture
def machine(monkeypatch):
    """A 16-core machine whose process may run anywhere (set ``cores`` to pin it)."""
    state = {"cores": set(range(16))}
    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(state["cores"]))
    return state


@pytest.mark.parametrize("env", [{"LOCAL_RANK": "{r}", "LOCAL_WORLD_SIZE": "4"},
                                 {"SLURM_LOCALID": "{r}", "SLURM_NTASKS_PER_NODE": "4(x2)"}])
def test_four_ranks_take_disjoint_shares_of_the_cores(machine, env):
    shares = [host_cores.rank_cores({k: v.format(r=r) for k, v in env.items()}) for r in range(4)]
    assert [len(s) for s in shares] == [4, 4, 4, 4]
    assert sorted(c for s in shares for c in s) == list(range(16))
    assert host_cores.usable_cores({k: v.format(r=2) for k, v in env.items()}) == 4


def test_one_rank_or_none_keeps_the_affinity(machine):
    assert host_cores.rank_cores({}) == list(range(16))
    assert host_cores.rank_cores({"LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1"}) == list(range(16))
    assert host_cores.rank_cores({"LOCAL_RANK": "x", "LOCAL_WORLD_SIZE": "2"}) == list(range(16))


def test_a_rank_pinned_by_its_launcher_keeps_its_pinning(machine):
    machine["cores"] = {8, 9, 10, 11}
    assert host_cores.rank_cores({"LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4"}) == [8, 9, 10, 11]


def test_the_setting_turns_the_sharing_off(machine):
    with settings.override(rank_cores=False):
        assert host_cores.usable_cores({"LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}) == 16


def test_pipelines_size_their_helpers_by_the_share(machine, monkeypatch):
    from stoker.operators.decoders.mixed import helper_processes
    from stoker.pipeline import stage_setup, tuning

    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert tuning.usable_cores() == 8
    assert stage_setup.chain_process_count(16) == 7  # min(threads, cores) - 1 of the rank's 8
    assert helper_processes._allowed_cores() == list(range(8, 16))
    assert helper_processes.helper_cores(2) == list(range(10, 16))  # the decode helpers' affinity
    monkeypatch.delenv("LOCAL_RANK")
    assert stage_setup.chain_process_count(16) == 15
