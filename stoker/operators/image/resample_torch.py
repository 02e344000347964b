"""Fast 8-bit antialiased linear resize through PyTorch's CPU kernel, when torch is installed.

``torch.nn.functional.interpolate(mode="bilinear", antialias=True)`` on a
uint8 channels-last tensor runs a SIMD (AVX2/AVX-512) separable resampler
with the same filter as DALI's linear resize: a triangle widened by the scale
when shrinking, sampled at pixel centres, an 8-bit intermediate between the
two passes. It is about 3x faster than Pillow's (non-SIMD) resampler and
releases the GIL.

The one difference is at the image border: torch drops the filter taps that
fall outside the image and renormalizes the rest, while DALI repeats the edge
pixel. Only the output rows and columns whose filter reaches past the edge
differ (usually the first and the last of each axis), so those are
recomputed here with DALI's weights; the result is then within one level of
DALI's everywhere, as the Pillow path is.

This path is an opt-in (``STOKER_TORCH_RESIZE=1``): its 8-bit rounding differs
from Pillow's by up to 2 levels on a few percent of values, and a pipeline's
pixels must not change with what happens to be installed. By default
:mod:`stoker.operators.image.resample` uses Pillow whether or not torch is
there (a JAX user need not install it). With the opt-in, torch is imported
when the first resize needs it (about 2 s if the program has not imported it
already), never in the background, so the path taken does not depend on
timing.
"""

from __future__ import annotations

import functools
import importlib.util

import numpy as np

from stoker import settings

__all__ = ["available", "resize_linear_u8"]

_state: dict = {}


def available() -> bool:
    """Whether the torch path can be used (torch installed and not disabled)."""
    ok = _state.get("ok")
    if ok is None:
        ok = settings.get().torch_resize and importlib.util.find_spec("torch") is not None
        if ok:
            try:
                import torch
                import torch.nn.functional as F

                _state["torch"], _state["F"] = torch, F
                _pick_kernel()
            except Exception:  # a broken torch install must not break resizing
                ok = False
        _state["ok"] = ok
    return ok


def resize_linear_u8(img: np.ndarray, out_size, taps_fn) -> np.ndarray | None:
    """Resize a whole uint8 image (H, W) or (H, W, C) to ``out_size`` = (h, w) with the
    antialiased triangle filter, edge pixels repeated as in DALI.

    ``taps_fn(n_in, n_out)`` gives an axis's ``(first, idx, w)``: each output's unclamped
    first tap, the clamped source indices and the normalized weights (see
    :func:`stoker.operators.image.resample.axis_taps_first`); its results are cached.

    Returns None (the caller uses its other path) when the edge fix-up would read the source more
    than _FIX_MAX_PASSES times over (and over _FIX_FLOOR elements): on a thin image (a 1-pixel-high
    strip enlarged to 224 rows) every output row reaches past the edge, and recomputing them all
    cost seconds and a gigabyte where Pillow takes milliseconds (issue 17). Ordinary images have
    one or two edge rows and columns per side.
    """
    torch = _state["torch"]
    src = img if img.ndim == 3 else img[:, :, None]
    h, w = int(out_size[0]), int(out_size[1])
    plan_y, plan_x = _axis_plan(taps_fn, src.shape[0], h), _axis_plan(taps_fn, src.shape[1], w)
    fix = plan_y[0].size * plan_y[1].shape[1] * src.shape[1] + plan_x[0].size * plan_x[1].shape[1] * src.shape[0]
    if fix > max(_FIX_FLOOR, _FIX_MAX_PASSES * src.shape[0] * src.shape[1]):
        return None
    src = np.ascontiguousarray(src)
    out = np.empty((h, w, src.shape[2]), np.uint8)
    t_in = torch.from_numpy(src).permute(2, 0, 1).unsqueeze(0)
    # Written straight into a channels-last view of the NumPy output: torch's own result would be
    # NCHW and cost a transposing copy (longer than the resize itself).
    t_out = torch.from_numpy(out).permute(2, 0, 1).unsqueeze(0)
    _state["kernel"](t_in, (h, w), t_out)
    _fix_edges(src, out, plan_y, plan_x)
    return out if img.ndim == 3 else out[:, :, 0]


def _kernel_out(t_in, size, t_out) -> None:
    _state["torch"]._C._nn._upsample_bilinear2d_aa(t_in, size, False, None, None, out=t_out)


def _kernel_copy(t_in, size, t_out) -> None:
    t_out.copy_(_state["F"].interpolate(t_in, size=size, mode="bilinear", antialias=True, align_corners=False))


