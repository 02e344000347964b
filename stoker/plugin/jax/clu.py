"""A peekable JAX iterator (``peek``, ``peek_async``, ``element_spec``), as DALI's
``nvidia.dali.plugin.jax.clu``; it follows the protocol of CLU's ``PeekableDatasetIterator``.

CLU (``clu.data``) is optional: its ``ArraySpec`` is used where installed, an equivalent
named tuple otherwise.
"""

from __future__ import annotations

import concurrent.futures
import threading
from typing import NamedTuple

import numpy as np

from stoker.plugin.base_iterator import LastBatchPolicy
from stoker.plugin.jax.iterator import DALIGenericIterator, data_iterator_decorator, import_jax

__all__ = ["DALIGenericPeekableIterator", "peekable_data_iterator", "get_spec_for_array"]


class _ArraySpec(NamedTuple):
    shape: tuple
    dtype: object


def get_spec_for_array(array):
    """The (shape, dtype) spec of ``array``: CLU's ``ArraySpec`` where CLU is installed."""
    try:
        from clu.data.dataset_iterator import ArraySpec
    except ImportError:
        ArraySpec = _ArraySpec
    return ArraySpec(shape=tuple(array.shape), dtype=array.dtype)


class DALIGenericPeekableIterator(DALIGenericIterator):
    """:class:`~stoker.plugin.jax.DALIGenericIterator` that can look at the next batch without
    taking it (same arguments).

    Every batch must keep the shapes and types of the first (``element_spec``); a change raises.
    ``checkpoints()`` refuses while a peeked batch is held (it would be lost on resume).
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._mutex = threading.Lock()
        self._pool = None
        self._peeked = None
        self._element_spec = None

    def _checked(self, batch: dict) -> dict:
        specs = {k: get_spec_for_array(v) for k, v in batch.items()}
        if self._element_spec is None:
            self._element_spec = specs
        for k, spec in specs.items():
            if tuple(spec) != tuple(self._element_spec[k]):
                raise ValueError(f"peekable JAX iterator: output '{k}' changed from {tuple(self._element_spec[k])} "
                                 f"to {tuple(spec)}; the peekable iterator needs fixed shapes and types")
        return batch

    def _take(self) -> dict:
        if self._peeked is not None:
            batch, self._peeked = self._peeked, None
            return batch
        return self._checked(self._next_impl())

    def __next__(self) -> dict:
        with self._mutex:
            return self._take()

    def __iter__(self):
        # A held peek belongs to the epoch being read: do not reset under it.
        if self._peeked is None:
            return super().__iter__()
        return self

    def peek(self) -> dict:
        """The next batch, left in place: the following ``next()`` returns it."""
        with self._mutex:
            if self._peeked is None:
                self._peeked = self._take()
            return self._peeked

    def peek_async(self) -> concurrent.futures.Future:
        """``peek()`` in a helper thread; wait on the future before the next ``peek``/``next`` to be sure
        they see the same batch."""
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
        return self._pool.submit(self.peek)

    def checkpoints(self) -> list[str]:
        if self._peeked is not None:
            raise RuntimeError("peekable JAX iterator: a peeked batch is held; take it with next() before "
                               "checkpointing, or resuming would skip it")
        return super().checkpoints()

    @property
    def element_spec(self) -> dict:
        """``{name: ArraySpec(shape, dtype)}`` of the batches (peeks at the first one if needed)."""
        if self._element_spec is None:
            self.peek()
        return self._element_spec

    @property
    def is_nonpadding(self):
        """Per row of the latest batch: True for samples of this epoch, False for the rows FILL took from the
        next epoch or padding (with ``reader_name``). Sharded like the outputs when ``sharding`` is set."""
        jax = import_jax()
        if not self._reader_name:
            mask = np.ones(self._num_gpus * self.batch_size, dtype=bool)
        else:
            left = self.batch_size - (self._counter - self._shard_sizes_per_gpu_initial[self._shards_id])
            rows = np.arange(self.batch_size)
            mask = np.concatenate([rows < min(int(n), self.batch_size) for n in left])
        if self._sharding is None:
            return mask
        return jax.device_put(mask, self._sharding)


def peekable_data_iterator(pipeline_fn=None, output_map=(), size=-1, reader_name=None, auto_reset=False,
                           last_batch_padded=False, last_batch_policy=LastBatchPolicy.FILL,
                           prepare_first_batch=True, sharding=None, devices=None, pmap_compatible=None):
    """:func:`stoker.plugin.jax.data_iterator` that returns a :class:`DALIGenericPeekableIterator`."""
    return data_iterator_decorator(DALIGenericPeekableIterator, pipeline_fn, list(output_map), size, reader_name,
                                   auto_reset, last_batch_padded, last_batch_policy, prepare_first_batch, sharding,
                                   devices, pmap_compatible)
