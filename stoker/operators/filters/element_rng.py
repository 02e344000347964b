"""Element-wise random words shared by the CPU and GPU noise operators.

A sample's noise comes from Philox4x64-10 (Salmon et al., 2011; the generator of Random123 and
``numpy.random.Philox``) under a 128-bit key taken from the sample's own stream (``ctx.rng``), so
every value depends only on (seed, operator, iteration, sample, element), as elsewhere in stoker.
Block ``b`` of draw ``d`` is the cipher of the 256-bit counter ``(b + 1, d, 0, 0)``: exactly the
words ``numpy.random.Philox(key=key, counter=(0, d, 0, 0)).random_raw()`` returns in order (NumPy
increments its counter before each block). So the CPU gets them from NumPy's C code in bulk, and
``kernels/noise.cu`` computes any block on its own, element-parallel; both then turn the words
into values with the same arithmetic.

Why not the operators' usual bulk generator (SFC64 seeded from the stream): its values come in
sequence, so a GPU could only reproduce them by running the sequence, and stoker promises the
same values on either device. The price on the CPU: a 224x224x3 image's normals take about 4.9
ms instead of 1.35 (``benchmarks/cpu_noise.py``; most of it is float64 log, cos and sin).

Values:
- ``normals``: Box-Muller in float64, both branches: words ``2p`` and ``2p + 1`` give elements
  ``2p`` (cosine) and ``2p + 1`` (sine). float64 ``log``/``cos``/``sin`` are not correctly rounded
  on either device (within an ulp or so), so a value may differ in its last float64 bit; once
  rounded to float32 that shows practically never (a chance of about 2^-28 per element).
- ``words``: one 64-bit word per draw; salt_and_pepper compares its high half with integer
  thresholds (``threshold32``), exact on both devices; jitter turns each half into a shift with
  ``below32``.

The cipher's device code is shared: ``kernels/philox4x64_10.cuh`` (``philox_word``, ``below32``),
included by kernels compiled with :func:`kernel_options` (``kernels/noise.cu`` still holds its own
copy of the cipher).
"""

from __future__ import annotations

import functools
import hashlib
import os

import numpy as np

TWO_PI = 6.283185307179586  # float64(2 * pi), as in kernels/noise.cu


def keys_from_uniforms(u) -> np.ndarray:
    """(n, 2) uint64 Philox keys from (n, 2) uniforms of the samples' streams (multiples of
    2^-53): the 53 bits of each."""
    return (np.asarray(u, np.float64).reshape(-1, 2) * float(1 << 53)).astype(np.uint64)


def sample_key(rng) -> np.ndarray:
    """The Philox key of a sample, from its stream ``rng`` (``SampleContext.rng``); takes the
    stream's first two values."""
    return keys_from_uniforms([rng.random(), rng.random()])[0]


def batch_keys(op_seed: int, iteration: int, samples) -> np.ndarray:
    """(n, 2) keys of the samples with stream indices ``samples``: for each, what
    :func:`sample_key` gives with that sample's ``SampleContext.rng``, computed for all at once."""
    from stoker.random_state import batch_uniforms

    if len(samples) == 0:
        return np.zeros((0, 2), np.uint64)
    return keys_from_uniforms(batch_uniforms(op_seed, iteration, samples, 2))


def words(key, count: int, draw: int = 0) -> np.ndarray:
    """The first ``count`` 64-bit words (uint64) of draw ``draw`` under ``key``."""
    bits = np.random.Philox(key=np.asarray(key, np.uint64), counter=np.array([0, draw, 0, 0], np.uint64))
    return bits.random_raw(count)


def normals(key, count: int) -> np.ndarray:
    """Standard normal float64 values of elements ``0 .. count - 1`` (draw 0)."""
    pairs = (count + 1) // 2
    w = words(key, 2 * pairs).reshape(pairs, 2)
    # u1 = (2m + 1) 2^-53 in (0, 1) from the top 52 bits m: exact, never 0 (log stays finite)
    u1 = ((w[:, 0] >> np.uint64(12)) << np.uint64(1) | np.uint64(1)).astype(np.float64) * 2.0 ** -53
    angle = (w[:, 1] >> np.uint64(11)).astype(np.float64) * 2.0 ** -53 * TWO_PI  # exact, then one rounding
    radius = np.log(u1)
    radius *= -2.0
    np.sqrt(radius, out=radius)
    out = np.empty((pairs, 2), np.float64)
    np.multiply(radius, np.cos(angle), out=out[:, 0])
    np.multiply(radius, np.sin(angle), out=out[:, 1])
    return out.reshape(-1)[:count]


def threshold32(p: float) -> int:
    """The integer threshold t with ``word32 < t`` true with probability ``p`` (to 2^-32):
    ``round(p * 2^32)`` for p in [0, 1], computed in float64 (exact products), as on the GPU."""
    return int(np.floor(np.float64(p) * 4294967296.0 + 0.5))


def below32(values, span: int) -> np.ndarray:
    """Integers in [0, span) (uint64) from 32-bit ``values`` (uint64 holding values below 2^32),
    ``floor(v * span / 2^32)``: exact in 64 bits for ``span <= 2^32``, uniform to within
    ``span / 2^32``, and what ``below32`` in ``kernels/philox4x64_10.cuh`` computes."""
    if not 0 < span <= 1 << 32:
        raise ValueError(f"below32 takes a span in [1, 2^32], got {span}")
    return (np.asarray(values, np.uint64) * np.uint64(span)) >> np.uint64(32)


HEADER = "philox4x64_10.cuh"  # the cipher's device code, in stoker/kernels


@functools.cache
def kernel_options(base: tuple = ("-std=c++17",)) -> tuple:
    """NVRTC options for a kernel source that includes :data:`HEADER`: ``base``, the kernel folder
    as an include path, and the header's digest as a macro. Why the digest: CuPy's disk cache keys
    a module by its own source and options only, so without it an edited header would keep
    serving the binaries built from the old one."""
    from stoker.backend import cuda

    with open(os.path.join(cuda._KERNEL_DIR, HEADER), "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()[:16]
    return (*base, f"-I{cuda._KERNEL_DIR}", f"-DSTOKER_PHILOX_HEADER=0x{digest}")
