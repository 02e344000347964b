"""Poisson counts from element-indexed Philox words: ``noise.shot``'s sampler, the same values on
the CPU (NumPy, vectorised over a sample) and the GPU (``kernels/shot_noise.cu``, a thread per
element).

Why a sampler of our own: NumPy's ``Generator.poisson`` consumes a sequential stream (a variable
number of draws per element), so no kernel can compute element j without running elements
0 .. j - 1 first. Here element j of a sample reads only the Philox4x64-10 words ``2j`` and
``2j + 1`` of draws ``0, 1, ...`` under the sample's key (``element_rng``), so any element can be
computed alone, and both devices do exactly the same float64 steps on them.

The sampler, by lambda (``lam = max(0, x / factor)``):

- ``lam < SEARCH_BELOW`` (16): inversion by sequential search of the CDF with one uniform
  ``u = (word 2j of draw 0 >> 11) 2^-53``: the count is the first k with ``u < F(k)``, where
  ``p(0) = exp(-lam)``, ``p(k) = p(k - 1) * lam / k`` and ``F(k) = F(k - 1) + p(k)``; exact in
  distribution up to float64 rounding (about 1e-16 per probability). It takes ``lam + 1`` steps
  on average, which is why it stops at 16: beyond, the rejection method below costs less on both
  devices. The search ends at ``SEARCH_MAX`` (64) whatever ``u``: P(X > 64) < 1e-19 for
  ``lam < 16``, so only rounding (u within a few ulps of 1) can reach it.
- ``SEARCH_BELOW <= lam < 2^52``: PTRS, Hörmann's transformed rejection with squeeze (1993; what
  NumPy's ``poisson`` uses from lam 10 on), with its constants and tests as NumPy writes them,
  but a bounded number of rounds with fixed draws: round r reads words ``2j`` (U) and ``2j + 1``
  (V) of draw r. A round accepts with probability about 0.79 at lam 16 and 0.87 at 255
  (measured over 200,000 elements), so ``ROUNDS`` (16) rounds leave an element unaccepted with
  probability about 1e-11; it then takes ``floor(lam)``. The acceptance test needs
  log P(X = k): ``log(k!)`` from a table below 16, else Stirling's series to 1/k^9, written as
  ``(k - lam) - k log1p((k - lam) / lam) - ...`` so that large
  lambdas do not cancel (NumPy's ``-lam + k log(lam) - lgamma(k + 1)`` loses about ``lam log(lam)`` ulps).
- ``lam >= 2^52``, infinite or NaN: the count is ``lam`` itself (the noise, about 2^-26 of it,
  is far below float32's resolution; the float64 counts would not be integers anyway).

Bit-for-bit the same on both devices: every step is an IEEE operation (+, -, *, /, sqrt, floor,
frexp, ldexp, comparisons), which NumPy and CUDA round alike, given that the kernel is compiled
with ``--fmad=false`` (no fused multiply-adds). ``exp`` and ``log`` are not correctly rounded
in either library (and differ in their last bits), so this module has its own, built from those
operations (Cody-Waite reduction and a Taylor polynomial; ``atanh`` series): within 2 ulps, and
identical on both devices. Constants are float64 literals written the same in both files
(``tests/operators/filters/test_element_poisson.py`` compares them).

Distribution (``test_element_poisson.py``, 400,000 draws per lambda, against NumPy's
``poisson`` by a chi-square test of the two samples' histograms): mean and variance within
0.5% of lambda and chi-square p-values above 0.01 at lambda 0.1, 1, 5, 12.75 (255 / 20), 16,
50 and 255.

CPU cost (``benchmarks/cpu_noise.py``, ``noise.shot`` on a 224x224x3 uint8 image, one core): about
1.3x SFC64's ``poisson`` at factor 20 (8-bit search as a table look-up), about 7x at factor 1
(PTRS: our logs, and a bulk Philox call per extra round).
"""

from __future__ import annotations

import numpy as np

from stoker.operators.filters import element_rng

