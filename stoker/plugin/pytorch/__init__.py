"""PyTorch iterators over stoker pipelines, with DALI's names and semantics.

``from stoker.plugin.pytorch import DALIGenericIterator`` works as
``nvidia.dali.plugin.pytorch.DALIGenericIterator`` does: each step returns a
list with one dict per pipeline (one per GPU), mapping the names of
``output_map`` to ``torch.Tensor`` batches. Epochs, the last batch and shards
follow :mod:`stoker.plugin.base_iterator`.

Host outputs become CPU tensors that share memory with the batch (no copy
beyond stacking the samples); GPU outputs are handed over by DLPack, ordered
on the current torch CUDA stream. torch is imported when an iterator is made,
so ``import stoker`` works without it.
"""

from __future__ import annotations

import numpy as np

from stoker.plugin.base_iterator import BaseIterator, LastBatchPolicy
from stoker.tensors import is_gpu_array

__all__ = [
    "DALIGenericIterator",
    "DALIClassificationIterator",
    "DALIRaggedIterator",
    "LastBatchPolicy",
    "StokerGenericIterator",
    "StokerClassificationIterator",
    "StokerRaggedIterator",
    "feed_ndarray",
    "to_torch",
]


def _torch():
    try:
        import torch
    except ImportError:
        raise ImportError("stoker.plugin.pytorch needs PyTorch: pip install 'stoker[torch]'") from None
    return torch




def _device_index(x, default) -> int | None:
    dev = getattr(x, "__dlpack_device__", None)
    if dev is not None:
        return int(dev()[1])
    did = getattr(x, "device_id", None)
    return did() if callable(did) else (did if did is not None else default)


def _array_to_torch(arr: np.ndarray):
    torch = _torch()
    if not arr.flags.writeable:
        # torch warns on read-only memory; operators may hand out read-only constants.
        arr = arr.copy()
    if arr.dtype.kind == "U" or arr.dtype == object:
        raise TypeError(f"cannot make a torch tensor from {arr.dtype} data")
    return torch.from_numpy(np.ascontiguousarray(arr))


def to_torch(batch, name: str = "output", device_id: int | None = None):
    """A stoker batch (TensorListCPU/TensorListGPU, or one tensor) as one dense ``torch.Tensor``.

    CPU: the samples are stacked once and shared with torch. GPU: zero-copy through DLPack,
    ordered on torch's current stream of that device.
    """
    torch = _torch()
    if is_gpu_array(batch):
        if hasattr(batch, "is_dense_tensor") and not batch.is_dense_tensor():
            raise ValueError(
                f"iterator: output '{name}' has samples of different shapes ({batch.shape()[:4]}...); "
                "make them equal (resize, crop, pad) or use DALIRaggedIterator with SPARSE_LIST_TAG")
        dense = batch.as_tensor() if hasattr(batch, "as_tensor") else batch
        dev = _device_index(dense, device_id)
        with torch.cuda.device(dev if dev is not None else 0):
            return torch.from_dlpack(dense)
    if hasattr(batch, "samples"):
        if not batch.is_dense_tensor():
            raise ValueError(
                f"iterator: output '{name}' has samples of different shapes ({batch.shape()[:4]}...); "
                "make them equal (resize, crop, pad) or use DALIRaggedIterator with SPARSE_LIST_TAG")
        samples = batch.samples()
        if not samples:
            return torch.empty((0,))
        if len(samples) == 1:
            return _array_to_torch(samples[0][np.newaxis])
        return _array_to_torch(np.stack(samples))
    return _array_to_torch(np.asarray(batch))