def _pick_kernel() -> None:
    """The out= entry point of torch's kernel when this torch has it (checked against the public
    ``interpolate`` once), else ``interpolate`` and a copy."""
    torch = _state["torch"]
    probe = np.arange(7 * 9 * 3, dtype=np.uint8).reshape(7, 9, 3)
    t_in = torch.from_numpy(probe).permute(2, 0, 1).unsqueeze(0)
    want = np.empty((3, 4, 3), np.uint8)
    got = np.empty((3, 4, 3), np.uint8)
    _kernel_copy(t_in, (3, 4), torch.from_numpy(want).permute(2, 0, 1).unsqueeze(0))
    try:
        _kernel_out(t_in, (3, 4), torch.from_numpy(got).permute(2, 0, 1).unsqueeze(0))
        ok = np.array_equal(got, want)
    except (AttributeError, TypeError, RuntimeError):
        ok = False
    _state["kernel"] = _kernel_out if ok else _kernel_copy


@functools.lru_cache(maxsize=4096)
def _axis_plan_cached(taps_fn, n_in: int, n_out: int):
    first, idx, w = taps_fn(n_in, n_out)
    edges = _edge_outputs(n_in, first, w)
    return edges, idx, w.astype(np.float32)


def _axis_plan(taps_fn, n_in, n_out):
    return _axis_plan_cached(taps_fn, int(n_in), int(n_out))


def _edge_outputs(n_in: int, first: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Output indices whose filter gives weight to a tap outside [0, n_in)."""
    k = w.shape[1]
    raw = first[:, None] + np.arange(k)[None, :]
    outside = ((raw < 0) | (raw >= n_in)) & (w != 0)
    return np.flatnonzero(outside.any(axis=1))


# Beyond this much edge fix-up work (source pixels read, per channel), resize_linear_u8 declines.
_FIX_MAX_PASSES, _FIX_FLOOR = 4, 1 << 20
# Float32 elements one gather of _fix_edges may hold (16 MiB). Usually the edge outputs are the first
# and last row and column; on a thin image (1 x 100000 to 224 x 224) every output row is an edge row
# and gathering them all at once took 1 GB per array (issue 17), so they are done in chunks.
_FIX_CHUNK_ELEMENTS = 4 << 20


def _fix_edges(src: np.ndarray, out: np.ndarray, plan_y, plan_x) -> None:
    """Recompute, in float with clamped taps, the output rows and columns that reach past the edge.

    Each is two small passes: the taps of the edge outputs along one axis, then the full filter
    along the other, as ``np.take`` gathers and batched ``matmul`` (NumPy's fancy indexing and
    einsum are several times slower on these shapes), over as many edge outputs at a time as keep
    the gathers under _FIX_CHUNK_ELEMENTS (the same arithmetic, so the same result, in any chunks)."""
    (rows, iy, wy), (cols, ix, wx) = plan_y, plan_x
    channels = src.shape[2]
    # per edge row: its vertical taps over the source width, then the horizontal taps of every output
    per_row = max(iy.shape[1] * src.shape[1], out.shape[1] * ix.shape[1]) * channels
    for part_rows in _chunks(rows, per_row):
        out[part_rows] = _round_u8(_edge_rows(src, out, part_rows, iy, wy, ix, wx))
    per_col = max(src.shape[0] * ix.shape[1], out.shape[0] * iy.shape[1]) * channels
    for part_cols in _chunks(cols, per_col):
        out[:, part_cols] = _round_u8(_edge_cols(src, out, part_cols, iy, wy, ix, wx))


def _chunks(index: np.ndarray, per_item: int):
    step = max(1, _FIX_CHUNK_ELEMENTS // max(1, per_item))
    for start in range(0, index.size, step):
        yield index[start:start + step]


def _edge_rows(src, out, rows, iy, wy, ix, wx) -> np.ndarray:
    # (r, k) taps of (H, W, C) -> (r, W, C), then the horizontal pass -> (r, w_out, C)
    g = np.take(src, iy[rows], axis=0).astype(np.float32)  # (r, k, W, C)
    r, k = g.shape[:2]
    part = np.matmul(wy[rows][:, None, :], g.reshape(r, k, -1)).reshape(r, *src.shape[1:])
    if out.shape[1] != src.shape[1]:
        g = np.take(part, ix, axis=1)  # (r, w_out, k, C)
        part = np.matmul(wx[None, :, None, :], g)[:, :, 0]
    return part


def _edge_cols(src, out, cols, iy, wy, ix, wx) -> np.ndarray:
    # (c, k) taps of (H, W, C) -> (H, c, C), then the vertical pass -> (h_out, c, C)
    g = np.take(src, ix[cols], axis=1).astype(np.float32)  # (H, c, k, C)
    part = np.matmul(wx[cols][None, :, None, :], g)[:, :, 0]
    if out.shape[0] != src.shape[0]:
        g = np.take(part, iy, axis=0)  # (h_out, k, c, C)
        k = g.shape[1]
        part = np.matmul(wy[:, None, :], g.reshape(g.shape[0], k, -1)).reshape(g.shape[0], *part.shape[1:])
    return part


def _round_u8(x: np.ndarray) -> np.ndarray:
    return np.clip(x + 0.5, 0, 255).astype(np.uint8)  # values are >= 0: truncation is floor
