"""Explicit random generators for eager mode, and the eager ``random.*`` operators.

A random operator called eagerly takes ``rng=`` (an :class:`RNG`); without it
the module's default generator is used. Each call draws one key from the
generator, and the operator's values for sample ``i`` are a pure function of
(that key, ``i``), as in a pipeline. So two generators made with the same
seed, used by the same sequence of calls, give the same values, and
``rng.clone()`` / ``rng.state`` replay a stream exactly::

    rng = ndd.random.RNG(seed=42)
    a = ndd.random.uniform(range=(0, 1), shape=[3], rng=rng)
    b = ndd.random.uniform(range=(0, 1), batch_size=8, rng=rng)
"""

from __future__ import annotations

import os
import threading

from stoker.dynamic._namespace import module_dir, module_getattr
from stoker.random_state import mix_seed

__all__ = ["RNG", "get_default_rng", "set_seed"]

_MASK64 = (1 << 64) - 1


class RNG:
    """A reproducible random stream for eager operators.

    ``seed``: an int (truncated to 64 bits); random when omitted. ``state``: a value of
    :attr:`state` to continue from (instead of ``seed``).
    """

    def __init__(self, seed: int | None = None, state: dict | None = None):
        self._lock = threading.Lock()
        if state is not None:
            if seed is not None:
                raise ValueError("RNG: give seed or state, not both")
            self.state = state
        else:
            self.seed = int.from_bytes(os.urandom(8), "little") if seed is None else seed

    @property
    def seed(self):
        raise AttributeError("RNG.seed is write-only; use RNG.state to save the position")

    @seed.setter
    def seed(self, value: int) -> None:
        """Restart the stream from ``value``."""
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"RNG: seed must be an int, got {value!r}")
        self._seed = value & _MASK64
        self._draws = 0

    def next_key(self) -> int:
        """The next 64-bit key of the stream (one per operator call)."""
        with self._lock:
            key = mix_seed(self._seed, self._draws, 0xE4E2)
            self._draws += 1
        return key

    def __call__(self) -> int:
        """A random uint32 (advances the stream by one)."""
        return self.next_key() & 0xFFFFFFFF

    def advance(self, n: int) -> None:
        """Skip ``n`` draws."""
        with self._lock:
            self._draws += int(n)

    def clone(self) -> RNG:
        """An independent generator at the same position."""
        return RNG(state=self.state)

    @property
    def state(self) -> dict:
        """The position in the stream (a small dict; JSON-friendly)."""
        return {"seed": self._seed, "draws": self._draws}

    @state.setter
    def state(self, value: dict) -> None:
        try:
            seed, draws = int(value["seed"]), int(value["draws"])
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"RNG: not an RNG state: {value!r}") from None
        with self._lock:
            self._seed, self._draws = seed & _MASK64, draws

    def get_state(self) -> dict:
        return self.state

    def set_state(self, value: dict) -> None:
        self.state = value

    def __repr__(self) -> str:
        return f"RNG(draws={self._draws})"


_default = RNG()


def get_default_rng() -> RNG:
    """The generator used by random operators called without ``rng=``."""
    return _default


def set_seed(seed: int) -> None:
    """Restart the default generator from ``seed``."""
    _default.seed = seed


def resolve_rng(rng) -> RNG:
    if rng is None:
        return _default
    if isinstance(rng, RNG):
        return rng
    raise TypeError(f"rng must be a stoker.dynamic.random.RNG, got {type(rng).__name__}")


# ndd.random.uniform, ndd.random.coin_flip ... come from the operator registry.
__getattr__ = module_getattr("random.")
__dir__ = module_dir("random.", globals())
