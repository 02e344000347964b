"""The JAX iterator over stoker pipelines and the ``data_iterator`` decorator (DALI's names).

Each step returns one dict ``{name: jax.Array}`` (not a list per pipeline, as the PyTorch
iterator does): with one pipeline the arrays are that pipeline's batch; with several, they are
one global array per output, split over devices by ``sharding`` (or stacked with a leading
device axis for ``jax.pmap``). Epochs, last batches, shards, ``reset()`` and checkpoints are
:class:`~stoker.plugin.base_iterator.BaseIterator`'s.

Hand-off is by DLPack. Host batches are stacked once into a 64-byte aligned buffer, which XLA's
CPU client adopts without a copy (it copies anything less aligned); 64-bit types are still
copied (narrowed) unless ``jax_enable_x64`` is on. GPU batches (CuPy memory) are adopted as
they are, ordered on JAX's stream by ``__dlpack__(stream=...)``. Only dense outputs can become
one array: an output whose samples differ in shape raises an error naming it.
"""

from __future__ import annotations

import functools

import numpy as np

from stoker.plugin.base_iterator import BaseIterator, LastBatchPolicy
from stoker.tensors import is_gpu_array

__all__ = ["DALIGenericIterator", "data_iterator", "to_jax", "default_num_threads_value"]

_ALIGN = 64  # bytes: XLA's CPU client adopts host buffers aligned to this without copying


def import_jax():
    """The ``jax`` module (with ``jax.dlpack``), or an ImportError that says how to install it."""
    try:
        import jax
        import jax.dlpack  # noqa: F401 - the submodule is not loaded by `import jax` alone
    except ImportError:
        raise ImportError("stoker.plugin.jax needs JAX: pip install jax (or jax[cuda13] for GPUs)") from None
    return jax


def _aligned_stack(samples: list[np.ndarray]) -> np.ndarray:
    """The samples stacked into one new array whose data starts on a 64-byte boundary."""
    first = samples[0]
    shape = (len(samples), *first.shape)
    nbytes = int(np.prod(shape)) * first.dtype.itemsize
    raw = np.empty(nbytes + _ALIGN, np.uint8)
    offset = (-raw.ctypes.data) % _ALIGN
    out = raw[offset:offset + nbytes].view(first.dtype).reshape(shape)
    np.stack(samples, out=out)
    return out


def _ragged_error(name: str, batch) -> ValueError:
    return ValueError(
        f"JAX iterator: output '{name}' has samples of different shapes ({batch.shape()[:4]}...); a jax.Array "
        "is dense: make them equal in the pipeline (resize, crop, pad) or return a per-sample shape and pad")


def to_jax(batch, name: str = "output"):
    """A stoker batch (TensorListCPU/TensorListGPU, or one tensor) as one dense ``jax.Array``.

    The array lives on the batch's device (CPU batches on JAX's CPU device) and shares memory
    with it where XLA allows (see the module docstring).
    """
    jax = import_jax()
    if hasattr(batch, "is_dense_tensor") and not batch.is_dense_tensor():
        raise _ragged_error(name, batch)
    if is_gpu_array(batch):
        dense = batch.as_tensor() if hasattr(batch, "as_tensor") else batch
        return jax.dlpack.from_dlpack(dense)
    if hasattr(batch, "samples"):
        samples = batch.samples()
        if not samples:
            raise ValueError(f"JAX iterator: output '{name}' is an empty batch")
        arr = _aligned_stack(samples)
    else:
        arr = np.asarray(batch)
        if arr.ctypes.data % _ALIGN or not arr.flags.c_contiguous:
            arr = _aligned_stack(list(arr)) if arr.ndim else np.array(arr)
    if arr.dtype.kind in "UO":
        raise TypeError(f"JAX iterator: output '{name}' holds {arr.dtype} data, which JAX cannot hold")
    return jax.dlpack.from_dlpack(arr)


def _device_of(arr):
    return next(iter(arr.devices()))


