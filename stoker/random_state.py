"""Counter-based randomness: every random value is a pure function of its key.

The key of a value drawn for one sample is (pipeline seed, operator seed,
iteration, sample position). Nothing depends on which thread runs the sample,
how far ahead the pipeline prefetches, or what ran before, so results are the
same for any ``num_threads`` and a checkpoint needs only the iteration counter.

NumPy's Philox is a counter-based generator (Salmon et al., 2011): a
``Generator`` keyed this way costs a few microseconds to make.
"""

from __future__ import annotations

import hashlib

import numpy as np

_MASK64 = (1 << 64) - 1


def mix_seed(*parts: int) -> int:
    """Hash integers into one 64-bit seed (stable across processes and platforms)."""
    h = hashlib.blake2b(digest_size=8)
    for p in parts:
        h.update(int(p & _MASK64).to_bytes(8, "little"))
    return int.from_bytes(h.digest(), "little")


def sample_generator(op_seed: int, iteration: int, sample: int, stream: int = 0) -> np.random.Generator:
    """The random generator of one sample of one operator at one iteration."""
    key = np.array([op_seed & _MASK64, stream & _MASK64], dtype=np.uint64)
    counter = np.array([0, 0, sample & _MASK64, iteration & _MASK64], dtype=np.uint64)
    return np.random.Generator(np.random.Philox(key=key, counter=counter))


def batch_generator(op_seed: int, iteration: int, stream: int = 1) -> np.random.Generator:
    """The random generator of a whole batch (for batch-level decisions such as a permutation)."""
    return sample_generator(op_seed, iteration, _MASK64, stream)


def epoch_generator(seed: int, epoch: int) -> np.random.Generator:
    """The generator of a reader's shuffle for one epoch."""
    key = np.array([seed & _MASK64, 0x5EED], dtype=np.uint64)
    counter = np.array([0, 0, 0, epoch & _MASK64], dtype=np.uint64)
    return np.random.Generator(np.random.Philox(key=key, counter=counter))


# --- the per-sample stream ------------------------------------------------------
#
# Making a NumPy Philox Generator costs ~30 us, which is most of a sample's
# Python budget on a GPU pipeline (the GIL is shared with the decoder). A
# sample's stream is therefore a SplitMix64 hash of (sample key, draw counter):
# the k-th value of a sample is mix(key + k * GOLDEN), a pure function of
# (seed, operator, iteration, sample, k). SplitMix64 over a Weyl sequence is a
# well-tested counter-based generator (Steele et al., 2014). The same values can
# be computed for a whole batch at once with NumPy (batch_uniforms), so
# vectorized operators and per-sample code agree exactly.

_GOLDEN = 0x9E3779B97F4A7C15
_M1 = 0xBF58476D1CE4E5B9
_M2 = 0x94D049BB133111EB


def _mix64(x: int) -> int:
    x &= _MASK64
    x = ((x ^ (x >> 30)) * _M1) & _MASK64
    x = ((x ^ (x >> 27)) * _M2) & _MASK64
    return x ^ (x >> 31)


_U30, _U27, _U31, _U11 = np.uint64(30), np.uint64(27), np.uint64(31), np.uint64(11)
_UM1, _UM2, _UGOLDEN = np.uint64(_M1), np.uint64(_M2), np.uint64(_GOLDEN)


def _mix64_np(x: np.ndarray) -> np.ndarray:
    return _mix64_inplace(x.astype(np.uint64, copy=True))


def _mix64_inplace(x: np.ndarray) -> np.ndarray:
    """_mix64 of a uint64 array, in place (one temporary: these run on every draw of a batch)."""
    t = np.right_shift(x, _U30, out=np.empty_like(x))  # (an array even where x has no dimensions)
    x ^= t
    x *= _UM1
    x ^= np.right_shift(x, _U27, out=t)
    x *= _UM2
    x ^= np.right_shift(x, _U31, out=t)
    return x


def _to_uniform(x: np.ndarray) -> np.ndarray:
    """The [0, 1) value of each mixed uint64 (its top 53 bits), consuming ``x``."""
    x >>= _U11
    u = x.astype(np.float64)
    u *= 1.0 / (1 << 53)
    return u


def sample_key(op_seed: int, iteration: int, sample: int) -> int:
    """The 64-bit key of one sample's stream."""
    return _mix64(_mix64(_mix64(op_seed) ^ (iteration & _MASK64)) + (sample & _MASK64) * _GOLDEN)


def batch_uniforms(op_seed: int, iteration: int, samples, count: int) -> np.ndarray:
    """Uniform [0, 1) values: row i holds the first ``count`` draws of sample ``samples[i]``.

    Equal, value for value, to ``SampleRNG(...).random()`` called ``count`` times.
    """
    base = _mix64(_mix64(op_seed) ^ (iteration & _MASK64))
    idx = np.asarray(samples, dtype=np.uint64).reshape(-1, 1)
    # (arrays throughout: their uint64 wrap-around never warns, so no errstate, which cost as much
    # as a step here)
    keys = _mix64_np(_UGOLDEN * idx + np.uint64(base))
    counters = keys + np.arange(1, count + 1, dtype=np.uint64)[None, :] * _UGOLDEN
    return _to_uniform(_mix64_inplace(counters))


