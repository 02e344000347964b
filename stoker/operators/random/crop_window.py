"""Random crop windows with a bounded area fraction and aspect ratio.

The sampler behind ``decoders.image_random_crop``, ``random_resized_crop`` and
``random_crop_generator``. It follows DALI's rules so that the windows have
the same distribution:

* up to ``num_attempts`` times, draw an area fraction uniformly from ``area``
  and an aspect ratio (width / height) log-uniformly from ``aspect_ratio``;
  round the window's sides to integers (at least 1) and accept it when it fits
  the image and its rounded aspect ratio is still in range;
* when the image is so wide (tall) that no window of the minimum area can
  have an allowed aspect ratio, skip the attempts and take the full height
  (width) with the extreme aspect ratio;
* when every attempt fails, take the whole image, or the largest window of an
  allowed aspect ratio, shrunk to at most the maximum area fraction;
* the anchor is uniform over the positions where the window fits.

All randomness comes from the generator passed in (``ctx.rng`` in an
operator), so a window depends only on (seed, iteration, sample).
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["sample_crop_window", "sample_crop_windows", "draws_needed"]


def sample_crop_window(
    rng: np.random.Generator,
    height: int,
    width: int,
    area: tuple[float, float] = (0.08, 1.0),
    aspect_ratio: tuple[float, float] = (3 / 4, 4 / 3),
    num_attempts: int = 10,
) -> tuple[int, int, int, int]:
    """Draw a random crop window ``(y, x, h, w)`` inside a ``height`` x ``width`` image.

    Args:
        rng: the NumPy generator the values are drawn from.
        height, width: size of the image in pixels.
        area: range of the window's area as a fraction of the image's area.
        aspect_ratio: range of the window's width / height.
        num_attempts: how many random windows to try before falling back.

    Returns:
        ``(y, x, h, w)``: top-left corner and size, with ``0 <= y``,
        ``y + h <= height``, ``0 <= x``, ``x + w <= width``. An empty image
        gives ``(0, 0, height, width)``.
    """
    H, W = int(height), int(width)
    if H <= 0 or W <= 0:
        return 0, 0, max(H, 0), max(W, 0)
    a_lo, a_hi = float(area[0]), float(area[1])
    r_lo, r_hi = float(aspect_ratio[0]), float(aspect_ratio[1])
    if a_lo > a_hi or r_lo > r_hi:
        raise ValueError(f"empty range: area={tuple(area)}, aspect_ratio={tuple(aspect_ratio)}")
    if r_lo <= 0:
        raise ValueError(f"aspect_ratio must be positive, got {tuple(aspect_ratio)}")

    # The widest (tallest) window of an allowed aspect ratio that still fits.
    max_w = max(1, int(H * r_hi))
    max_h = max(1, int(W / r_lo))
    min_area = a_lo * H * W

    if H * max_w < min_area:  # too wide for any allowed window of the minimum area
        h, w = H, max_w
    elif W * max_h < min_area:  # too tall
        h, w = max_h, W
    else:
        found = False
        log_lo, log_hi = math.log(r_lo), math.log(r_hi)
        for _ in range(max(0, int(num_attempts))):
            target = rng.uniform(a_lo, a_hi) * H * W
            ratio = math.exp(rng.uniform(log_lo, log_hi))
            # Round half away from zero (C's roundf), not Python's half-to-even.
            w = max(1, math.floor(math.sqrt(target * ratio) + 0.5))
            h = max(1, math.floor(math.sqrt(target / ratio) + 0.5))
            if w <= W and h <= H and r_lo <= w / h <= r_hi:
                found = True
                break
        if not found:
            # Whole image, or the largest window of an allowed aspect ratio,
            # then shrunk (keeping its aspect ratio) to the largest allowed area.
            if W / H > r_hi:
                h, w = H, max_w
            elif W / H < r_lo:
                h, w = max_h, W
            else:
                h, w = H, W
            shrink = math.sqrt(min(1.0, a_hi * H * W / (h * w)))
            h = max(1, int(h * shrink))
            w = max(1, int(w * shrink))

    # Guard against the fallbacks overshooting by rounding (e.g. max_w > W).
    h, w = min(h, H), min(w, W)
    x = int(rng.integers(0, W - w, endpoint=True))
    y = int(rng.integers(0, H - h, endpoint=True))
    return y, x, h, w


def draws_needed(num_attempts: int) -> int:
    """Uniform draws :func:`sample_crop_window` takes at most: two per attempt, then x and y."""
    return 2 * max(0, int(num_attempts)) + 2


def sample_crop_windows(
    uniforms: np.ndarray,
    heights,
    widths,
    area: tuple[float, float] = (0.08, 1.0),
    aspect_ratio: tuple[float, float] = (3 / 4, 4 / 3),
    num_attempts: int = 10,
) -> np.ndarray:
    """:func:`sample_crop_window` for a whole batch at once, window for window the same.

    ``uniforms[i]`` holds the first :func:`draws_needed` values of sample ``i``'s
    stream (``stoker.random_state.batch_uniforms``), the values the per-sample
    function would draw one by one. Returns an (N, 4) int64 array of ``(y, x, h, w)``.
    """
    H = np.asarray(heights, dtype=np.int64).reshape(-1)
    W = np.asarray(widths, dtype=np.int64).reshape(-1)
    n = H.size
    attempts = max(0, int(num_attempts))
    u = np.asarray(uniforms, dtype=np.float64).reshape(n, -1)
    if u.shape[1] < draws_needed(attempts):
        raise ValueError(f"need {draws_needed(attempts)} uniforms per sample, got {u.shape[1]}")
    a_lo, a_hi = float(area[0]), float(area[1])
    r_lo, r_hi = float(aspect_ratio[0]), float(aspect_ratio[1])
    if a_lo > a_hi or r_lo > r_hi:
        raise ValueError(f"empty range: area={tuple(area)}, aspect_ratio={tuple(aspect_ratio)}")
    if r_lo <= 0:
        raise ValueError(f"aspect_ratio must be positive, got {tuple(aspect_ratio)}")
    Hf, Wf = H.astype(np.float64), W.astype(np.float64)
    max_w = np.maximum(1, (Hf * r_hi).astype(np.int64))
    max_h = np.maximum(1, (Wf / r_lo).astype(np.int64))
    min_area = a_lo * Hf * Wf
    too_wide = H * max_w < min_area
    too_tall = ~too_wide & (W * max_h < min_area)
    h = np.where(too_wide, H, np.where(too_tall, max_h, 0))
    w = np.where(too_wide, max_w, np.where(too_tall, W, 0))
    used = np.zeros(n, np.int64)  # draws taken by the attempts
    searching = ~too_wide & ~too_tall & (H > 0) & (W > 0)
    if attempts:
        _search_attempts(u, H, W, (a_lo, a_hi), (r_lo, r_hi), attempts, searching, h, w, used)
    if searching.any():  # every attempt failed: the fallback window
        aspect = Wf / np.where(H > 0, Hf, 1.0)
        fh = np.where(aspect > r_hi, H, np.where(aspect < r_lo, max_h, H))
        fw = np.where(aspect > r_hi, max_w, np.where(aspect < r_lo, W, W))
        shrink = np.sqrt(np.minimum(1.0, a_hi * Hf * Wf / (fh * fw)))
        fh = np.maximum(1, (fh * shrink).astype(np.int64))
        fw = np.maximum(1, (fw * shrink).astype(np.int64))
        h = np.where(searching, fh, h)
        w = np.where(searching, fw, w)
    h, w = np.minimum(h, H), np.minimum(w, W)
    rows = np.arange(n)
    ux = u[rows, np.minimum(used, u.shape[1] - 2)]
    uy = u[rows, np.minimum(used + 1, u.shape[1] - 1)]
    span_x, span_y = W - w + 1, H - h + 1
    x = np.minimum((ux * span_x).astype(np.int64), span_x - 1)
    y = np.minimum((uy * span_y).astype(np.int64), span_y - 1)
    out = np.stack([y, x, h, w], axis=1).astype(np.int64)
    empty = (H <= 0) | (W <= 0)
    if empty.any():
        out[empty] = np.stack([np.zeros(n, np.int64), np.zeros(n, np.int64), np.maximum(H, 0), np.maximum(W, 0)],
                              axis=1)[empty]
    return out


def _search_attempts(u, H, W, area, ratio, attempts: int, searching, h, w, used) -> None:
    """The attempts of :func:`sample_crop_windows` for the samples still ``searching``, in stages
    (the first for every sample, the next two for those it failed, then the rest: most windows
    come from the first attempt, so most of the exp() calls are never made). Fills in ``h``,
    ``w``, ``used`` (draws taken) and clears ``searching`` where a window is found."""
    (a_lo, a_hi), (r_lo, r_hi) = area, ratio
    log_lo, log_hi = math.log(r_lo), math.log(r_hi)
    Hf, Wf = H.astype(np.float64), W.astype(np.float64)
    stages = [b for b in (0, 1, 3) if b < attempts] + [attempts]
    for start, stop in zip(stages, stages[1:]):
        rows = np.flatnonzero(searching)
        if not rows.size:
            break
        uu = u[rows]
        target = (a_lo + (a_hi - a_lo) * uu[:, 2 * start:2 * stop:2]) * (Hf[rows] * Wf[rows])[:, None]
        # math.exp, not np.exp: NumPy's SIMD exp may differ from libm's in the last bit, and the
        # per-sample function uses math.exp.
        logs = log_lo + (log_hi - log_lo) * uu[:, 2 * start + 1:2 * stop:2]
        ratio_ = np.fromiter(map(math.exp, logs.ravel().tolist()), np.float64, logs.size).reshape(logs.shape)
        cw = np.maximum(1, np.floor(np.sqrt(target * ratio_) + 0.5)).astype(np.int64)
        ch = np.maximum(1, np.floor(np.sqrt(target / ratio_) + 0.5)).astype(np.int64)
        ok = (cw <= W[rows, None]) & (ch <= H[rows, None]) & (r_lo <= cw / ch) & (cw / ch <= r_hi)
        hit = ok.any(axis=1)
        first = np.argmax(ok, axis=1)
        k = np.arange(rows.size)
        found = rows[hit]
        h[found], w[found] = ch[k, first][hit], cw[k, first][hit]
        used[found] = 2 * (start + first[hit] + 1)
        used[rows[~hit]] = 2 * stop
        searching[found] = False