class DALIGenericIterator(BaseIterator):
    """Iterates over stoker pipelines, returning ``{name: jax.Array}`` per step.

    Arguments beyond :class:`~stoker.plugin.base_iterator.BaseIterator`'s (``size``,
    ``reader_name``, ``auto_reset``, ``last_batch_policy``, ``last_batch_padded``,
    ``prepare_first_batch``):

      output_map: one distinct name per pipeline output.
      sharding: a ``jax.sharding.Sharding`` for the global batch: its first axis is split into
        one piece per pipeline (pipeline ``i`` gives rows ``i*b:(i+1)*b``); each device gets its
        piece, copied there when the pipeline's output lives elsewhere (CPU pipelines).
      pmap_compatible: without ``sharding``, stack several pipelines' batches as
        ``[num_pipelines, batch, ...]`` (the default with several pipelines and no sharding).

    ``LastBatchPolicy.PARTIAL`` is allowed with one pipeline and no sharding (DALI refuses it
    always): the last array of an epoch is shorter. Sharded arrays need equal pieces: use FILL
    (and the peekable iterator's ``is_nonpadding`` mask) or DROP.
    """

    def __init__(self, pipelines, output_map, size=-1, reader_name=None, auto_reset=False,
                 last_batch_padded=False, last_batch_policy=LastBatchPolicy.FILL, prepare_first_batch=True,
                 sharding=None, pmap_compatible=None):
        jax = import_jax()
        output_map = list(output_map)
        if not output_map or len(set(output_map)) != len(output_map):
            raise ValueError(f"JAX iterator: output_map needs distinct names, got {output_map}")
        self.output_map = output_map
        self._output_categories = set(output_map)
        if sharding is not None and not isinstance(sharding, jax.sharding.Sharding):
            raise TypeError(f"JAX iterator: sharding must be a jax.sharding.Sharding, got {type(sharding).__name__}")
        self._sharding = sharding
        n_pipes = len(pipelines) if isinstance(pipelines, (list, tuple)) else 1
        self._pmap_compatible = bool(pmap_compatible) if pmap_compatible is not None else False
        if last_batch_policy == LastBatchPolicy.PARTIAL and (n_pipes > 1 or sharding is not None
                                                             or self._pmap_compatible):
            raise ValueError("JAX iterator: LastBatchPolicy.PARTIAL needs one pipeline without sharding or pmap: "
                             "a global array cannot hold shards of different lengths. Use FILL (with "
                             "the peekable iterator's is_nonpadding mask) or DROP")
        super().__init__(pipelines, size, reader_name, auto_reset, None, last_batch_padded,
                         last_batch_policy, prepare_first_batch=prepare_first_batch)
        self._prepare()

    # --- conversion -------------------------------------------------------------
    def _convert(self, pipe_index, outputs):
        if len(outputs) != len(self.output_map):
            raise ValueError(f"JAX iterator: the pipeline has {len(outputs)} outputs but output_map names "
                             f"{len(self.output_map)}: {self.output_map}")
        return {name: to_jax(out, name) for name, out in zip(self.output_map, outputs)}

    def _combine(self, per_pipe: list[dict]) -> dict:
        if self._num_gpus == 1 and self._sharding is None and not self._pmap_compatible:
            return per_pipe[0]
        out = {}
        for name in self.output_map:
            pieces = [b[name] for b in per_pipe]
            shapes = {tuple(p.shape) for p in pieces}
            if len(shapes) > 1:
                raise ValueError(f"JAX iterator: output '{name}' has different shapes in the pipelines "
                                 f"({[tuple(p.shape) for p in pieces]}); a global array needs equal pieces")
            if self._sharding is not None:
                out[name] = self._with_sharding(name, pieces)
            else:
                out[name] = self._stacked(pieces)
        return out

    def _with_sharding(self, name: str, pieces: list):
        jax = import_jax()
        rows = pieces[0].shape[0]
        global_shape = (len(pieces) * rows, *pieces[0].shape[1:])
        index_map = self._sharding.addressable_devices_indices_map(global_shape)
        # Global row offsets of the pieces this process holds, in order: local pipeline k gives the
        # k-th of them (one process of several holds only its own devices' rows).
        starts = sorted({(idx[0].start or 0) if idx else 0 for idx in index_map.values()})
        if len(starts) != len(pieces):
            raise ValueError(f"JAX iterator: output '{name}': the sharding splits the batch axis into {len(starts)} "
                             f"piece(s) on this process's devices, but there are {len(pieces)} pipelines; give one "
                             "pipeline per piece (e.g. PartitionSpec over the first axis of a mesh of the devices)")
        arrays = []
        for device, idx in index_map.items():
            start, stop = (idx[0].start or 0, idx[0].stop or global_shape[0]) if idx else (0, global_shape[0])
            if stop - start != rows:
                raise ValueError(f"JAX iterator: output '{name}': device {device} holds rows {start}:{stop} of the "
                                 f"global batch, but each pipeline gives {rows}")
            piece = pieces[starts.index(start)]
            rest = tuple(idx[1:]) if idx else ()
            if any(s != slice(None) for s in rest):
                piece = piece[(slice(None), *rest)]
            arrays.append(jax.device_put(piece, device))
        return jax.make_array_from_single_device_arrays(global_shape, self._sharding, arrays)

    def _stacked(self, pieces: list):
        jax = import_jax()
        devices = [_device_of(p) for p in pieces]
        if len(set(devices)) == 1:  # every pipeline on one device (CPU pipelines): a plain stack
            return jax.numpy.stack(pieces)
        if len(set(devices)) != len(devices):
            raise ValueError("JAX iterator: the pipelines' outputs must be on distinct devices or all on one")
        mesh = jax.sharding.Mesh(np.array(devices), ("device",))
        sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("device"))
        shape = (len(pieces), *pieces[0].shape)
        return jax.make_array_from_single_device_arrays(shape, sharding, [p[None] for p in pieces])

    def _next_impl(self) -> dict:
        return self._combine(BaseIterator.__next__(self))

    def __next__(self) -> dict:
        return self._next_impl()

    def next(self) -> dict:
        """The next batch: ``{name: jax.Array}``."""
        return self.__next__()


