"""Device tensors and batches: ``TensorGPU`` and ``TensorListGPU`` (CuPy-backed).

A dense batch (all samples one shape) is one contiguous CuPy array ``(N, ...)``
whose per-sample entries are views, so ``as_tensor()`` and DLPack hand it to a
framework with no copy. A ragged batch is a list of CuPy arrays (possibly
views into one buffer, or buffers owned by a decoder; ``keep_alive`` holds
those owners).

Ordering: work producing a batch runs on the pipeline's stream. The pipeline
calls :meth:`TensorListGPU.set_ready_event` with an event recorded after it;
``__dlpack__(stream=s)`` makes the consumer's stream ``s`` wait on that event
(no host block), while host-side accessors (``as_cpu``, ``at``,
``__cuda_array_interface__``) wait for it on the host first.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence

import numpy as np

from stoker import types
from stoker.backend.cuda import cupy
from stoker.tensors import SampleList, TensorCPU, TensorListCPU


def _release_after(consumer_handle: int, producer) -> None:
    """The consumer dropped an exported batch: order the producer's later work after the consumer's."""
    cp = cupy()
    try:
        ev = cp.cuda.Event(disable_timing=True)
        cp.cuda.runtime.eventRecord(ev.ptr, consumer_handle)
        producer.wait_event(ev)
    except Exception:  # noqa: BLE001 - at interpreter exit the streams may be gone
        pass


def _wait_stream(ev, stream_handle) -> None:
    """Make the stream with raw handle ``stream_handle`` wait for ``ev`` (device side)."""
    cp = cupy()
    cp.cuda.runtime.streamWaitEvent(int(stream_handle), ev.ptr)


class TensorGPU:
    """One device sample (or a dense batch from ``as_tensor``): a CuPy array with a layout."""

    __slots__ = ("_array", "_layout", "_source_info", "_event", "_owner")

    def __init__(self, array, layout: str = "", source_info: str = "", event=None, owner=None):
        self._array = cupy().asarray(array)
        self._layout = layout or ""
        self._source_info = source_info or ""
        self._event = event
        self._owner = owner

    def _ready_on_host(self):
        if self._event is not None:
            self._event.synchronize()

    def shape(self) -> list[int]:
        return list(self._array.shape)

    def layout(self) -> str:
        return self._layout

    def source_info(self) -> str:
        return self._source_info

    @property
    def dtype(self) -> types.DALIDataType:
        return types.to_dali_type(np.dtype(self._array.dtype))

    def as_cpu(self) -> TensorCPU:
        self._ready_on_host()
        return TensorCPU(self._array.get(), self._layout, self._source_info)

    def as_array(self):
        """The CuPy array (waits on the host until its producer is done)."""
        self._ready_on_host()
        return self._array

    def data_ptr(self) -> int:
        return self._array.data.ptr

    def copy_to_external(self, dst, cuda_stream=None, non_blocking=False) -> None:
        cp = cupy()
        self._ready_on_host()
        cp.asarray(dst)[...] = self._array

    @property
    def __cuda_array_interface__(self):
        self._ready_on_host()
        return self._array.__cuda_array_interface__

    def __dlpack__(self, stream=None, **kwargs):
        consumer = None if stream is None or stream == -1 else (0 if stream == 1 else int(stream))
        if self._event is not None:
            if consumer is None:
                self._event.synchronize()
            else:
                _wait_stream(self._event, consumer)
        # A fresh view is exported: when the consumer lets go of it, the producer stream is
        # made to wait for the consumer's queued work before the memory can be reused.
        view = self._array.view()
        producer = getattr(self._owner, "_stream", None)
        if consumer is not None and producer is not None:
            weakref.finalize(view, _release_after, consumer, producer)
        try:
            # Ordering is handled above, so CuPy is told not to synchronize again.
            return view.__dlpack__(stream=-1, **kwargs)
        except (TypeError, ValueError):
            return view.__dlpack__()

    def __dlpack_device__(self):
        return self._array.__dlpack_device__()

    def __repr__(self) -> str:
        return f"TensorGPU(shape={self.shape()}, dtype={self.dtype!r}, layout={self._layout!r})"


class TensorListGPU(SampleList):
    """A batch of device samples (DALI's ``TensorListGPU``).

    Args:
        data: a CuPy array with a leading batch axis (dense), a list of CuPy
            arrays, or a ``TensorListCPU`` / list of NumPy arrays (copied).
        layout: per-sample layout, e.g. "HWC".
        source_info: per-sample source descriptions (file paths).
        keep_alive: objects that own the memory behind the samples.
    """

    def __init__(self, data, layout: str = "", source_info: Sequence[str] | None = None,
                 keep_alive=None):
        cp = cupy()
        self._dense = None
        self._flat = None  # (buffer, element offsets, shapes) of a ragged batch in one buffer
        self._sample_list = None  # per-sample views, made on first use
        self._geometry = None  # (storage it describes, geometry()'s arrays)
        if isinstance(data, TensorListGPU):
            self._dense, self._flat, self._sample_list = data._dense, data._flat, data._sample_list
            if self._sample_list is not None:
                self._sample_list = list(self._sample_list)
            layout = layout or data._layout
            source_info = source_info or data._source_info
            keep_alive = keep_alive or data._keep_alive
        elif isinstance(data, TensorListCPU):
            layout = layout or data.layout()
            source_info = source_info or data.source_info()
            self._sample_list = [cp.asarray(s) for s in data.samples()]
        elif isinstance(data, cp.ndarray):
            if data.ndim == 0:
                raise ValueError("TensorListGPU: a dense input needs a leading batch dimension")
            self._dense = data
        else:
            self._sample_list = [cp.asarray(x) for x in data]
        self._layout = layout or ""
        n = len(self)
        self._source_info = list(source_info) if source_info is not None else [""] * n
        if len(self._source_info) < n:
            self._source_info += [""] * (n - len(self._source_info))
        self._keep_alive = keep_alive
        self._event = None
        # Set by the operator that made the batch when its memory is a fresh allocation that no
        # cache or other batch holds: the executor may then let the last operator that reads it
        # write its output in place (see Executor._donated_inputs).
        self.fresh = False
        # The stream the samples were made on (their memory is reused in this stream's order).
        self._stream = cp.cuda.get_current_stream()
        if self._sample_list:
            ndims = {s.ndim for s in self._sample_list}
            dtypes = {s.dtype for s in self._sample_list}
            if len(ndims) > 1:
                raise ValueError(f"TensorListGPU: samples differ in number of dimensions {sorted(ndims)}")
            if len(dtypes) > 1:
                raise TypeError(f"TensorListGPU: samples differ in dtype {sorted(map(str, dtypes))}")

    @classmethod
    def from_flat(cls, buffer, offsets, shapes, layout: str = "", source_info: Sequence[str] | None = None,
                  keep_alive=None) -> TensorListGPU:
        """A ragged batch stored back to back in one 1D CuPy ``buffer``.

        ``offsets[i]`` (elements) and ``shapes[i]`` place sample ``i``. No
        per-sample array is made until one is asked for, and kernels read the
        placement through :meth:`geometry` as whole arrays.
        """
        shapes = np.asarray(shapes, dtype=np.int64)
        offsets = np.asarray(offsets, dtype=np.int64).reshape(-1)
        if shapes.ndim != 2 or shapes.shape[0] != offsets.size:
            raise ValueError("TensorListGPU.from_flat: shapes must be (N, ndim) with one offset per sample")
        tl = cls([], layout, None, keep_alive)
        tl._sample_list = None
        tl._flat = (buffer, offsets, shapes)
        n = offsets.size
        tl._source_info = list(source_info) if source_info is not None else [""] * n
        if len(tl._source_info) < n:
            tl._source_info += [""] * (n - len(tl._source_info))
        return tl

    def memory_ids(self) -> set:
        """Identities of the device allocations the samples live in (views of one allocation
        share its identity): what the executor compares to know whether two batches share memory."""
        if self._dense is not None:
            return {id(self._dense.data.mem)}
        if self._flat is not None:
            return {id(self._flat[0].data.mem)}
        return {id(s.data.mem) for s in self._samples}

    def flat_parts(self):
        """(1-D buffer, element offsets, shapes) when the samples lie in one device buffer (a
        ragged batch from :meth:`from_flat`, or a dense one), else None. Element-wise kernels
        then run over the buffer once instead of per sample; the buffer may hold gaps between
        samples (their values are not used)."""
        if self._flat is not None:
            return self._flat
        d = self._dense
        if d is not None and d.ndim >= 1 and d.flags.c_contiguous:
            n = int(d.shape[0])
            per = int(np.prod(d.shape[1:], dtype=np.int64))
            # kept: a batch is asked many times (each split of a per-sample if, each operator);
            # everything else reads _dense first, so the batch stays a dense one
            self._flat = (d.reshape(-1), np.arange(n, dtype=np.int64) * per,
                          np.tile(np.asarray(d.shape[1:], np.int64), (n, 1)))
            return self._flat
        return None

    # --- samples, made lazily ----------------------------------------------------
    @property
    def _samples(self) -> list:
        if self._sample_list is None:
            if self._dense is not None:
                self._sample_list = [self._dense[i] for i in range(self._dense.shape[0])]
            elif self._flat is not None:
                buf, offsets, shapes = self._flat
                self._sample_list = [buf[o:o + int(np.prod(s))].reshape(tuple(s))
                                     for o, s in zip(offsets.tolist(), shapes.tolist())]
            else:
                self._sample_list = []
        return self._sample_list

    @_samples.setter
    def _samples(self, value) -> None:
        self._sample_list = value

    def __len__(self) -> int:
        if self._sample_list is None:
            if self._dense is not None:
                return int(self._dense.shape[0])
            if self._flat is not None:
                return int(self._flat[1].size)
        return len(self._samples)

    def shape(self) -> list[tuple[int, ...]]:
        if self._sample_list is None and self._dense is not None:
            return [tuple(self._dense.shape[1:])] * int(self._dense.shape[0])
        if self._sample_list is None and self._flat is not None:
            return [tuple(s) for s in self._flat[2].tolist()]
        return super().shape()

    def is_dense_tensor(self) -> bool:
        if self._dense is not None:
            return True
        if self._sample_list is None and self._flat is not None:
            shapes = self._flat[2]
            return bool(shapes.shape[0] <= 1 or (shapes == shapes[0]).all())
        return super().is_dense_tensor()

    @property
    def dtype(self) -> types.DALIDataType:
        base = self._dense if self._dense is not None else self._flat[0] if self._flat is not None else None
        if base is not None and self._sample_list is None:
            return types.to_dali_type(np.dtype(base.dtype)) if len(self) else types.NO_TYPE
        return super().dtype

    def element_dtype(self) -> np.dtype:
        """The samples' NumPy dtype, read without making per-sample views (uint8 for an empty batch)."""
        if self._sample_list is None:
            base = self._dense if self._dense is not None else self._flat[0] if self._flat is not None else None
            if base is not None:
                return np.dtype(base.dtype)
        return np.dtype(self._samples[0].dtype) if self._samples else np.dtype(np.uint8)

    @property
    def ndim(self) -> int:
        if self._sample_list is None and self._dense is not None:
            return self._dense.ndim - 1
        if self._sample_list is None and self._flat is not None:
            return int(self._flat[2].shape[1])
        return super().ndim

    def geometry(self):
        """Placement of every sample as arrays: ``(pointers, row strides in bytes, shapes)``.

        ``shapes`` is ``(N, ndim)`` int64. For batch kernels that build their
        per-sample tables with NumPy instead of a Python loop; samples must
        be row-contiguous within a row (checked for list-backed batches).
        """
        # Kept until the batch's storage changes: the operators of a GPU stage ask a batch for it
        # several times (checks, plans, the kernel's table), and it is the same every time. The
        # arrays are read-only, so that no caller changes what the next one reads.
        key = (self._dense, self._flat, self._sample_list)
        cached = self._geometry
        if cached is not None and all(a is b for a, b in zip(cached[0], key)):
            return cached[1]
        out = self._compute_geometry()
        for a in out:
            a.flags.writeable = False
        self._geometry = (key, out)
        return out

    def _compute_geometry(self):
        n = len(self)
        if self._dense is not None:
            d = self._dense
            ptrs = d.data.ptr + np.arange(n, dtype=np.int64) * (d.strides[0] if n else 0)
            shapes = np.empty((n, d.ndim - 1), np.int64)
            shapes[:] = d.shape[1:]
            row = np.full(n, d.strides[1] if d.ndim > 1 else d.itemsize, np.int64)
            return ptrs, row, shapes
        if self._flat is not None:
            buf, offsets, shapes = self._flat
            item = buf.itemsize
            ptrs = buf.data.ptr + offsets * item
            row = (np.prod(shapes[:, 1:], axis=1) * item).astype(np.int64) if shapes.shape[1] > 1 \
                else np.full(n, item, np.int64)
            return ptrs, row, shapes.copy()  # (a copy: _flat's own shapes stay writable for its owner)
        samples = self._samples
        ptrs = np.fromiter((s.data.ptr for s in samples), np.int64, n)
        row = np.fromiter((s.strides[0] for s in samples), np.int64, n)
        shapes = np.asarray([s.shape for s in samples], np.int64).reshape(n, -1)
        return ptrs, row, shapes

    # --- ordering ------------------------------------------------------------
    def set_ready_event(self, event) -> None:
        """Record that the batch is complete once ``event`` (a CuPy Event) has happened."""
        self._event = event

    def ready_event(self):
        return self._event

    def _ready_on_host(self):
        if self._event is not None:
            self._event.synchronize()

    # --- DALI API --------------------------------------------------------------
    def __getitem__(self, i: int) -> TensorGPU:
        if not -len(self) <= i < len(self):
            raise IndexError(f"sample index {i} out of range for a batch of {len(self)}")
        return TensorGPU(self._samples[i], self._layout, self._source_info[i], self._event, self)

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def at(self, i: int):
        """Sample ``i`` as a CuPy array (waits on the host for the producer)."""
        self._ready_on_host()
        return self._samples[i]

    def samples(self) -> list:
        """The per-sample CuPy arrays (no copy, no wait: for work on the pipeline's stream)."""
        return self._samples

    def dense(self):
        """The contiguous ``(N, ...)`` array when the batch has one, else None (no wait)."""
        return self._dense

    def as_tensor(self) -> TensorGPU:
        """The batch as one ``(N, ...)`` device tensor (no copy when it is stored dense)."""
        cp = cupy()
        if not self.is_dense_tensor():
            shapes = ", ".join(str(s) for s in self.shape()[:4])
            raise ValueError(f"as_tensor: the samples differ in shape ({shapes}, ...); use at(i) per sample")
        if self._dense is None:
            if self._flat is not None and len(self):
                buf, offsets, shapes = self._flat
                per = int(np.prod(shapes[0]))
                if (offsets == np.arange(len(self)) * per).all():  # back to back: a view, no copy
                    self._dense = buf[:per * len(self)].reshape((len(self), *shapes[0].tolist()))
            if self._dense is None:
                self._dense = cp.stack(self._samples) if self._samples else cp.zeros((0,), cp.uint8)
            self._sample_list = None
        layout = "N" + self._layout if self._layout else ""
        return TensorGPU(self._dense, layout, "", self._event, self)

    def as_cpu(self) -> TensorListCPU:
        """Copy the batch to the host (one copy when dense)."""
        self._ready_on_host()
        if self._dense is not None:
            host = self._dense.get()
            samples = list(host)
        elif self._flat is not None and self._sample_list is None:
            buf, offsets, shapes = self._flat
            host = buf.get()  # one copy for the whole batch
            samples = [host[o:o + int(np.prod(s))].reshape(tuple(s)) for o, s in zip(offsets.tolist(), shapes.tolist())]
        else:
            samples = [s.get() for s in self._samples]
        return TensorListCPU(samples, self._layout, self._source_info)

    def as_reshaped_tensor(self, shape) -> TensorGPU:
        cp = cupy()
        flat = cp.concatenate([s.reshape(-1) for s in self._samples])
        return TensorGPU(flat.reshape(shape), "", "", self._event)

    def data_ptr(self) -> int:
        if self._dense is not None:
            return self._dense.data.ptr
        if self._flat is not None:
            return self._flat[0].data.ptr + int(self._flat[1][0]) * self._flat[0].itemsize if len(self) else 0
        return self._samples[0].data.ptr if self._samples else 0

    def copy_to_external(self, dst, cuda_stream=None, non_blocking=False) -> None:
        self.as_tensor().copy_to_external(dst)

    # --- interop -----------------------------------------------------------------
    @property
    def __cuda_array_interface__(self):
        return self.as_tensor().__cuda_array_interface__

    def __dlpack__(self, stream=None, **kwargs):
        return self.as_tensor().__dlpack__(stream=stream, **kwargs)

    def __dlpack_device__(self):
        base = self._dense if self._dense is not None else self._flat[0] if self._flat is not None else None
        if base is not None:
            return (2, base.device.id)
        return (2, self._samples[0].device.id if self._samples else 0)  # kDLCUDA

    def __repr__(self) -> str:
        if self.is_dense_tensor() and len(self):
            shape = f"[{len(self)}, {', '.join(map(str, self.shape()[0]))}]"
        else:
            shape = "[" + ", ".join(str(s) for s in self.shape()[:4]) + (", ...]" if len(self) > 4 else "]")
        return (f"TensorListGPU(num_samples={len(self)}, dtype={self.dtype!r}, layout={self._layout!r}, "
                f"shape={shape})")

    __str__ = __repr__


def dense_or_none(tl: TensorListGPU):
    """The dense (N, ...) array of a batch, or None when ragged."""
    return tl.dense()
