"""The host cores a process's pipelines size themselves by, shared out between the ranks of a job.

Why: with one process per GPU (``torchrun --nproc-per-node N``), every rank sees the whole
machine: each sized its thread pool, decode helpers and chain workers by all the cores, so N
pipelines ran N times as many busy threads and processes as there are cores, and the hardware
decoders' host threads waited for a core (issue 23). Here a rank that the launcher left free to
run anywhere takes its own contiguous share of the cores: ``cores / N`` of them, the ``LOCAL_RANK``-th
share. Everything stoker sizes by core count reads :func:`usable_cores` or :func:`rank_cores`,
and the decode helpers run on that share (their affinity).

A rank whose affinity is already narrower than the machine (``taskset``, ``numactl``, a launcher
or container that pins it) keeps its affinity as it is: someone chose it. The ranks are read from
``LOCAL_RANK`` / ``LOCAL_WORLD_SIZE`` (torchrun, ``torch.distributed.launch``) or
``SLURM_LOCALID`` / ``SLURM_NTASKS_PER_NODE`` (srun). ``STOKER_RANK_CORES=0`` turns the sharing
off. The training process's own threads are left alone: only stoker's sizing and helpers follow it.
"""

from __future__ import annotations

import os

from stoker import settings


def local_ranks(environ=None) -> tuple[int, int] | None:
    """``(local rank, ranks on this host)`` from the launcher's variables, or None for one rank."""
    read = settings.external_env if environ is None else environ.get  # (environ: given by tests)
    for rank_var, size_var in (("LOCAL_RANK", "LOCAL_WORLD_SIZE"), ("SLURM_LOCALID", "SLURM_NTASKS_PER_NODE")):
        rank, size = read(rank_var), read(size_var)
        if rank is None or size is None:
            continue
        try:
            rank, size = int(rank), int(str(size).split("(")[0])  # (SLURM may write "4(x2)")
        except ValueError:
            return None
        return (rank, size) if size > 1 and 0 <= rank < size else None
    return None


def _affinity() -> list[int] | None:
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None


def rank_cores(environ=None) -> list[int] | None:
    """The cores this process's pipelines use: its affinity, or this rank's share of it where
    several ranks share the host and none was pinned (see the module docstring); None where the
    affinity cannot be asked (not Linux)."""
    allowed = _affinity()
    if allowed is None:
        return None
    ranks = local_ranks(environ)
    if ranks is None or not settings.get().rank_cores:
        return allowed
    rank, size = ranks
    machine = os.cpu_count() or len(allowed)
    if len(allowed) < machine or len(allowed) < 2 * size:  # pinned by someone, or too few to share
        return allowed
    per = len(allowed) // size
    return allowed[rank * per:(rank + 1) * per]


def usable_cores(environ=None) -> int:
    """How many cores this process's pipelines size themselves by (:func:`rank_cores`)."""
    cores = rank_cores(environ)
    return len(cores) if cores else (os.cpu_count() or 1)
