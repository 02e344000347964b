"""Module-level callables for test_serialize.py: a serialized pipeline carries them by name, so the
loading process imports this module (it has tests/pipeline on its path)."""

import numpy as np


def sample(info):
    """A per-sample external source: a small image that depends on the sample's index."""
    return np.full((4, 5, 3), info.idx_in_epoch % 7, np.uint8) + np.arange(3, dtype=np.uint8)


def double_plus_one(x):
    """A python_function body."""
    return x * 2 + 1