def feed_ndarray(tensor, arr, cuda_stream=None):
    """Copy a stoker tensor or dense batch into the existing ``torch.Tensor`` ``arr`` (DALI's helper).

    Element type and shape must match. GPU data is copied on ``cuda_stream`` (a ``torch.cuda.Stream``)
    or on torch's current stream. Returns ``arr``.
    """
    torch = _torch()
    src = to_torch(tensor) if hasattr(tensor, "is_dense_tensor") else None
    if src is None:
        if is_gpu_array(tensor):
            src = torch.from_dlpack(tensor)
        else:
            src = _array_to_torch(np.asarray(tensor.as_array() if hasattr(tensor, "as_array") else tensor))
    if src.dtype != arr.dtype:
        raise TypeError(f"feed_ndarray: the source holds {src.dtype} but the target tensor is {arr.dtype}")
    if tuple(src.shape) != tuple(arr.shape):
        raise ValueError(f"feed_ndarray: shapes differ: source {tuple(src.shape)}, target {tuple(arr.shape)}")
    if arr.is_cuda or src.is_cuda:
        stream = cuda_stream if cuda_stream is not None else torch.cuda.current_stream(arr.device)
        with torch.cuda.stream(stream):
            arr.copy_(src, non_blocking=True)
    else:
        arr.copy_(src)
    return arr


def __getattr__(name):
    # to_torch_type (DALI's table of element types) needs torch: built on first use.
    if name == "to_torch_type":
        from stoker import types

        torch = _torch()
        table = {types.FLOAT: torch.float32, types.FLOAT64: torch.float64, types.FLOAT16: torch.float16,
                 types.UINT8: torch.uint8, types.INT8: torch.int8, types.BOOL: torch.bool,
                 types.INT16: torch.int16, types.INT32: torch.int32, types.INT64: torch.int64}
        globals()["to_torch_type"] = table
        return table
    raise AttributeError(f"module 'stoker.plugin.pytorch' has no attribute {name!r}")


def _sample_list_to_torch(batch, device_id):
    torch = _torch()
    if is_gpu_array(batch):
        dev = _device_index(batch, device_id)
        with torch.cuda.device(dev if dev is not None else 0):
            return [torch.from_dlpack(batch[i]) for i in range(len(batch))]
    return [_array_to_torch(s) for s in batch.samples()]


class DALIGenericIterator(BaseIterator):
    """Iterates over stoker pipelines, returning PyTorch tensors.

    Each step returns ``[{name: torch.Tensor, ...}, ...]``, one dict per pipeline, named by
    ``output_map`` (one distinct name per pipeline output). See
    :class:`~stoker.plugin.base_iterator.BaseIterator` for ``size``, ``reader_name``,
    ``auto_reset``, ``last_batch_policy``, ``last_batch_padded`` and ``prepare_first_batch``.
    ``dynamic_shape`` is accepted for compatibility and ignored.

    With the data set 1..7 and batch size 2, the epoch's last batch is:
    FILL: ``[7, 1]`` (``[7, 7]`` when the reader pads), DROP: none (``[5, 6]`` is the last),
    PARTIAL: ``[7]``.
    """

    def __init__(self, pipelines, output_map, size=-1, reader_name=None, auto_reset=False,
                 fill_last_batch=None, dynamic_shape=False, last_batch_padded=False,
                 last_batch_policy=LastBatchPolicy.FILL, prepare_first_batch=True):
        _torch()
        output_map = list(output_map)
        if len(set(output_map)) != len(output_map):
            raise ValueError(f"iterator: output_map names must be distinct, got {output_map}")
        self.output_map = output_map
        self._output_categories = set(output_map)
        super().__init__(pipelines, size, reader_name, auto_reset, fill_last_batch, last_batch_padded,
                         last_batch_policy, prepare_first_batch=prepare_first_batch)
        self._prepare()

    def _check_outputs(self, outputs) -> None:
        if len(outputs) != len(self.output_map):
            raise ValueError(f"iterator: the pipeline has {len(outputs)} outputs but output_map names "
                             f"{len(self.output_map)}: {self.output_map}")

    def _convert(self, pipe_index, outputs):
        self._check_outputs(outputs)
        dev = self._pipes[pipe_index].device_id
        return {name: to_torch(out, name, dev) for name, out in zip(self.output_map, outputs)}