def default_num_threads_value() -> int:
    """The ``num_threads`` the decorator gives pipelines that name none (a starting point, not tuned)."""
    return 4


def _make_iterator(iterator_type, func, args, wrapper_kwargs, checkpoints, it_kwargs, sharding, devices,
                   pmap_compatible):
    """Build the pipelines of a decorated definition and wrap them in ``iterator_type``."""
    from stoker.pipeline.pipeline import pipeline_def

    jax = import_jax()
    make_pipe = pipeline_def(func)
    wrapper_kwargs.setdefault("num_threads", default_num_threads_value())
    if sharding is None and devices is None:
        if "device_id" not in wrapper_kwargs:
            # JAX's first device is the one used; a CPU-only JAX gets a CPU-only pipeline.
            wrapper_kwargs["device_id"] = 0 if jax.devices()[0].platform == "gpu" else None
        pipe = make_pipe(*args, checkpoint=checkpoints[0] if checkpoints else None, **wrapper_kwargs)
        return iterator_type([pipe], pmap_compatible=pmap_compatible, **it_kwargs)
    if "batch_size" not in wrapper_kwargs:
        raise ValueError("data_iterator: pass batch_size (the global batch, split over the devices)")
    if devices is not None and jax.local_device_count() != jax.device_count():
        raise RuntimeError("data_iterator: devices= (pmap) works in one process only; use sharding= with "
                           "several processes")
    use = list(devices) if devices is not None else jax.local_devices()
    num_shards = len(devices) if devices is not None else jax.device_count()
    global_batch = wrapper_kwargs.pop("batch_size")
    if global_batch % num_shards:
        raise ValueError(f"data_iterator: batch_size {global_batch} does not split evenly over {num_shards} devices")
    if checkpoints and len(checkpoints) != len(use):
        raise ValueError(f"data_iterator: {len(checkpoints)} checkpoints for {len(use)} devices")
    pipes = []
    for k, device in enumerate(use):
        device_id = k if device.platform == "gpu" else None
        kw = {**wrapper_kwargs, "device_id": wrapper_kwargs.get("device_id", device_id)}
        pipes.append(make_pipe(*args, batch_size=global_batch // num_shards, shard_id=device.id,
                               num_shards=num_shards, checkpoint=checkpoints[k] if checkpoints else None, **kw))
    if sharding is not None:
        return iterator_type(pipes, sharding=sharding, pmap_compatible=pmap_compatible, **it_kwargs)
    return iterator_type(pipes, pmap_compatible=True if pmap_compatible is None else pmap_compatible, **it_kwargs)


def data_iterator_decorator(iterator_type, pipeline_fn, output_map, size, reader_name, auto_reset, last_batch_padded,
                            last_batch_policy, prepare_first_batch, sharding, devices, pmap_compatible):
    """What ``data_iterator`` returns, for an iterator class ``iterator_type`` (shared by clu's
    peekable form)."""
    if sharding is not None and devices is not None:
        raise ValueError("data_iterator: give sharding or devices, not both")
    it_kwargs = dict(output_map=output_map, size=size, reader_name=reader_name, auto_reset=auto_reset,
                     last_batch_padded=last_batch_padded, last_batch_policy=last_batch_policy,
                     prepare_first_batch=prepare_first_batch)

    def decorate(func):
        @functools.wraps(func)
        def create_iterator(*args, checkpoints=None, **wrapper_kwargs):
            return _make_iterator(iterator_type, func, args, dict(wrapper_kwargs), checkpoints, it_kwargs,
                                  sharding, devices, pmap_compatible)

        return create_iterator

    return decorate(pipeline_fn) if pipeline_fn is not None else decorate


def data_iterator(pipeline_fn=None, output_map=(), size=-1, reader_name=None, auto_reset=False,
                  last_batch_padded=False, last_batch_policy=LastBatchPolicy.FILL, prepare_first_batch=True,
                  sharding=None, devices=None, pmap_compatible=None):
    """Turn a pipeline definition into a function that returns a :class:`DALIGenericIterator`.

    The decorated function is a pipeline definition (as for ``pipeline_def``); calling it with
    pipeline arguments (``batch_size=...``, ``seed=...``, and ``checkpoints=`` from
    ``iterator.checkpoints()``) builds the pipelines and the iterator. The decorator's own
    arguments are the iterator's. ``num_threads`` defaults to 4.

    * neither ``sharding`` nor ``devices``: one pipeline; ``device_id`` 0 when JAX runs on a GPU,
      else a CPU-only pipeline.
    * ``sharding`` (a ``jax.sharding.Sharding``) or ``devices`` (a list of ``jax.Device``, for
      ``jax.pmap``): one pipeline per local device, called with ``shard_id=device.id``,
      ``num_shards`` = the device count and ``batch_size`` = the global batch / device count, so
      the definition must accept ``shard_id`` and ``num_shards``.
    """
    return data_iterator_decorator(DALIGenericIterator, pipeline_fn, list(output_map), size, reader_name, auto_reset,
                                   last_batch_padded, last_batch_policy, prepare_first_batch, sharding, devices,
                                   pmap_compatible)
