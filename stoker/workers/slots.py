"""Shared memory slots: anonymous memory files (memfd) that the pipeline and a helper both map.

Why: the data a helper reads, decodes or computes is megabytes a batch; pickled through the
socket it would be copied twice and held by the GIL on both ends. A slot is written once in one
process and read in the other through the same pages; only its descriptor (once) and offsets
(every batch) travel as messages (:mod:`.messages`). Slots are kept and reused because
allocating and faulting in fresh pages for every batch cost more than the reads themselves
(68 against 18 us per 50 KB file, measured in the reader's helper).

Two kinds, one base (:class:`SharedFile`: the memfd and this process's read-write mapping):

* :class:`Slots` -- the helper's own slots (the reader's I/O helper, the CPU chain workers): the
  helper creates them, sends each new one's descriptor with its answer, and reuses a slot once
  the pipeline reports its batch freed; the pipeline maps them read-only (:func:`map_received`).
* :class:`PinnedSlot` -- a slot the pipeline creates (the mixed decoders' helpers): mapped by every
  helper, and registered with CUDA as pinned memory so the GPU upload copies straight from it.

This module needs the standard library only at import: the reader's I/O helper loads it by path.
"""

from __future__ import annotations

import mmap
import os


class SharedFile:
    """One anonymous shared memory file of ``capacity`` bytes (closed on exec), mapped read-write
    in this process. ``name`` shows in ``/proc/PID/fd`` and ``/proc/PID/maps`` (for debugging)."""

    def __init__(self, name: str, capacity: int):
        self.capacity = capacity
        self.fd = os.memfd_create(name, os.MFD_CLOEXEC)
        os.ftruncate(self.fd, capacity)
        # MAP_POPULATE: the pages are faulted in by one call instead of one fault per 4 KiB.
        self.mm = mmap.mmap(self.fd, capacity, flags=mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0))

    def close(self) -> None:
        """Unmap and close the file (BufferError, file left open, while arrays still view the mapping)."""
        self.mm.close()
        os.close(self.fd)


class Slots:
    """Reusable shared memory files of a helper, one per batch in flight: allocating and faulting
    in fresh pages for every batch cost more than the reads (68 against 18 us per 50 KB file,
    measured). A slot is busy from :meth:`take` until the pipeline reports it freed
    (:meth:`release`: every array of that batch is gone on the pipeline's side)."""

    def __init__(self):
        self.slots: dict[int, SharedFile] = {}  # slot id -> its file, oldest first
        self.busy: set[int] = set()
        self.next_id = 0

    def take(self, total: int):
        """(slot id, fd to send or -1, capacity, mmap) of a free slot holding ``total`` bytes.
        The fd is -1 when the slot is one the pipeline has mapped already; a new slot's fd stays
        open here (the pipeline's copy of it arrives with the message)."""
        free = [k for k in self.slots if k not in self.busy]
        fitting = [k for k in free if self.slots[k].capacity >= total]
        if fitting:
            k = min(fitting, key=lambda j: self.slots[j].capacity)
            self.busy.add(k)
            return k, -1, self.slots[k].capacity, self.slots[k].mm
        if free:  # grow a free slot rather than keep one more
            self.slots.pop(free[0]).close()
        k = self.next_id  # (ids are never reused: the pipeline's mapping of an id is replaced)
        self.next_id += 1
        slot = self.slots[k] = SharedFile(f"stoker-batch-{k}", max(total + total // 2, 1 << 20))
        self.busy.add(k)
        return k, slot.fd, slot.capacity, slot.mm

    def release(self, ids) -> None:
        """Mark the slots ``ids`` free for reuse (ids no longer held are ignored)."""
        for k in ids:
            self.busy.discard(k)


class PinnedSlot(SharedFile):
    """One shared memory file the pipeline lends to its decode helpers: mapped here (``view``, a
    uint8 NumPy array; ``ptr``, its address) and registered with CUDA as pinned memory unless
    ``pin`` is False. ``key`` names it in the helpers' messages (never reused: a helper keeps its
    mapping of a key until told otherwise)."""

    def __init__(self, key: int, capacity: int, pin: bool):
        import ctypes

        import numpy as np

        super().__init__(f"stoker-decode-{key}", capacity)
        self.key = key
        self._anchor = ctypes.c_char.from_buffer(self.mm)
        self.ptr = ctypes.addressof(self._anchor)
        self.view = np.frombuffer(self.mm, np.uint8)
        self.cp = None
        if pin:  # the upload then copies straight from here, as from any pinned buffer
            from stoker.backend import cuda

            self.cp = cuda.cupy()
            self.cp.cuda.runtime.hostRegister(self.ptr, capacity, 0)

    def close(self) -> None:
        """Unregister, unmap (unless a batch's arrays still view it: the mapping then goes with the
        last of them) and close the file."""
        try:
            if self.cp is not None:
                self.cp.cuda.runtime.hostUnregister(self.ptr)
        except Exception:  # noqa: BLE001 - the context may be gone at interpreter exit
            pass
        self.view = self._anchor = None
        try:
            self.mm.close()
        except BufferError:  # a batch's arrays still view it: the mapping goes with the last of them
            pass
        os.close(self.fd)


def map_received(maps: dict, k: int, fds: list, capacity: int) -> None:
    """Map (read-only) the shared memory file a helper sent for its slot ``k`` into ``maps``,
    replacing an older mapping of that slot, and close the received descriptors."""
    try:
        old = maps.pop(k, None)
        if old is not None:
            old.close()
        maps[k] = mmap.mmap(fds[0], capacity, prot=mmap.PROT_READ)
    finally:
        for fd in fds:
            os.close(fd)
