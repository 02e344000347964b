"""NumPy transcriptions of stoker/kernels/coord_transform.cu and box_encoder.cu (test helpers).

Each function takes a launch's arguments as the GPU modules pass them (device arrays are NumPy
arrays on the null device, tests/null_device.py) and writes its outputs in place, operation for
operation as the kernel computes them: float32 products and sums in the kernel's order, fminf /
fmaxf as ``np.fmin`` / ``np.fmax``, the same tie rules. Registered in ``null_device.EMULATED``,
they let the GPU functions run end to end without a GPU, host plan included, and their outputs
are compared with the CPU operators'.

:func:`host_kernels` compiles the .cu files themselves for the host (g++, CUDA's keywords defined
away, a thread per CUDA thread of a block) and gives emulators with the same signature, so the
kernels' own code runs against the CPU too.
"""

from __future__ import annotations

import ctypes
import pathlib

import host_cuda
import numpy as np

F32 = np.float32
KERNELS = pathlib.Path(__file__).resolve().parents[3] / "stoker" / "kernels"
CT_COLS, BE_COLS, BLOCK = 6, 5, 256
LIMITS = {np.dtype(t): (float(np.iinfo(t).min), float(np.iinfo(t).max))
          for t in (np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64)}


# --- coord_transform.cu ------------------------------------------------------------------------

def _store(dst, at, v):
    """ct_store: float outputs as they are (float64: widened); integers rounded halves away from
    zero in float32, then saturated (NaN: 0)."""
    if dst.dtype.kind == "f":
        dst[at] = v.astype(dst.dtype)
        return
    with np.errstate(invalid="ignore"):
        f = np.floor(np.abs(v) + F32(0.5))
        r = np.where(v < 0, -f, np.where(v > 0, f, np.where(np.isnan(v), v, F32(0))))
    lo, hi = LIMITS[dst.dtype]
    d = r.astype(np.float64)
    out = np.zeros(v.shape, dst.dtype)
    ok = ~np.isnan(d)
    low, high = ok & (d <= lo), ok & (d >= hi)
    mid = ok & ~low & ~high
    out[low], out[high] = np.iinfo(dst.dtype).min, np.iinfo(dst.dtype).max
    out[mid] = d[mid].astype(dst.dtype)
    dst[at] = out


def coord_transform(args):
    """The ``coord_transform`` kernel: (src, in_code, dst, out_code, tab, n)."""
    src, _, dst, _, tab, n = args
    n = int(n)
    tab = np.asarray(tab).reshape(-1)
    rows, mats = tab[:n * CT_COLS].reshape(n, CT_COLS), tab[n * CT_COLS:].view(F32)
    src = np.asarray(src).reshape(-1)
    for in_off, out_off, elems, in_dim, out_dim, mat_off in rows.tolist():
        e = np.arange(elems, dtype=np.int64)
        p, r = e // out_dim, e % out_dim
        m = mat_off + r * (in_dim + 1)
        x = in_off + p * in_dim
        acc = src[x].astype(F32) * mats[m]
        for j in range(1, in_dim):
            acc = acc + src[x + j].astype(F32) * mats[m + j]
        acc = acc + mats[m + in_dim]
        _store(np.asarray(dst).reshape(-1), out_off + e, acc)


# --- box_encoder.cu ----------------------------------------------------------------------------

def iou(b, a):
    """be_iou of boxes ``b`` with anchors ``a`` (broadcasting (..., 4) float32 arrays)."""
    w = np.fmin(b[..., 2], a[..., 2]) - np.fmax(b[..., 0], a[..., 0])
    h = np.fmin(b[..., 3], a[..., 3]) - np.fmax(b[..., 1], a[..., 1])
    w = np.where(w > 0, w, F32(0))
    h = np.where(h > 0, h, F32(0))
    inter = w * h
    with np.errstate(invalid="ignore", over="ignore"):
        uni = ((b[..., 2] - b[..., 0]) * (b[..., 3] - b[..., 1]) + (a[..., 2] - a[..., 0]) * (a[..., 3] - a[..., 1])
               - inter)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(uni > 0, inter / uni, F32(0)).astype(F32)


def box_best_anchor(args):
    """The ``box_best_anchor`` kernel: (boxes, anchors, m, best), one box per block."""
    boxes, anchors, m, best = args
    m = int(m)
    boxes = np.asarray(boxes).reshape(-1, 4)
    anc = np.asarray(anchors)[:4 * m].reshape(m, 4)
    for g in range(boxes.shape[0]):
        v = iou(boxes[g], anc)
        bits = np.where(v == 0, F32(0), v).view(np.uint32).astype(np.uint64)
        best[g] = int(((bits << np.uint64(32)) | np.arange(m, dtype=np.uint64)).max() & np.uint64(0xFFFFFFFF))


def _center(b):
    return np.stack([(b[..., 0] + b[..., 2]) * F32(0.5), (b[..., 1] + b[..., 3]) * F32(0.5),
                     b[..., 2] - b[..., 0], b[..., 3] - b[..., 1]], -1)


