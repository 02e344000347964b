"""The host's share of a hardware-path batch: the helper processes, or else the thread pool.

Samples the engines do not decode (formats they cannot take, the share moved off them) land in
pinned staging laid out as the flat buffer's CPU region: each helper job or pool task writes its
own image there, and the GPU stage uploads the region in one copy. :func:`start` runs in the CPU
stage, :func:`collect` in the GPU stage.
"""
from __future__ import annotations

import time
from typing import NamedTuple

import numpy as np

from stoker.operators.decoders.mixed.common import check_cpu_failures, cpu_one, cupy_mod, raises_on_error
from stoker.operators.decoders.mixed.plan import DecodePlan, helper_candidates


class HostShare(NamedTuple):
    """The host decodes of one batch, as started in the CPU stage."""

    plan: DecodePlan  # the batch's plan, with the helpers' samples and the pool's
    staging: object  # the pinned memory the CPU region is staged in (a helper slot's lease or CuPy's), or None
    stage: np.ndarray | None  # the CPU region's bytes in ``staging``
    pending: object  # the helpers' answer to wait for (helper_processes.Pending), or None
    tasks: list  # the pool's tasks: (cpu_one's arguments, sample, stage, offset in it, shape)
    futures: list | None  # the pool's futures of those tasks (None: no pool, run in the GPU stage)


def cpu_staged(args, i, stage, offset: int, shape: tuple):
    """Decode sample ``i`` on the host and copy it into its place in the pinned staging buffer.
    Returns (image, whether it was staged: False when its shape is not the slot's)."""
    img = cpu_one(*args, i)
    if tuple(img.shape) != shape or img.dtype != np.uint8:
        return img, False
    stage[offset:offset + img.nbytes].reshape(shape)[...] = img
    return img, True


def _ready_processes(st, plan: DecodePlan):
    """The helper processes if they are up; None while they start (the pool decodes this batch)
    or when there are none. With an automatic share they start with the first batch, to take a
    share later."""
    procs = st.decode_processes() if plan.host or st.share_auto else None
    try:
        if procs is not None and not procs.ready():
            procs = None  # still starting: the pool decodes this batch
    except (EOFError, OSError) as e:  # a helper could not start
        st.drop_processes(str(e))
        procs = None
    return procs


def start(op, kind, batch, arg_inputs, st, plan: DecodePlan, enc, arrays, heads, wins, clock) -> HostShare:
    """Start the host decodes of ``plan``: the helper processes' jobs, then the pool's tasks.
    Under ``on_error`` skip/substitute, waits for both here so that failures are found in the
    CPU stage (:func:`stoker.operators.decoders.mixed.common.check_cpu_failures`)."""
    procs = _ready_processes(st, plan)
    if procs is not None:
        from stoker.operators.decoders.mixed.helper_processes import turbo_suitable

        plan = plan.with_helpers(helper_candidates(plan, wins, lambda i: turbo_suitable(arrays[i])))
    pending = None
    if plan.helpers:
        t_send = time.perf_counter()
        staging = procs.lease(plan.cpu_total + sum(arrays[i].size for i in plan.helpers))
        stage = staging.view[:plan.cpu_total]
        pending = _send_to_processes(procs, staging, arrays, wins, plan)
        clock["sent"] = time.perf_counter()
        st.stats.since("proc_send_s", t_send)
        st.stats.add("proc_images", len(plan.helpers))
    else:
        cp = cupy_mod()
        staging = cp.cuda.alloc_pinned_memory(max(plan.cpu_total, 1)) if plan.host else None
        stage = np.frombuffer(staging, np.uint8, plan.cpu_total) if staging is not None else None
    if plan.helpers and not raises_on_error(op, batch):
        t_procs = time.perf_counter()  # failures are found here, in the CPU stage
        plan, pending = plan.with_helpers(_without_failed(st, plan.helpers, pending)), None
        st.cpu_stage_helpers_wait = time.perf_counter() - t_procs
    args = (op, kind, batch, enc, heads, wins, arg_inputs, False)
    tasks = [(args, i, stage, int(plan.offsets[i]) - plan.cpu_start, tuple(plan.shapes[i].tolist()))
             for i in plan.pool]
    futures = [batch.pool.submit(cpu_staged, *t) for t in tasks] if plan.pool and batch.pool else None
    if futures is not None:
        check_cpu_failures(op, batch, plan.pool, futures)
    return HostShare(plan, staging, stage, pending, tasks, futures)


def collect(op, kind, batch, arg_inputs, st, share: HostShare, enc, heads, wins, clock) -> tuple[list, list, float]:
    """In the GPU stage: the host's images as (image, staged) pairs, their samples in the same
    order, and the seconds waited for the helper processes."""
    plan = share.plan
    done = [f.result() for f in share.futures] if share.futures is not None else \
        [cpu_staged(*t) for t in share.tasks]
    cpu_idx, helpers_wait = list(plan.pool), 0.0
    if plan.helpers:  # decoded by the helper processes into the staging (or, when they could not, here)
        t_procs = time.perf_counter()
        failed = _failed(st, share.pending, len(plan.helpers)) if share.pending is not None else set()
        helpers_wait = time.perf_counter() - t_procs
        st.stats.add("proc_wait_s", helpers_wait)
        args = (op, kind, batch, enc, heads, wins, arg_inputs, False)
        for k, i in enumerate(plan.helpers):
            off, shape = int(plan.offsets[i]) - plan.cpu_start, tuple(plan.shapes[i].tolist())
            done.append(cpu_staged(args, i, share.stage, off, shape) if k in failed else
                        (share.stage[off:off + int(np.prod(shape))].reshape(shape), True))
        cpu_idx += plan.helpers
        if share.pending is not None:
            clock["helpers_start"], clock["helpers_end"] = share.pending.span()
    # (under skip/substitute the CPU stage waited for the helpers instead: see start)
    return done, cpu_idx, helpers_wait


def _send_to_processes(procs, lease, arrays, wins, plan: DecodePlan):
    """Copy the encoded bytes of the helpers' samples behind the slot's output region and hand
    their windows to the helper processes."""
    pos, jobs = plan.cpu_total, []
    for i in plan.helpers:
        a = arrays[i]
        lease.view[pos:pos + a.size] = a
        y, x, h, w = wins[i]
        jobs.append((pos, a.size, y, x, h, w, int(plan.offsets[i]) - plan.cpu_start))
        pos += a.size
    return procs.submit(lease, jobs)


def _without_failed(st, idx: list, pending) -> list:
    """``idx`` less the samples the helper processes could not decode (waits for them): the
    pipeline's pool then decodes those, and reports or raises their error."""
    failed = _failed(st, pending, len(idx))
    return [i for k, i in enumerate(idx) if k not in failed]


def _failed(st, pending, count: int) -> set:
    """Positions of the jobs the helpers could not do; all of them when a helper died (the
    pool then decodes the batch's share and the helpers are not used again)."""
    try:
        return set(pending.failed())
    except (EOFError, OSError) as e:
        st.drop_processes(str(e))
        return set(range(count))