SEARCH_BELOW = 16.0  # lambdas below: sequential search; from here: PTRS
PTRS_BELOW = 4503599627370496.0  # 2^52: lambdas from here (and NaN) are their own count
SEARCH_MAX = 64  # the sequential search's last count
ROUNDS = 16  # PTRS rounds before falling back to floor(lam)

LN2_HI = 6.93147180369123816490e-01  # ln 2 in two parts (fdlibm's): k * LN2_HI is exact
LN2_LO = 1.90821492927058770002e-10
INV_LN2 = 1.4426950408889634
SQRT_HALF = 0.7071067811865476
TWO_PI = 6.283185307179586
# 1 / n!, n = 0 .. 14: exp(r) on |r| <= ln(2) / 2 to below 1e-17
EXP_C = (1.0, 1.0, 0.5, 0.16666666666666666, 0.041666666666666664, 0.008333333333333333,
         0.001388888888888889, 0.0001984126984126984, 2.48015873015873e-05, 2.7557319223985893e-06,
         2.755731922398589e-07, 2.505210838544172e-08, 2.08767569878681e-09, 1.6059043836821613e-10,
         1.1470745597729725e-11)
# 1 / (2i + 1), i = 0 .. 10: atanh(s) / s in s^2 on |s| <= 0.1716 to below 1e-18
LOG_C = (1.0, 0.3333333333333333, 0.2, 0.14285714285714285, 0.1111111111111111, 0.09090909090909091,
         0.07692307692307693, 0.06666666666666667, 0.058823529411764705, 0.05263157894736842,
         0.047619047619047616)
# log(k!), k = 0 .. 15
LOGFACT = (0.0, 0.0, 0.6931471805599453, 1.791759469228055, 3.1780538303479458, 4.787491742782046,
           6.579251212010101, 8.525161361065415, 10.60460290274525, 12.801827480081469,
           15.104412573075516, 17.502307845873887, 19.987214495661885, 22.552163853123425,
           25.19122118273868, 27.89927138384089)
# Stirling's series of log(k!) - (k log k - k + log(2 pi k) / 2): 1/(12k) - 1/(360k^3) + ...
STIRLING_C = (0.08333333333333333, -0.002777777777777778, 0.0007936507936507937, -0.0005952380952380953,
              0.0008417508417508417)


def exp_(x: np.ndarray) -> np.ndarray:
    """exp of float64 ``x`` in [-700, 700], by IEEE operations only (the kernel's ``exp_``)."""
    k = np.floor(x * INV_LN2 + 0.5)
    r = (x - k * LN2_HI) - k * LN2_LO
    p = np.full_like(r, EXP_C[-1])
    for c in EXP_C[-2::-1]:  # Horner, in place: p * r, then + c (two roundings, as on the GPU)
        p *= r
        p += c
    return np.ldexp(p, k.astype(np.int32), out=p)


def log_(x: np.ndarray) -> np.ndarray:
    """log of positive, finite, normal float64 ``x``, by IEEE operations only (the kernel's
    ``log_``): ``x = m 2^e`` with m in [sqrt(1/2), sqrt(2)), ``log m = 2 atanh((m-1)/(m+1))``."""
    m, e = np.frexp(x)
    low = m < SQRT_HALF
    m = np.where(low, m * 2.0, m)  # exact
    e = (e - low).astype(np.float64)
    s = (m - 1.0) / (m + 1.0)  # m - 1 exact
    z = s * s
    p = np.full_like(z, LOG_C[-1])
    for c in LOG_C[-2::-1]:
        p *= z
        p += c
    p *= s + s
    p += e * LN2_LO
    p += e * LN2_HI
    return p


def log1p_(t: np.ndarray) -> np.ndarray:
    """log(1 + t) for t > -1 with 1 + t normal, accurate for small t: ``log(u) t / (u - 1)``
    with ``u = 1 + t`` (the kernel's ``log1p_``)."""
    u = 1.0 + t
    same = u == 1.0
    d = np.where(same, 1.0, u - 1.0)
    return np.where(same, t, log_(u) * (t / d))