def box_encode(args):
    """The ``box_encode`` kernel: (boxes, anchors, best, tab, labels, m, criteria, offset, scale,
    out, out_labels), one thread per (anchor, sample)."""
    boxes, anchors, best, tab, labels, m, crit, offset, scale, out, out_labels = args
    m, crit, offset, scale = int(m), F32(crit), int(offset), F32(scale)
    boxes = np.asarray(boxes).reshape(-1, 4)
    allanc = np.asarray(anchors)
    anc, mean, std = allanc[:4 * m].reshape(m, 4), allanc[4 * m:4 * m + 4], allanc[4 * m + 4:4 * m + 8]
    tab = np.asarray(tab).reshape(-1, BE_COLS)
    out = np.asarray(out).reshape(-1, m, 4)
    a_idx = np.arange(m)
    for s, (first, count, lab_off, row, lout_off) in enumerate(tab.tolist()):
        top, top_box = np.full(m, F32(-1)), np.zeros(m, np.int64)
        for j in range(count):
            v = iou(boxes[first + j], anc)
            up = v >= top
            top, top_box = np.where(up, v, top), np.where(up, j, top_box)
        match = np.where((count > 0) & (top > crit), top_box, -1)
        for j in range(count):
            match = np.where(best[first + j] == a_idx, j, match)
        ac = _center(anc)
        hit = match >= 0
        c = _center(boxes[first + np.where(hit, match, 0)]) if count else np.zeros((m, 4), F32)
        if not offset:
            enc = np.where(hit[:, None], c, ac)
        else:
            c, ac = c * scale, ac * scale
            with np.errstate(all="ignore"):
                xy = ((c[:, :2] - ac[:, :2]) / ac[:, 2:] - mean[:2]) / std[:2]
                lg = np.log((c[:, 2:] / ac[:, 2:]).astype(np.float64)).astype(F32)
                wh = (lg - mean[2:]) / std[2:]
            enc = np.where(hit[:, None], np.concatenate([xy, wh], 1), F32(0))
        out[s] = enc
        lab = np.asarray(labels).reshape(-1)
        lo = np.asarray(out_labels).reshape(-1)
        for a in range(m):
            dst = lout_off + row * a
            lo[dst:dst + row] = lab[lab_off + row * match[a]:lab_off + row * match[a] + row] if hit[a] else 0


MODELS = {"coord_transform": coord_transform, "box_best_anchor": box_best_anchor, "box_encode": box_encode}


# --- the .cu files compiled for the host ---------------------------------------------------------

HOST_SHIM = host_cuda.prelude() + r"""
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline unsigned __float_as_uint(float f) { unsigned u; std::memcpy(&u, &f, 4); return u; }
#include "coord_transform.cu"
#include "box_encoder.cu"

extern "C" void run_coord_transform(const void *src, int ic, void *dst, int oc, const long long *tab, int n,
                                    unsigned gx) {
  launch(gx, n, 256, [&] { coord_transform(src, ic, dst, oc, tab, n); });
}
extern "C" void run_box_best_anchor(const float *boxes, const float *anchors, int m, int *best, unsigned nbox) {
  launch(nbox, 1, 256, [&] { box_best_anchor(boxes, anchors, m, best); });
}
extern "C" void run_box_encode(const float *boxes, const float *anchors, const int *best, const long long *tab,
                               const unsigned char *labels, int m, float crit, int offset, float scale, float *out,
                               unsigned char *out_labels, unsigned n) {
  launch((m + 255) / 256, n, 256, [&] {
    box_encode(boxes, anchors, best, tab, labels, m, crit, offset, scale, out, out_labels);
  });
}
"""


def host_kernels(tmp_dir) -> dict | None:
    """Emulators (as :data:`MODELS`) running the .cu files built with g++, or None without g++."""
    so = host_cuda.build(tmp_dir, HOST_SHIM, "boxkernels")
    if so is None:
        return None

    def ptr(a):
        return ctypes.c_void_p(np.asarray(a).ctypes.data)

    def ct(args):
        src, ic, dst, oc, tab, n = args
        rows = np.asarray(tab).reshape(-1)[:int(n) * CT_COLS].reshape(-1, CT_COLS)
        gx = (int(rows[:, 2].max()) + BLOCK - 1) // BLOCK
        so.run_coord_transform(ptr(src), ctypes.c_int(int(ic)), ptr(dst), ctypes.c_int(int(oc)), ptr(tab),
                               ctypes.c_int(int(n)), ctypes.c_uint(gx))

    def best(args):
        boxes, anchors, m, out = args
        so.run_box_best_anchor(ptr(boxes), ptr(anchors), ctypes.c_int(int(m)), ptr(out),
                               ctypes.c_uint(np.asarray(boxes).size // 4))

    def encode(args):
        boxes, anchors, bst, tab, labels, m, crit, offset, scale, out, out_labels = args
        so.run_box_encode(ptr(boxes), ptr(anchors), ptr(bst), ptr(tab), ptr(labels), ctypes.c_int(int(m)),
                          ctypes.c_float(float(crit)), ctypes.c_int(int(offset)), ctypes.c_float(float(scale)),
                          ptr(out), ptr(out_labels), ctypes.c_uint(np.asarray(tab).size // BE_COLS))

    return {"coord_transform": ct, "box_best_anchor": best, "box_encode": encode}
