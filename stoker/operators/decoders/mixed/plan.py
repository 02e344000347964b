"""The hardware path's plan for one batch: which sample decodes where, and where its pixels go.

Pure functions of arrays (no device, no decoder, no operator), so they are tested on the CPU
(tests/operators/decoders/test_mixed_plan.py). :func:`plan_batch` turns the batch's sizes,
windows, engine eligibility and host share into a frozen :class:`DecodePlan`;
:meth:`DecodePlan.with_helpers` says which of the host's samples the helper processes take.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from stoker.operators.gpu_registry import flat_offsets

MAX_AUTO_SHARE = 0.4  # the automatic share's ceiling: the rest of the pipeline needs host cores too


@dataclasses.dataclass(frozen=True)
class DecodePlan:
    """Where each sample of a batch decodes and where its pixels land in the batch's flat buffer.

    The buffer holds the engines' images first, then, back to back, those decoded on the host
    (its *CPU region*, uploaded in one copy). Index lists are sample positions in the batch, in
    the order their slots are laid out; treat them as read-only."""

    n: int
    """Samples in the batch."""
    shapes: np.ndarray
    """(N, 3) int64: each sample's output shape (h, w, 3); zero rows where the size is unknown
    (the host decoder then reports the sample or returns an image of its own size)."""
    offsets: np.ndarray
    """(N,) int64: each sample's byte offset in the flat buffer."""
    engines: list
    """Samples for the hardware engines' one call."""
    moved: list
    """The host share: eligible samples moved off the engines (:func:`cheapest_on_the_host`)."""
    host: list
    """Every sample decoded on the host, in slot order: those the engines cannot take (in batch
    order), then ``moved``."""
    helpers: list = dataclasses.field(default_factory=list)
    """Of ``host``, those the helper processes decode (see :meth:`with_helpers`)."""
    pool: list = dataclasses.field(default_factory=list)
    """Of ``host``, those the pipeline's thread pool decodes: the rest."""
    cpu_start: int = 0
    """Byte offset of the CPU region in the flat buffer."""
    cpu_total: int = 0
    """Bytes of the CPU region."""
    total: int = 0
    """Bytes of the whole batch."""

    def with_helpers(self, helpers: list) -> DecodePlan:
        """The same plan with ``helpers`` (a subset of ``host``) decoded by the helper processes
        and the rest of ``host`` on the pool."""
        taken = set(helpers)
        return dataclasses.replace(self, helpers=list(helpers), pool=[i for i in self.host if i not in taken])


def plan_batch(sizes: np.ndarray, win_arr: np.ndarray, wins: list, eligible: list, cpu_share: float) -> DecodePlan:
    """The plan of a batch of ``len(sizes)`` samples.

    ``sizes``: (N, 2) image sizes (zero where unknown or refused: no slot); ``win_arr``: (N, 4)
    clipped windows (y0, x0, h, w), zero rows where unknown, and ``wins`` the same as tuples (None
    where unknown); ``eligible``: the samples the engines can take; ``cpu_share``: the fraction
    of those moved to the host, the ones cheapest there (:func:`cheapest_on_the_host`)."""
    n = len(sizes)
    shapes = np.zeros((n, 3), np.int64)
    shapes[:, :2] = win_arr[:, 2:]
    shapes[:, 2] = np.where(sizes[:, 0] > 0, 3, 0)
    # The host takes the images cheapest for it (cheapest_on_the_host).
    n_cpu = int(round(len(eligible) * cpu_share))
    moved = cheapest_on_the_host(eligible, wins, sizes, n_cpu) if n_cpu else []
    chosen = set(moved)
    engines = [i for i in eligible if i not in chosen] if moved else list(eligible)
    taken = set(engines)
    host = [i for i in range(n) if i not in taken and i not in chosen] + moved
    nbytes = shapes.prod(axis=1)
    offsets = np.zeros(n, np.int64)
    order = engines + host
    offsets[order] = flat_offsets(nbytes[order])
    return DecodePlan(n=n, shapes=shapes, offsets=offsets, engines=engines, moved=moved, host=host,
                      helpers=[], pool=list(host), cpu_start=int(nbytes[engines].sum()),
                      cpu_total=int(nbytes[host].sum()) if host else 0, total=int(nbytes.sum()))


def helper_candidates(plan: DecodePlan, wins: list, suitable: Callable[[int], bool]) -> list:
    """The host samples the helper processes may decode: the share moved off the engines, and
    the JPEGs they cannot take that libjpeg-turbo decodes as the CPU decoder would (``suitable``:
    progressive ones; not EXIF-rotated ones)."""
    chosen = set(plan.moved)
    return [i for i in plan.host if i in chosen or (wins[i] is not None and suitable(i))]


def cheapest_on_the_host(eligible: list, wins: list, sizes: np.ndarray, count: int) -> list:
    """The ``count`` samples of ``eligible`` whose window costs libjpeg-turbo least relative to
    what the engines spend on them. The engines decode every bitstream whole, whatever the
    window; libjpeg-turbo reads the Huffman data only down to the window's last row and
    transforms only the window, so a small window near the top of its image is cheap on the
    host and as dear as any on the engines. Cost model, as a fraction of a whole decode: 0.6 for
    the entropy decoding of rows ``0..y+h`` and 0.4 for the window's pixels."""
    idx = np.asarray(eligible, np.int64)
    win = np.asarray([wins[i] for i in eligible], np.float64).reshape(-1, 4)
    h, w = sizes[idx, 0].astype(np.float64), sizes[idx, 1].astype(np.float64)
    cost = 0.6 * (win[:, 0] + win[:, 2]) / h + 0.4 * (win[:, 2] * win[:, 3]) / (h * w)
    return sorted(idx[np.argsort(cost, kind="stable")[:count]].tolist())


def steer_share(share: float, engines_wait: float, helpers_wait: float, ceiling: float = MAX_AUTO_SHARE) -> float:
    """The automatic host share after one batch whose GPU stage waited ``engines_wait`` seconds for
    the engines' call, then ``helpers_wait`` for the helper processes. Waiting on the helpers
    lowers the share at once; waiting on the engines while the helpers were done raises it a
    little. So the share settles where both finish together, on the machine at hand (DALI's
    ``hw_decoder_load`` is the same split, fixed by hand)."""
    if helpers_wait > 0.5e-3:
        return max(0.0, share - 0.02)
    if engines_wait > 1e-3:
        return min(ceiling, share + 0.01)
    return share
