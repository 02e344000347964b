"""Whole-batch versions of :mod:`stoker.operators.image.geometry`: one NumPy pass, no loop per sample.

The GPU operators build their per-sample kernel tables from these, so that a
batch of 256 costs a few array operations on the host instead of 256 Python
calls. Each function gives exactly the numbers of its per-sample twin (the
same operations in the same order); tests/operators/image/
test_geometry_batch.py checks them against each other (the rotation helpers and the
per-sample argument columns below: test_gpu_plans.py).
"""

from __future__ import annotations

import math

import numpy as np

from stoker.operators.image.geometry import RESIZE_MODES


def round_half_away(x: np.ndarray) -> np.ndarray:
    """Nearest integers, halves away from zero, as int64 (vectorized ``geometry.round_half_away``)."""
    x = np.asarray(x, dtype=np.float64)
    return np.where(x >= 0, np.floor(x + 0.5), -np.floor(-x + 0.5)).astype(np.int64)


def _column(v, n: int) -> np.ndarray:
    """A float64 (n,) column from a scalar or per-sample values; None counts as 0."""
    if v is None:
        return np.zeros(n)
    a = np.asarray(v, dtype=np.float64).reshape(-1)
    return np.broadcast_to(a if a.size > 1 else a[:1] if a.size else np.zeros(1), (n,)).astype(np.float64)


def _f32(x) -> np.ndarray:
    """float64 array of ``x`` rounded to float32 (DALI's C ``float`` values)."""
    return np.asarray(x, np.float64).astype(np.float32).astype(np.float64)


def resize_plans(in_hw: np.ndarray, resize_y=None, resize_x=None, *, mode: str = "default",
                 max_size=None, resize_shorter=None, resize_longer=None,
                 subpixel_scale: bool = True) -> np.ndarray:
    """Output sizes and source mapping of a batch of 2D resizes without a region of interest.

    ``in_hw``: (N, 2) input heights and widths. ``resize_y``/``resize_x``/
    ``resize_shorter``/``resize_longer``: scalars or (N,) per-sample values
    (0 or None = not given, negative = flip); ``max_size``: None, one value or (H, W).
    Returns an (N, 6) float64 array ``(out_h, out_w, lo_y, lo_x, scale_y, scale_x)``
    where output pixel ``j`` samples the source at ``lo + (j + 0.5) * scale`` --
    the rows :func:`stoker.operators.image.gpu_resize.plan` gives one at a time
    (the same float32 roundings as ``geometry.resize_plan``, step by step).
    """
    if mode not in RESIZE_MODES:
        raise ValueError(f"mode must be one of {RESIZE_MODES}, got {mode!r}")
    in_hw = np.asarray(in_hw, dtype=np.float64).reshape(-1, 2)
    n = in_hw.shape[0]
    extent = _f32(in_hw)
    req = _f32(np.stack([_column(resize_y, n), _column(resize_x, n)], axis=1))
    shorter, longer = _f32(_column(resize_shorter, n)), _f32(_column(resize_longer, n))
    # per-sample mode: 0 default, 1 stretch, 2 not_larger, 3 not_smaller
    code = np.full(n, RESIZE_MODES.index(mode))
    code = np.where(longer != 0, 2, code)
    code = np.where(shorter != 0, 3, code)
    req = np.where((shorter != 0)[:, None], shorter[:, None], np.where((longer != 0)[:, None], longer[:, None], req))
    limit = np.zeros((n, 2))
    if max_size is not None:
        ms = np.asarray(max_size, dtype=np.float64).reshape(-1)
        if ms.size not in (1, 2):
            raise ValueError(f"max_size needs 1 or 2 values, got {ms.size}")
        limit[:] = _f32(ms if ms.size == 2 else ms[0])
    given = (req != 0) & (extent != 0)
    safe = np.where(extent != 0, extent, 1.0)
    scale = np.where(extent != 0, _f32(req / safe), 1.0)
    n_given = given.sum(axis=1)

    # "default" / "stretch": given extents as asked; the others by the given scale (2D: one
    # given, so its geometric mean is itself) or kept
    avg = np.where(given, np.abs(scale), 1.0).prod(axis=1)
    keep = (code == 1)[:, None] | (n_given == 0)[:, None]
    out_free = np.where(given, req, np.where(keep, extent, _f32(extent * avg[:, None])))
    out_free = np.where((limit > 0) & (np.abs(out_free) > limit), np.copysign(limit, out_free), out_free)

    # "not_larger" / "not_smaller": one scale for both axes
    s = _f32(np.abs(scale))
    big = np.where(given, s, -np.inf).max(axis=1)
    small = np.where(given, s, np.inf).min(axis=1)
    final = np.where(code == 2, small, big)
    with np.errstate(divide="ignore"):
        caps = np.where(limit > 0, limit / np.where(extent != 0, extent, 0.0), np.inf).min(axis=1)
    final = np.minimum(final, caps)
    exact = given & (np.abs(scale) == final[:, None])
    out_fixed = np.where(exact, req, _f32(extent * np.copysign(final[:, None], scale)))

    out = np.where((n_given == 0)[:, None], extent, np.where((code >= 2)[:, None], out_fixed, out_free))
    size = np.maximum(1, round_half_away(np.abs(out))).astype(np.float64)
    flip = out < 0
    lo = np.where(flip, extent, 0.0)
    hi = np.where(flip, 0.0, extent)
    if subpixel_scale:
        adjust = size != np.abs(out)
        k = np.clip(size / np.where(adjust, np.abs(out), 1.0), -10.0, 10.0)
        c = _f32(lo + hi) * 0.5
        lo = np.where(adjust, _f32(np.clip(c + (lo - c) * k, -1e9, 1e9)), lo)
        hi = np.where(adjust, _f32(np.clip(c + (hi - c) * k, -1e9, 1e9)), hi)
    res = np.empty((n, 6))
    res[:, 0:2] = size
    res[:, 2:4] = lo
    res[:, 4:6] = (hi - lo) / size
    return res