def logpmf(k: np.ndarray, lam: np.ndarray) -> np.ndarray:
    """log P(X = k) of Poisson(lam), k >= 0 whole numbers (float64), lam > 0."""
    out = np.empty_like(lam)
    few = k < len(LOGFACT)
    if few.any():
        kf, lf = k[few], lam[few]
        out[few] = (-lf + kf * log_(lf)) - np.take(LOGFACT, kf.astype(np.intp))
    many = ~few
    if many.any():
        kk, ll = k[many], lam[many]
        d = kk - ll
        ik = 1.0 / kk
        z = ik * ik
        corr = np.full_like(z, STIRLING_C[-1])
        for c in STIRLING_C[-2::-1]:
            corr = corr * z + c
        corr = corr * ik
        out[many] = ((d - kk * log1p_(d / ll)) - 0.5 * log_(TWO_PI * kk)) - corr
    return out


def uniform53(w: np.ndarray) -> np.ndarray:
    """[0, 1) float64 from the top 53 bits of uint64 words: exact."""
    return (w >> np.uint64(11)).astype(np.float64) * 2.0 ** -53


def uniform_open(w: np.ndarray) -> np.ndarray:
    """(0, 1) float64 ``(2m + 1) 2^-53`` from the top 52 bits m of uint64 words: exact, never 0."""
    return ((w >> np.uint64(12)) << np.uint64(1) | np.uint64(1)).astype(np.float64) * 2.0 ** -53


