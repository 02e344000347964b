"""Affine warps of volumes (DHWC, DHW) on the CPU, with DALI's sampling rules.

Shared by ``warp_affine`` (a 3x4 matrix) and ``rotate`` (``axis=``). Coordinates follow DALI:
vectors are (x, y, z) = (W, H, D), voxel ``i`` spans ``[i, i + 1)`` so its centre is ``i + 0.5``,
and the 3x4 matrix takes an output centre to its source point. The arithmetic is float32, as
DALI's CPU kernel does it:

* INTERP_NN reads the voxel containing the source point (``floor``);
* INTERP_LINEAR is trilinear: the point moves by -0.5, the 8 neighbours are blended along x,
  then y, then z.

Outside the volume, ``fill`` is read (None: the nearest border voxel, i.e. clamped indices).
NumPy only (no SciPy dependency); the output is processed in slabs of depth so that the
temporary coordinate arrays stay small.
"""

from __future__ import annotations

import numpy as np

from stoker.operators.image.slice import c_cast_array

_SLAB_VOXELS = 1 << 20  # output voxels per slab: bounds the float32/int64 temporaries


def inverse_matrix_3d(m: np.ndarray, inverse_map: bool, op: str = "warp_affine") -> np.ndarray:
    """The 4x4 output-to-input matrix from a 3x4 (or 4x4) one, inverted unless ``inverse_map``."""
    m = np.asarray(m, np.float64).reshape(-1)
    full = np.eye(4)
    full[:3] = m[:12].reshape(3, 4)
    if inverse_map:
        return full
    try:
        return np.linalg.inv(full)
    except np.linalg.LinAlgError:
        raise ValueError(f"{op}: argument 'matrix' is not invertible: {m.tolist()}") from None


def _source_points(m: np.ndarray, zs: np.ndarray, out_h: int, out_w: int):
    """Source (x, y, z) of every output centre in the slab ``zs`` (float32, each (nz, H, W))."""
    f = np.float32
    xs = np.arange(out_w, dtype=f) + f(0.5)
    ys = np.arange(out_h, dtype=f) + f(0.5)
    zc = zs.astype(f) + f(0.5)
    pts = []
    for r in range(3):
        a, b, c, t = (f(v) for v in m[r])
        # the innermost axis' term last, added to the per-row constant (as in the 2D warp)
        rest = (b * ys)[None, :, None] + ((c * zc)[:, None, None] + t)
        pts.append(a * xs[None, None, :] + rest)
    return pts


