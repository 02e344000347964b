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

torch is an optional extra (a JAX user need not install it): without it,
:mod:`stoker.operators.image.resample` uses Pillow, with the same results up
to rounding. ``STOKER_TORCH_RESIZE=0`` turns this path off. torch is imported
when the first resize needs it (about 2 s if the program has not imported it
already), never in the background, so the path taken does not depend on
timing.
"""

from __future__ import annotations

import functools
import importlib.util
import os

import numpy as np

__all__ = ["available", "resize_linear_u8"]

_state: dict = {}


def available() -> bool:
    """Whether the torch path can be used (torch installed and not disabled)."""
    ok = _state.get("ok")
    if ok is None:
        ok = os.environ.get("STOKER_TORCH_RESIZE", "1") != "0" and importlib.util.find_spec("torch") is not None
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


def resize_linear_u8(img: np.ndarray, out_size, taps_fn) -> np.ndarray:
    """Resize a whole uint8 image (H, W) or (H, W, C) to ``out_size`` = (h, w) with the
    antialiased triangle filter, edge pixels repeated as in DALI.

    ``taps_fn(n_in, n_out)`` gives an axis's ``(first, idx, w)``: each output's unclamped
    first tap, the clamped source indices and the normalized weights (see
    :func:`stoker.operators.image.resample.axis_taps_first`); it is called only for the
    axes whose edge outputs need fixing, and its results are cached.
    """
    torch = _state["torch"]
    src = img if img.ndim == 3 else img[:, :, None]
    src = np.ascontiguousarray(src)
    h, w = int(out_size[0]), int(out_size[1])
    out = np.empty((h, w, src.shape[2]), np.uint8)
    t_in = torch.from_numpy(src).permute(2, 0, 1).unsqueeze(0)
    # Written straight into a channels-last view of the NumPy output: torch's own result would be
    # NCHW and cost a transposing copy (longer than the resize itself).
    t_out = torch.from_numpy(out).permute(2, 0, 1).unsqueeze(0)
    _state["kernel"](t_in, (h, w), t_out)
    _fix_edges(src, out, _axis_plan(taps_fn, src.shape[0], h), _axis_plan(taps_fn, src.shape[1], w))
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


def _fix_edges(src: np.ndarray, out: np.ndarray, plan_y, plan_x) -> None:
    """Recompute, in float with clamped taps, the output rows and columns that reach past the edge.

    Each is two small passes: the taps of the edge outputs along one axis, then the full filter
    along the other, as ``np.take`` gathers and batched ``matmul`` (NumPy's fancy indexing and
    einsum are several times slower on these shapes)."""
    (rows, iy, wy), (cols, ix, wx) = plan_y, plan_x
    if rows.size:
        # (r, k) taps of (H, W, C) -> (r, W, C), then the horizontal pass -> (r, w_out, C)
        g = np.take(src, iy[rows], axis=0).astype(np.float32)  # (r, k, W, C)
        r, k = g.shape[:2]
        part = np.matmul(wy[rows][:, None, :], g.reshape(r, k, -1)).reshape(r, *src.shape[1:])
        if out.shape[1] != src.shape[1]:
            g = np.take(part, ix, axis=1)  # (r, w_out, k, C)
            part = np.matmul(wx[None, :, None, :], g)[:, :, 0]
        out[rows] = _round_u8(part)
    if cols.size:
        # (c, k) taps of (H, W, C) -> (H, c, C), then the vertical pass -> (h_out, c, C)
        g = np.take(src, ix[cols], axis=1).astype(np.float32)  # (H, c, k, C)
        part = np.matmul(wx[cols][None, :, None, :], g)[:, :, 0]
        if out.shape[0] != src.shape[0]:
            g = np.take(part, iy, axis=0)  # (h_out, k, c, C)
            k = g.shape[1]
            part = np.matmul(wy[:, None, :], g.reshape(g.shape[0], k, -1)).reshape(g.shape[0], *part.shape[1:])
        out[:, cols] = _round_u8(part)


def _round_u8(x: np.ndarray) -> np.ndarray:
    return np.clip(x + 0.5, 0, 255).astype(np.uint8)  # values are >= 0: truncation is floor
