"""The order in which a reader visits its data set: sharding, padding, shuffling, epochs.

A reader is an endless stream, as in DALI. The data set of ``n`` samples is
cut into ``num_shards`` contiguous shards, shard ``i`` holding indices
``[n*i // num_shards, n*(i+1) // num_shards)``. The stream is a sequence of
*passes*; pass ``k`` reads one whole shard:

* shard ``shard_id`` on every pass with ``stick_to_shard``, otherwise shard
  ``(shard_id + k) % num_shards`` (shards rotate, so without padding the
  stream is simply the data set read in a ring from this shard's start);
* with ``pad_last_batch`` the pass is padded by repeating its last sample up to
  the size of the largest shard, ``ceil(n / num_shards)``, and then up to a
  multiple of the batch size: every shard gives the same number of batches and
  every pass starts on a batch boundary.

This reproduces DALI's order, shard boundaries and padding exactly.

Shuffling differs from DALI on purpose: DALI draws from a buffer of
``initial_fill`` samples, so its order depends on the whole history. Here
``random_shuffle`` permutes the shard read in pass ``k`` with a permutation that
is a pure function of (seed, k), and ``shuffle_after_epoch`` permutes the whole
data set with a function of (shuffle seed, k) that is the same on every shard
(so across shards each pass still covers every sample exactly once). The
position in the stream is therefore two integers, and a checkpoint restores in
O(1) without replaying anything. (Except in one pass: one resumed at another number
of shards reads a list of indices, which its state carries: :func:`resharded_state`.)
"""

from __future__ import annotations

import numpy as np

from stoker.random_state import epoch_generator, mix_seed

# Seed of shuffle_after_epoch when none is given: fixed, so every shard of a
# multi-GPU job (and every run) permutes the same way, as in DALI.
DEFAULT_SHUFFLE_AFTER_EPOCH_SEED = 0x5707E1


def shard_start(shard: int, num_shards: int, n: int) -> int:
    """First index of ``shard`` (DALI's formula)."""
    return n * shard // num_shards