def volume_warp(img: np.ndarray, full: np.ndarray, out_dhw, fill, nearest: bool) -> np.ndarray:
    """Warp ``img`` (D, H, W[, C]) by the 4x4 output-to-input matrix ``full`` (DALI's convention,
    see the module docstring) to ``out_dhw``. NN keeps the input type; linear returns float32
    (the caller converts, rounding as DALI)."""
    m = np.asarray(full, np.float64)[:3]
    d, h, w = img.shape[:3]
    od, oh, ow = (int(v) for v in out_dhw)
    tail = img.shape[3:]
    out = np.empty((od, oh, ow, *tail), img.dtype if nearest else np.float32)
    if out.size == 0:
        return out
    fill_value = None if fill is None else c_cast_array(np.asarray(float(fill)), img.dtype)
    step = max(1, _SLAB_VOXELS // max(1, oh * ow))
    for z0 in range(0, od, step):
        zs = np.arange(z0, min(od, z0 + step))
        sx, sy, sz = _source_points(m, zs, oh, ow)
        if nearest:
            out[z0:z0 + len(zs)] = _gather(img, np.floor(sz).astype(np.int64), np.floor(sy).astype(np.int64),
                                           np.floor(sx).astype(np.int64), fill_value, (d, h, w))
        else:
            out[z0:z0 + len(zs)] = _trilinear(img, sx, sy, sz, fill_value, (d, h, w))
    return out


def _gather(img, iz, iy, ix, fill_value, dhw):
    """Voxels at integer indices; outside: ``fill_value`` or (None) the clamped border voxel."""
    d, h, w = dhw
    vals = img[np.clip(iz, 0, d - 1), np.clip(iy, 0, h - 1), np.clip(ix, 0, w - 1)]
    if fill_value is not None:
        outside = (iz < 0) | (iz >= d) | (iy < 0) | (iy >= h) | (ix < 0) | (ix >= w)
        if outside.any():
            vals[outside] = fill_value
    return vals


def _trilinear(img, sx, sy, sz, fill_value, dhw):
    f = np.float32
    x, y, z = sx - f(0.5), sy - f(0.5), sz - f(0.5)
    x0, y0, z0 = (np.floor(v).astype(np.int64) for v in (x, y, z))
    qx, qy, qz = x - x0.astype(f), y - y0.astype(f), z - z0.astype(f)
    expand = (...,) + (None,) * (img.ndim - 3)  # weights broadcast over channels
    qx, qy, qz = qx[expand], qy[expand], qz[expand]
    px = f(1) - qx

    def at(dz, dy, dx):
        return _gather(img, z0 + dz, y0 + dy, x0 + dx, fill_value, dhw).astype(f)

    planes = []
    for dz in (0, 1):
        s0 = at(dz, 0, 0) * px + at(dz, 0, 1) * qx
        s1 = at(dz, 1, 0) * px + at(dz, 1, 1) * qx
        planes.append(s0 + (s1 - s0) * qy)
    return planes[0] + (planes[1] - planes[0]) * qz


def rotation_3d(axis, angle_deg: float) -> np.ndarray:
    """3x3 float32 rotation by ``angle_deg`` about ``axis`` (x, y, z), right-hand rule; the axis is
    normalized. Raises ValueError for an axis that is not 3 values or is zero."""
    ax = np.asarray(axis, np.float64).reshape(-1)
    norm = float(np.linalg.norm(ax)) if ax.size == 3 else 0.0
    if ax.size != 3 or not np.isfinite(norm) or norm == 0:
        raise ValueError(f"argument 'axis' must be 3 finite values (x, y, z), not all zero, got {ax.tolist()}")
    x, y, z = ax / norm
    a = np.deg2rad(angle_deg)
    c, s = np.cos(a), np.sin(a)
    k = np.array([[0, -z, y], [z, 0, -x], [-y, x, 0]])
    return (c * np.eye(3) + s * k + (1 - c) * np.outer((x, y, z), (x, y, z))).astype(np.float32)


def rotated_volume_size(in_dhw, axis, angle_deg: float) -> tuple[int, int, int]:
    """DALI's canvas for a rotated volume, (D, H, W): each output extent is the rotated box's
    extent (``ceil(|R| @ in - 0.01)``, float32), raised by one where its parity differs from
    that of the input extent contributing most to it (which keeps the centre on the grid)."""
    in_xyz = np.asarray(in_dhw[::-1], np.float32)
    abs_r = np.abs(rotation_3d(axis, angle_deg))
    ext = np.ceil(abs_r @ in_xyz - np.float32(0.01)).astype(np.int64)
    out = []
    for i in range(3):
        dom = i  # the diagonal wins ties, as DALI starts from it and takes only larger terms
        for j in range(3):
            if abs_r[i, j] > abs_r[i, dom]:
                dom = j
        n = int(ext[i])
        if n % 2 != int(in_xyz[dom]) % 2:
            n += 1
        out.append(n)
    return out[2], out[1], out[0]


def rotation_volume_matrix(in_dhw, out_dhw, axis, angle_deg: float) -> np.ndarray:
    """4x4 output-to-input matrix of a volume rotated by ``angle_deg`` about ``axis`` about its
    centre: the output centre maps to the input centre (DALI's, in float32)."""
    f = np.float32
    rot = rotation_3d(axis, -angle_deg)  # destination to source: the inverse rotation
    ci = np.asarray(in_dhw[::-1], f) * f(0.5)
    co = np.asarray(out_dhw[::-1], f) * f(0.5)
    full = np.eye(4)
    full[:3, :3] = rot
    full[:3, 3] = ci - rot @ co
    return full