class DALIClassificationIterator(DALIGenericIterator):
    """:class:`DALIGenericIterator` with ``output_map=["data", "label"]``."""

    def __init__(self, pipelines, size=-1, reader_name=None, auto_reset=False, fill_last_batch=None,
                 dynamic_shape=False, last_batch_padded=False, last_batch_policy=LastBatchPolicy.FILL,
                 prepare_first_batch=True):
        super().__init__(pipelines, ["data", "label"], size, reader_name=reader_name, auto_reset=auto_reset,
                         fill_last_batch=fill_last_batch, dynamic_shape=dynamic_shape,
                         last_batch_padded=last_batch_padded, last_batch_policy=last_batch_policy,
                         prepare_first_batch=prepare_first_batch)


class DALIRaggedIterator(DALIGenericIterator):
    """Like :class:`DALIGenericIterator`, for outputs whose samples differ in shape.

    ``output_types`` tags each output: ``DENSE_TAG`` (one tensor, samples must agree in shape),
    ``SPARSE_LIST_TAG`` (a list of per-sample tensors) or ``SPARSE_COO_TAG`` (a sparse COO
    tensor of 1D samples, row = sample).
    """

    DENSE_TAG: str = "dense"
    SPARSE_LIST_TAG: str = "sparse_list"
    SPARSE_COO_TAG: str = "sparse_coo"

    def __init__(self, pipelines, output_map, size=-1, reader_name=None, output_types=None, auto_reset=False,
                 fill_last_batch=None, dynamic_shape=False, last_batch_padded=False,
                 last_batch_policy=LastBatchPolicy.FILL, prepare_first_batch=True):
        tags = {self.DENSE_TAG, self.SPARSE_LIST_TAG, self.SPARSE_COO_TAG}
        if output_types is not None:
            if not set(output_types) <= tags:
                raise ValueError(f"iterator: output_types must be DENSE_TAG, SPARSE_LIST_TAG or SPARSE_COO_TAG, "
                                 f"got {output_types}")
            if len(output_types) != len(output_map):
                raise ValueError(f"iterator: output_types has {len(output_types)} tags for "
                                 f"{len(output_map)} outputs")
        self._outputs_types = list(output_types) if output_types is not None else None
        super().__init__(pipelines, output_map, size, reader_name=reader_name, auto_reset=auto_reset,
                         fill_last_batch=fill_last_batch, dynamic_shape=dynamic_shape,
                         last_batch_padded=last_batch_padded, last_batch_policy=last_batch_policy,
                         prepare_first_batch=prepare_first_batch)

    def _convert(self, pipe_index, outputs):
        self._check_outputs(outputs)
        torch = _torch()
        dev = self._pipes[pipe_index].device_id
        result = {}
        for j, (name, out) in enumerate(zip(self.output_map, outputs)):
            tag = self._outputs_types[j] if self._outputs_types else self.DENSE_TAG
            if tag == self.DENSE_TAG:
                result[name] = to_torch(out, name, dev)
                continue
            tensors = _sample_list_to_torch(out, dev)
            if tag == self.SPARSE_COO_TAG:
                values = torch.hstack(tensors)
                rows = torch.cat([torch.full((t.shape[0],), i, dtype=torch.int64) for i, t in enumerate(tensors)])
                cols = torch.cat([torch.arange(t.shape[0], dtype=torch.int64) for t in tensors])
                indices = torch.stack([rows, cols]).to(values.device)
                result[name] = torch.sparse_coo_tensor(indices, values, check_invariants=True)
            else:
                result[name] = tensors
        return result


# stoker's own names for the same classes.
StokerGenericIterator = DALIGenericIterator
StokerClassificationIterator = DALIClassificationIterator
StokerRaggedIterator = DALIRaggedIterator
