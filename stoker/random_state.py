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