def crop_anchors(in_extent: np.ndarray, crop_extent: np.ndarray, pos: np.ndarray,
                 rounding: str = "round") -> np.ndarray:
    """Start of each crop window, as ``geometry.crop_anchor`` (float32 positions times the
    free extent in float64; halves away from zero with ``rounding="round"``, the fraction
    cut towards zero with "truncate")."""
    prod = np.asarray(pos, np.float32).astype(np.float64) * (
        np.asarray(in_extent, np.int64) - np.asarray(crop_extent, np.int64)).astype(np.float64)
    if rounding == "truncate":
        return np.trunc(prod).astype(np.int64)
    return round_half_away(prod)


def cos_sin_degrees(angles) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin of ``angles`` (degrees) as float64 arrays, each value exactly what
    ``math.cos(math.radians(a))`` / ``math.sin(...)`` give: the per-sample geometry uses ``math``,
    and NumPy's SIMD sin/cos may differ from it in the last bit on some CPUs. The builtins are
    mapped at C level (no Python frame per sample)."""
    rad = list(map(math.radians, np.asarray(angles, np.float64).reshape(-1).tolist()))
    n = len(rad)
    return np.fromiter(map(math.cos, rad), np.float64, n), np.fromiter(map(math.sin, rad), np.float64, n)


def _parity_ceils(x: np.ndarray, like: np.ndarray) -> np.ndarray:
    """Vectorized ``geometry._parity_ceil``: ``ceil(x - 0.01)`` up to the parity of ``like``, at least 1."""
    n = np.ceil(x - 0.01).astype(np.int64)
    n = n + ((n - like) % 2 != 0)
    return np.maximum(n, 1)


def rotated_sizes(in_hw: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """(N, 2) int64 output sizes of :func:`geometry.rotated_size` for (N, 2) input sizes rotated
    by the angles whose cosines and sines (:func:`cos_sin_degrees`) are given."""
    in_hw = np.asarray(in_hw, np.int64).reshape(-1, 2)
    height, width = in_hw[:, 0], in_hw[:, 1]
    c, s = np.abs(cos), np.abs(sin)
    w = width * c + height * s
    h = width * s + height * c
    # nearer a quarter turn the output axes run along the other input axes (see rotated_size)
    quarter = np.where(np.abs(s - c) <= 1e-7, cos > 0, s > c)
    out = np.empty((in_hw.shape[0], 2), np.int64)
    out[:, 0] = np.where(quarter, _parity_ceils(h, width), _parity_ceils(h, height))
    out[:, 1] = np.where(quarter, _parity_ceils(w, height), _parity_ceils(w, width))
    return out


def rotation_matrices(cos: np.ndarray, sin: np.ndarray, in_hw, out_hw, half_centre: bool = False) -> np.ndarray:
    """(N, 6) float64 rows of ``geometry.rotation_matrix`` (OpenCV's integer-centre convention) or,
    with ``half_centre``, of ``rotate._half_centre_matrix(...)[:2]`` (DALI's), for every sample.
    The products go through ``np.matmul`` on (N, 2, 2) @ (N, 2, 1) stacks: the same BLAS
    matrix-vector product per sample as the per-sample ``rot @ v`` (an element-wise sum of
    products can differ from it in the last bit)."""
    n = cos.shape[0]
    in_hw = np.asarray(in_hw, np.float64).reshape(n, 2)
    out_hw = np.asarray(out_hw, np.float64).reshape(n, 2)
    rot = np.empty((n, 2, 2))
    rot[:, 0, 0], rot[:, 0, 1], rot[:, 1, 0], rot[:, 1, 1] = cos, -sin, sin, cos
    # (x, y) centres, contiguous: BLAS takes strided (reversed) operands another way
    co = np.ascontiguousarray(out_hw[:, ::-1]) / 2.0
    ci = np.ascontiguousarray(in_hw[:, ::-1]) / 2.0
    if half_centre:
        t = ci - np.matmul(rot, co[:, :, None])[:, :, 0]
    else:
        t = np.matmul(rot, (0.5 - co)[:, :, None])[:, :, 0] + ci - 0.5
    return np.concatenate([rot, t[:, :, None]], axis=2).reshape(n, 6)


# --- per-sample arguments as whole-batch columns -------------------------------------------------

class PerSample(Exception):  # noqa: N818 - a signal, not an error
    """The batch's arguments take the per-sample rule: ragged or per-frame argument inputs, or
    values the per-sample rule may refuse (it then raises naming the sample). Not a sample
    error, so ``gpu_registry.plan_batch`` lets it through to :func:`plan_rows`."""


def _numeric_rows(op, values, name: str, n: int) -> np.ndarray:
    """Argument input ``values`` (one array per sample) as one (n, k) float64 array, or
    PerSample where the per-sample rule must decide (a per-frame value, samples of different
    sizes, non-numbers, fractions for an integer argument)."""
    from stoker.operators.per_frame import is_per_frame

    if is_per_frame(values):
        raise PerSample(name)
    try:
        arr = np.asarray(values)
    except (ValueError, TypeError):  # samples of different shapes, or not host arrays
        raise PerSample(name) from None
    if arr.dtype.kind not in "biuf":
        raise PerSample(name)
    rows = arr.astype(np.float64).reshape(n, -1) if n else np.zeros((0, 0))
    spec = op.schema.arg(name) if op.schema is not None else None
    kind = getattr(spec, "kind", None)
    if kind in ("int", "bool", "int_list") and arr.dtype.kind == "f" and not (np.mod(rows, 1) == 0).all():
        raise PerSample(name)
    if kind == "bool" and not np.isin(rows, (0.0, 1.0)).all():
        raise PerSample(name)
    return rows


def sample_scalars(op, arg_inputs: dict, name: str, n: int, default=None) -> np.ndarray | None:
    """Scalar argument ``name`` of every sample as a float64 (n,) array: the values
    ``op.sample_args(arg_inputs, i)[name]`` gives one by one (its argument input, else the static
    value, else ``default``); None when none is given. Raises PerSample where a sample's value
    is not exactly one number (the per-sample rule then raises for it)."""
    if name not in arg_inputs:
        v = op.args.get(name)
        v = default if v is None else v
        return None if v is None else np.full(n, float(np.asarray(v, np.float64).reshape(-1)[0]))
    rows = _numeric_rows(op, arg_inputs[name], name, n)
    if rows.shape[1] != 1 and n:
        raise PerSample(name)
    return rows.reshape(n)


def sample_rows(op, arg_inputs: dict, name: str, n: int) -> np.ndarray | None:
    """List argument ``name`` of every sample as a float64 (n, k) array (each sample's values
    flattened, as ``np.asarray(args[name]).reshape(-1)``); None when it is not given. Raises
    PerSample where samples hold different numbers of values."""
    if name not in arg_inputs:
        v = op.args.get(name)
        if v is None:
            return None
        a = np.asarray(v, np.float64).reshape(1, -1)
        return np.ascontiguousarray(np.broadcast_to(a, (n, a.shape[1])))
    return _numeric_rows(op, arg_inputs[name], name, n)


def plan_rows(op, batch, n: int, whole, one) -> tuple:
    """``gpu_registry.plan_batch(op, batch, n, whole, one)``: a tuple of (n, ...) arrays; where
    ``whole`` raises PerSample, ``one(i)`` (a tuple per sample) for every sample, stacked
    (a sample error raised for the sample that fails, as the CPU raises it)."""
    from stoker.operators.gpu_registry import per_sample, plan_batch

    try:
        return plan_batch(op, batch, n, whole, one)
    except PerSample:
        rows = per_sample(op, batch, n, one)
        return tuple(np.asarray(col) for col in zip(*rows))


def out_of_bounds(op, batch, windows: np.ndarray, shapes: np.ndarray, name: str):
    """``out_of_bounds_policy`` applied to every sample's window ``(y0, x0, h, w)`` against its
    shape (``(N, ndim)``, height and width first), as the CPU's ``crop_array`` applies it:
    ``"error"`` raises the CPU's sample error for the first sample whose window leaves it,
    ``"trim_to_shape"`` returns the windows clipped to their samples, ``"pad"`` returns them as
    they are. Returns ``(windows, outside)``, ``outside`` marking the windows that leave their
    sample (before any trim)."""
    windows = np.asarray(windows, np.int64).reshape(-1, 4)
    hw = np.asarray(shapes, np.int64).reshape(len(windows), -1)[:, :2]
    lo, ext = windows[:, :2], windows[:, 2:]
    leaves = (lo < 0) | (lo + ext > hw)
    outside = leaves.any(axis=1)
    policy = op.args.get("out_of_bounds_policy") or "error"
    if not outside.any() or policy == "pad":
        return windows, outside
    if policy == "error":
        i = int(np.flatnonzero(outside)[0])
        k = int(np.flatnonzero(leaves[i])[0])
        a, e = int(lo[i, k]), int(ext[i, k])
        shape = tuple(int(v) for v in np.asarray(shapes)[i])
        raise op.sample_failure(ValueError(
            f"{name}: the crop window [{a}, {a + e}) leaves the sample's axis of extent {int(hw[i, k])} "
            f"(shape {shape}); use out_of_bounds_policy='pad' or 'trim_to_shape'"), batch, i)
    start = np.maximum(lo, 0)
    stop = np.minimum(lo + ext, hw)
    return np.concatenate([start, stop - start], axis=1), outside