def search(lam: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Counts for ``lam < SEARCH_BELOW``: the first k with ``u < F(k)``, at most SEARCH_MAX.
    Vectorised over the elements still searching (their number shrinks every step)."""
    p = exp_(-lam)
    f = p.copy()
    k = np.zeros_like(lam)
    on = np.flatnonzero(u >= f)
    lam_on, u_on, p_on, f_on = lam[on], u[on], p[on], f[on]
    for i in range(1, SEARCH_MAX + 1):
        if not on.size:
            break
        k[on] = i
        p_on = p_on * lam_on / float(i)
        f_on = f_on + p_on
        more = u_on >= f_on
        on, lam_on, u_on, p_on, f_on = on[more], lam_on[more], u_on[more], p_on[more], f_on[more]
    return k


GUIDE_BITS = 8  # a guide table of 2^8 buckets of u per lambda


def search_thresholds(table: np.ndarray) -> np.ndarray:
    """(t, SEARCH_MAX + 1) int64 ``ceil(F(k) 2^53)`` of lambdas ``table`` (< SEARCH_BELOW), F by
    :func:`search`'s steps: ``u < F(k)`` exactly when ``u 2^53 < ceil(F(k) 2^53)``."""
    p = exp_(-table)
    f = p.copy()
    cols = [f]
    for i in range(1, SEARCH_MAX + 1):
        p = p * table / float(i)
        f = f + p
        cols.append(f)
    return np.ceil(np.stack(cols, 1) * 2.0 ** 53).astype(np.int64)


def search_coded(table: np.ndarray, codes: np.ndarray, m: np.ndarray) -> np.ndarray:
    """:func:`search`'s counts where ``lam = table[codes]`` takes few values (8-bit samples): the
    CDF once per value, then per element a guide-table look-up (Chen and Asau, 1974: bucket
    ``m >> 45`` of the 53-bit uniform ``m`` starts at its first possible count) and a step or two
    up. ``m``: the elements' ``word >> 11`` (int64)."""
    width = SEARCH_MAX + 1
    thr = search_thresholds(np.minimum(table, SEARCH_BELOW))  # (rows from 16 on: unused)
    rows = np.arange(len(table), dtype=np.int64)
    flat = (thr + (rows << 54)[:, None]).reshape(-1)  # sorted: rows apart, each non-decreasing
    bounds = (rows[:, None] << 54) + (np.arange(1 << GUIDE_BITS, dtype=np.int64) << (53 - GUIDE_BITS))
    guide = np.searchsorted(flat, bounds.reshape(-1), side="right") - np.repeat(rows * width, 1 << GUIDE_BITS)
    thr = thr.reshape(-1)
    codes = codes.astype(np.int64)
    k = guide[(codes << GUIDE_BITS) + (m >> (53 - GUIDE_BITS))]  # count of thresholds <= the bucket's start
    on = np.arange(k.size)
    base = codes * width
    while on.size:  # k -> the count of thresholds <= m (at most a few more)
        kk = k[on]
        up = kk < width
        up[up] = thr[base[on[up]] + kk[up]] <= m[on[up]]
        on = on[up]
        k[on] += 1
    return np.minimum(k, SEARCH_MAX).astype(np.float64)


def ptrs(key, lam: np.ndarray, idx: np.ndarray, first: np.ndarray) -> np.ndarray:
    """Counts for ``SEARCH_BELOW <= lam < PTRS_BELOW`` at element indices ``idx``; ``first``
    their (m, 2) words of draw 0 (words 2j, 2j + 1); later rounds read draw r."""
    slam = np.sqrt(lam)
    b = 0.931 + 2.53 * slam
    a = -0.059 + 0.02483 * b
    log_inv_alpha = log_(1.1239 + 1.1328 / (b - 3.4))
    vr = 0.9277 - 3.6224 / (b - 2.0)
    out = np.floor(lam)  # after ROUNDS rejections (probability about 1e-11)
    todo = np.arange(lam.size)
    for r in range(ROUNDS):
        if not todo.size:
            break
        if r == 0:
            w = first
        else:
            j = idx[todo]
            w = element_rng.words(key, 2 * (int(j.max()) + 1), r).reshape(-1, 2)[j]
        lt, at, bt = lam[todo], a[todo], b[todo]
        big_u = uniform53(w[:, 0]) - 0.5
        v = uniform_open(w[:, 1])
        us = 0.5 - np.abs(big_u)
        with np.errstate(divide="ignore", invalid="ignore"):  # us == 0: k = -inf, rejected
            k = np.floor(((2.0 * at / us + bt) * big_u + lt) + 0.43)
        accept = (us >= 0.07) & (v <= vr[todo])
        test = ~accept & ~((k < 0) | ((us < 0.013) & (v > us)))
        if test.any():
            ut = us[test]
            lhs = (log_(v[test]) + log_inv_alpha[todo[test]]) - log_(at[test] / (ut * ut) + bt[test])
            accept[test] = lhs <= logpmf(k[test], lt[test])
        out[todo[accept]] = k[accept]
        todo = todo[~accept]
    return out


def poisson(key, lam: np.ndarray, coded: tuple | None = None) -> np.ndarray:
    """float64 Poisson counts of the flat float64 ``lam`` (>= 0 or NaN) under a sample's Philox
    ``key``, element j from its own words only (see the module docstring). ``coded``: optionally
    ``(table, codes)`` with ``lam == table[codes]`` and few table values (8-bit samples), which
    makes the small lambdas' search a table look-up (the same counts)."""
    lam = np.asarray(lam, np.float64).reshape(-1)
    n = lam.size
    if n == 0:
        return np.zeros(0)
    first = element_rng.words(key, 2 * n).reshape(n, 2)
    small = lam < SEARCH_BELOW
    every = small.all()  # (the usual case: 8-bit images at factors above 16)
    at = slice(None) if every else np.flatnonzero(small)
    if coded is not None:
        table, codes = coded
        counts = search_coded(np.asarray(table, np.float64), np.asarray(codes).reshape(-1)[at],
                              (first[at, 0] >> np.uint64(11)).astype(np.int64))
    else:
        counts = search(lam[at], uniform53(first[at, 0]))
    if every:
        return counts
    out = lam.copy()  # (lambdas from 2^52 and NaN stay)
    out[at] = counts
    at = np.flatnonzero((lam >= SEARCH_BELOW) & (lam < PTRS_BELOW))
    if at.size:
        out[at] = ptrs(key, lam[at], at, first[at])
    return out