def batch_keys(op_seed: int, iteration: int, samples) -> np.ndarray:
    """``sample_key`` of each of ``samples`` (uint64): the streams :func:`key_uniforms` reads."""
    base = _mix64(_mix64(op_seed) ^ (iteration & _MASK64))
    idx = np.asarray(samples, dtype=np.uint64).reshape(-1)
    return _mix64_np(_UGOLDEN * idx + np.uint64(base))  # (arrays: no overflow warning)


def key_uniforms(keys, start: int, count: int) -> np.ndarray:
    """Uniform [0, 1) values: row i holds draws ``start`` .. ``start + count - 1`` (counted from 0)
    of the stream ``keys[i]`` (:func:`batch_keys`), i.e. what ``SampleRNG.random()`` returns after
    ``start`` earlier draws. ``key_uniforms(batch_keys(s, it, idx), 0, n)`` equals
    ``batch_uniforms(s, it, idx, n)``; a vectorised rejection loop reads one round at a time."""
    return key_uniforms_at(np.asarray(keys, dtype=np.uint64).reshape(-1, 1),
                           np.arange(start, start + count, dtype=np.uint64)[None, :])


def key_uniforms_at(keys, draws) -> np.ndarray:
    """Uniform [0, 1) values: draw number ``draws`` (counted from 0) of the stream ``keys``
    (:func:`batch_keys`), element by element, the two arrays broadcast together. For reading only
    the draws a vectorised operator needs (e.g. the anchors of the candidate windows it judges)."""
    with np.errstate(over="ignore"):  # (a scalar's wrap-around warns; arrays' do not)
        steps = np.asarray(draws, dtype=np.uint64) + np.uint64(1)
        steps *= _UGOLDEN
    # the one broadcast step makes the counters array; the rest runs in place
    u = _to_uniform(_mix64_inplace(np.asarray(np.add(np.asarray(keys, dtype=np.uint64), steps))))
    return u if u.ndim else u[()]


class SampleRNG:
    """A cheap counter-based generator with the subset of ``numpy.random.Generator`` that
    operators use: ``random``, ``uniform``, ``integers``, ``normal``, ``choice`` (and
    :meth:`generator` for the rest)."""

    __slots__ = ("_key", "_n")

    def __init__(self, op_seed: int, iteration: int, sample: int):
        self._key = sample_key(op_seed, iteration, sample)
        self._n = 0

    def _next(self) -> float:
        self._n += 1
        return (_mix64(self._key + self._n * _GOLDEN) >> 11) * (1.0 / (1 << 53))

    def _block(self, count: int) -> np.ndarray:
        counters = np.arange(self._n + 1, self._n + count + 1, dtype=np.uint64)
        self._n += count
        counters *= _UGOLDEN
        counters += np.uint64(self._key)
        return _to_uniform(_mix64_inplace(counters))

    def random(self, size=None):
        if size is None:
            return self._next()
        shape = (size,) if np.isscalar(size) else tuple(size)
        return self._block(int(np.prod(shape, dtype=np.int64))).reshape(shape)

    def uniform(self, low=0.0, high=1.0, size=None):
        u = self.random(size)
        return low + (high - low) * u

    def integers(self, low, high=None, size=None, endpoint=False):
        if high is None:
            low, high = 0, low
        span = high - low + (1 if endpoint else 0)
        u = self.random(size)
        if size is None:
            return int(low + min(int(u * span), span - 1))
        return (low + np.minimum((u * span).astype(np.int64), span - 1)).astype(np.int64)

    def normal(self, loc=0.0, scale=1.0, size=None):
        count = 1 if size is None else int(np.prod((size,) if np.isscalar(size) else size, dtype=np.int64))
        u1 = self._block(count)
        u2 = self._block(count)
        z = np.sqrt(-2.0 * np.log1p(-u1)) * np.cos(2.0 * np.pi * u2)  # Box-Muller; 1-u1 > 0
        z = loc + scale * z
        if size is None:
            return float(z[0])
        return z.reshape((size,) if np.isscalar(size) else tuple(size))

    def generator(self) -> np.random.Generator:
        """A NumPy Generator (Philox, itself counter-based) keyed by this stream's next values,
        for distributions this class does not implement (beta, gamma, ...). It takes two draws
        from the stream, so the same stream always gives the same generator."""
        key = (self._block(2) * float(1 << 53)).astype(np.uint64)
        return np.random.Generator(np.random.Philox(key=key))

    def choice(self, a, size=None, replace=True, p=None):
        values = np.arange(a) if np.isscalar(a) else np.asarray(a)
        n = values.shape[0]
        u = self.random(size)
        if p is None:
            idx = np.minimum((np.asarray(u) * n).astype(np.int64), n - 1)
        else:
            cdf = np.cumsum(np.asarray(p, dtype=np.float64))
            idx = np.minimum(np.searchsorted(cdf / cdf[-1], u, side="right"), n - 1)
        picked = values[idx]
        return picked.item() if size is None and np.ndim(picked) == 0 else picked
