"""normalize's per-sample statistics over a ragged batch in one launch (``kernels/ragged_stats.cu``).

Samples of different shapes cannot be reduced as one CuPy array, and reducing them one by one
costs about eight CuPy calls a sample on the host (the GPU speech front end spent most of its
stage thread there). Here the whole batch is planned with NumPy a dimension at a time
(:func:`stats_rows`: no step per sample) and reduced by one kernel launch whatever the batch
size: a thread block per (sample, kept entry) writes the entry's float64 mean and, when asked,
its standard deviation, into flat tables laid out as ``gpu_normalize.build_tables`` returns
them (sample ``i``'s entries at its offset among the kept sizes, in the row-major order of its
kept extents).

The row layout is described in the kernel's header. tests/operators/image/
test_normalize_ragged_stats.py checks the plan and the kernel (built for the host) without a GPU.
"""

from __future__ import annotations

import numpy as np

from stoker.operators.gpu_registry import flat_offsets

MAXD = 8  # as in ragged_stats.cu: the most merged dims of each kind a row describes
ROW = 6 + 4 * MAXD
BLOCK_MAX = 256  # the kernel's shared array: the most threads a block may have
KEPT_EXT, KEPT_STRIDE, RED_EXT, RED_STRIDE = 6, 6 + MAXD, 6 + 2 * MAXD, 6 + 3 * MAXD


def runs(ndim: int, axes) -> list[tuple[int, int, bool]]:
    """``(first dim, last dim, reduced)`` of each run of adjacent dims of one kind (reduced or
    kept). A run is one dim of the kernel's grids: in a row-major sample its dims are contiguous
    with each other, and merging kept dims keeps the order of the kept entries."""
    red = set(axes)
    out: list[tuple[int, int, bool]] = []
    for d in range(ndim):
        if out and out[-1][2] == (d in red):
            out[-1] = (out[-1][0], d, d in red)
        else:
            out.append((d, d, d in red))
    return out


def stats_rows(shapes, axes) -> np.ndarray | None:
    """The kernel's rows (int64, (N, ROW)) for samples of ``shapes`` (N, ndim) reduced over
    ``axes``, the source pointers left 0; None when a kind has more than ``MAXD`` runs. Built a
    run at a time for all samples at once."""
    shapes = np.asarray(shapes, np.int64).reshape(len(shapes), -1)
    n, ndim = shapes.shape
    groups = runs(ndim, axes)
    kept = [g for g in groups if not g[2]]
    red = [g for g in groups if g[2]]
    if len(kept) > MAXD or len(red) > MAXD:
        return None
    # after[:, d]: elements of a contiguous sample per step along dim d - 1 (the product of the
    # extents from d on), so a run ending at dim b has element stride after[:, b + 1]
    after = np.ones((n, ndim + 1), np.int64)
    after[:, :ndim] = np.cumprod(shapes[:, ::-1], axis=1)[:, ::-1]
    rows = np.zeros((n, ROW), np.int64)
    for ext_col, group in ((KEPT_EXT, kept), (RED_EXT, red)):
        for j, (a, b, _) in enumerate(group):
            rows[:, ext_col + j] = np.prod(shapes[:, a:b + 1], axis=1)
            rows[:, ext_col + MAXD + j] = after[:, b + 1]
    rows[:, 2] = np.prod(rows[:, KEPT_EXT:KEPT_EXT + len(kept)], axis=1)
    rows[:, 3] = np.prod(rows[:, RED_EXT:RED_EXT + len(red)], axis=1)
    rows[:, 1] = flat_offsets(rows[:, 2])
    rows[:, 4] = len(kept)
    rows[:, 5] = len(red)
    return rows


def block_size(rows) -> int:
    """Threads a block: a power of two (the kernel's tree), enough for the longest reduction up
    to ``BLOCK_MAX``, at least a warp."""
    longest = int(rows[:, 3].max(initial=0))
    return min(BLOCK_MAX, max(32, 1 << max(longest - 1, 0).bit_length()))


def ragged_stats(xp, upload, ptrs, rows, suffix: str, need_std: bool, ddof: int, eps: float):
    """Means and (with ``need_std``) standard deviations of every sample's kept entries:
    ``([mean table], [std table] or None)``, flat float64 device arrays, as ``compute_stats``
    gives them for one part. ``ptrs`` are the samples' device pointers (contiguous samples),
    ``rows`` from :func:`stats_rows` (filled in here), ``suffix`` the input type's
    (``ragged_stats_<suffix>``). One upload and one launch."""
    from stoker.backend import cuda

    rows[:, 0] = ptrs
    total = int(rows[:, 1][-1] + rows[:, 2][-1]) if len(rows) else 0
    mean = xp.empty(total, xp.float64)
    std = xp.empty(total, xp.float64) if need_std else None
    longest = int(rows[:, 2].max(initial=0))
    if longest:
        kernel = cuda.load_kernel("ragged_stats", f"ragged_stats_{suffix}")
        # without need_std the kernel writes no deviation: the mean table stands in as the argument
        kernel((longest, len(rows), 1), (block_size(rows), 1, 1),
               (upload(rows), mean, mean if std is None else std, np.int32(need_std), np.int64(ddof),
                np.float64(eps)))
    return [mean], None if std is None else [std]