class ShardedOrder:
    """Which sample index comes next; state = (pass, position in pass)."""

    def __init__(self, n: int, *, num_shards: int = 1, shard_id: int = 0, stick_to_shard: bool = False,
                 pad_last_batch: bool = False, random_shuffle: bool = False, shuffle_seed: int = 0,
                 shuffle_after_epoch: bool = False, shuffle_after_epoch_seed: int | None = None,
                 batch_size: int = 1):
        self.n = n
        self.num_shards = num_shards
        self.shard_id = shard_id
        self.stick_to_shard = stick_to_shard
        self.pad_last_batch = pad_last_batch
        self.random_shuffle = random_shuffle
        self.shuffle_seed = shuffle_seed
        self.shuffle_after_epoch = shuffle_after_epoch
        sae = DEFAULT_SHUFFLE_AFTER_EPOCH_SEED if shuffle_after_epoch_seed is None else shuffle_after_epoch_seed
        self.sae_seed = mix_seed(sae, 0x5AE)
        self.batch_size = max(1, batch_size)
        self.epoch = 0  # the pass
        self.position = 0  # samples of this pass already handed out (padding included)
        self._perm_key = None
        self._perm: np.ndarray | None = None
        # (pass, data set indices, length with padding, real samples): a pass resumed at another
        # world size reads what the old ranks had left of it instead of a shard (resharded_state)
        self._remainder: tuple[int, np.ndarray, int, int] | None = None

    # --- sizes -------------------------------------------------------------
    def shard_of_pass(self, k: int) -> int:
        return self.shard_id if self.stick_to_shard else (self.shard_id + k) % self.num_shards

    def shard_range(self, shard: int) -> tuple[int, int]:
        return shard_start(shard, self.num_shards, self.n), shard_start(shard + 1, self.num_shards, self.n)

    def pass_length(self, k: int) -> int:
        """Samples the stream hands out in pass ``k`` (padding included)."""
        if self._remainder is not None and k == self._remainder[0]:
            return self._remainder[2]
        if self.pad_last_batch:  # every shard padded to the largest one's size, then to a whole batch
            largest = -(-self.n // self.num_shards)
            return -(-largest // self.batch_size) * self.batch_size
        lo, hi = self.shard_range(self.shard_of_pass(k))
        return hi - lo

    def epoch_size_padded(self) -> int:
        """DALI's ``epoch_size_padded``: every shard padded to the largest shard's size."""
        if not self.pad_last_batch:
            return self.n
        return self.num_shards * -(-self.n // self.num_shards)

    # --- the stream -----------------------------------------------------------
    def _pass_indices(self, k: int) -> np.ndarray:
        """The data set indices read in pass ``k`` (without padding), cached for the current pass."""
        if self._remainder is not None and k == self._remainder[0]:
            return self._remainder[1]
        shard = self.shard_of_pass(k)
        key = (k, shard)
        if self._perm_key != key:
            lo, hi = self.shard_range(shard)
            if self.shuffle_after_epoch:
                idx = epoch_generator(self.sae_seed, k).permutation(self.n)[lo:hi]
            elif self.random_shuffle:
                idx = lo + epoch_generator(self.shuffle_seed, k).permutation(hi - lo)
            else:
                idx = np.arange(lo, hi)
            self._perm_key, self._perm = key, idx
        return self._perm

    def take(self, count: int) -> list[tuple[int, int]]:
        """The next ``count`` samples as (data set index, pass) pairs; advances the stream."""
        out: list[tuple[int, int]] = []
        while len(out) < count:
            length = self.pass_length(self.epoch)
            if length == 0:  # an empty shard (more shards than samples): nothing to read in this pass
                self.epoch += 1
                self.position = 0
                continue
            idx = self._pass_indices(self.epoch)
            stop = min(length, self.position + count - len(out))
            picked = idx[np.minimum(np.arange(self.position, stop), len(idx) - 1)].tolist()
            out += zip(picked, [self.epoch] * len(picked))
            self.position = stop
            if self.position == length:
                self.epoch += 1
                self.position = 0
        return out

    # --- checkpoints ----------------------------------------------------------
    def state(self) -> dict:
        out = {"epoch": self.epoch, "position": self.position, "shard": self.shard_of_pass(self.epoch)}
        if self._remainder is not None and self._remainder[0] == self.epoch:
            _, indices, length, real = self._remainder
            out["remainder"] = {"indices": indices.tolist(), "length": length, "real": real}
        return out

    def resumed_pass(self) -> dict | None:
        """The current pass's shard, length and real samples where it is a pass resumed at another
        world size (:func:`resharded_state`), else None."""
        if self._remainder is None or self._remainder[0] != self.epoch:
            return None
        return {"shard": self.shard_of_pass(self.epoch), "length": self._remainder[2], "real": self._remainder[3]}

    def set_state(self, state: dict) -> None:
        if "resharded_from" in state:  # the states of the ranks of another world size
            state = resharded_state(self, state["resharded_from"])
        epoch, position = int(state["epoch"]), int(state["position"])
        self._remainder = None
        rest = state.get("remainder")
        if rest is not None:
            indices, length = np.asarray(rest["indices"], np.int64).reshape(-1), int(rest["length"])
            real = int(rest.get("real", indices.size))
            if (indices.size and (indices.min() < 0 or indices.max() >= self.n)) or length < indices.size \
                    or (length and not indices.size) or not 0 <= real <= indices.size:
                raise ValueError(f"reader state {state} does not fit this data set ({self.n} samples)")
            self._remainder = (epoch, indices, length, real)
        if epoch < 0 or not 0 <= position < max(1, self.pass_length(epoch)):
            raise ValueError(f"reader state {state} does not fit this data set ({self.n} samples)")
        if "shard" in state and int(state["shard"]) != self.shard_of_pass(epoch):
            raise ValueError(f"reader state {state} was saved for another shard "
                             f"(this reader reads shard {self.shard_of_pass(epoch)} in pass {epoch})")
        self.epoch, self.position = epoch, position


def unread_in_pass(order: ShardedOrder) -> np.ndarray:
    """The data set indices ``order`` has not handed out yet in its current pass (padding aside)."""
    if order.pass_length(order.epoch) == 0:
        return np.zeros(0, np.int64)
    return np.asarray(order._pass_indices(order.epoch)[order.position:], np.int64)


def resharded_state(order: ShardedOrder, old_states: list) -> dict:
    """The state with which ``order`` (shard ``shard_id`` of ``num_shards``) resumes from the
    states of every rank of a run with another number of shards (``old_states``, by shard id).

    Semantics: the pass the old ranks were reading is finished first. Whatever they had not read
    of it, taken rank after rank in their reading order, is cut into ``num_shards`` contiguous
    parts by DALI's shard formula, and this rank reads part ``shard_id``. With
    ``pad_last_batch``, every part is padded to the largest one's size, then to a whole
    batch, so every rank takes the same number of steps (a rank left with nothing repeats the
    last sample left). The passes after it are this run's own: pass ``k + 1`` reads shard
    ``shard_of_pass(k + 1)``. Every sample of the interrupted pass is so read exactly once, by one
    run or the other. The old ranks must all be in the same pass (a checkpoint taken at one step
    by every rank)."""
    states = [dict(s) for s in old_states]
    if not states:
        raise ValueError("no checkpoint states to resume from")
    passes = {int(s["epoch"]) for s in states}
    if len(passes) != 1:
        raise ValueError(f"the checkpoints' ranks are in different passes {sorted(passes)}; take them at the "
                         "same step on every rank")
    k = passes.pop()
    unread = []
    for shard_id, state in enumerate(states):
        old = _copy_with(order, num_shards=len(states), shard_id=shard_id)
        old.set_state(state)
        unread.append(unread_in_pass(old))
    left = np.concatenate(unread) if unread else np.zeros(0, np.int64)
    m = left.size
    lo, hi = shard_start(order.shard_id, order.num_shards, m), shard_start(order.shard_id + 1, order.num_shards, m)
    part = left[lo:hi]
    length = real = part.size
    if order.pad_last_batch:
        largest = -(-m // order.num_shards)
        length = -(-largest // order.batch_size) * order.batch_size
        if length and not part.size:
            part = left[-1:]  # (only padding to read: repeat a sample; the iterator cuts it off)
    return {"epoch": k, "position": 0, "shard": order.shard_of_pass(k),
            "remainder": {"indices": part.tolist(), "length": int(length), "real": int(real)}}


def _copy_with(order: ShardedOrder, num_shards: int, shard_id: int) -> ShardedOrder:
    """``order``'s data set and shuffling, as read by shard ``shard_id`` of ``num_shards``."""
    other = ShardedOrder(order.n, num_shards=num_shards, shard_id=shard_id, stick_to_shard=order.stick_to_shard,
                         pad_last_batch=order.pad_last_batch, random_shuffle=order.random_shuffle,
                         shuffle_seed=order.shuffle_seed, shuffle_after_epoch=order.shuffle_after_epoch,
                         batch_size=order.batch_size)
    other.sae_seed = order.sae_seed
    return other
