"""``DALIIterator``: DALI's older TF API, an op that gives the pipeline's next batch each time it runs."""

from __future__ import annotations

import threading
import weakref

import numpy as np
import tensorflow as tf

from stoker.plugin.tf._convert import check_dtype, dense_batch, fit_shape, tf_sees_gpu, to_tf, to_tf_dtype
from stoker.tensors import is_gpu_array

_WHO = "DALIIterator"
_locks: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # pipeline -> lock around its run()
_guard = threading.Lock()


def _lock_for(pipe) -> threading.Lock:
    with _guard:
        lock = _locks.get(pipe)
        if lock is None:
            lock = _locks[pipe] = threading.Lock()
        return lock


def _sparse_parts(arr_samples: list[np.ndarray], dtype):
    """Samples of different shapes as (indices, values, dense_shape) of one sparse batch."""
    ndim = arr_samples[0].ndim if arr_samples else 0
    indices, values = [], []
    for i, s in enumerate(arr_samples):
        coords = np.indices(s.shape).reshape(s.ndim, -1).T if s.size else np.zeros((0, s.ndim), np.int64)
        indices.append(np.concatenate([np.full((len(coords), 1), i, np.int64), coords.astype(np.int64)], axis=1))
        values.append(s.reshape(-1))
    dense = [len(arr_samples)] + [max((s.shape[d] for s in arr_samples), default=0) for d in range(ndim)]
    idx = np.concatenate(indices) if indices else np.zeros((0, ndim + 1), np.int64)
    val = np.concatenate(values).astype(dtype.as_numpy_dtype, copy=False) if values else np.zeros(0,
                                                                                                   dtype.as_numpy_dtype)
    return idx, val, np.asarray(dense, np.int64)


def DALIIteratorWrapper(pipeline=None, serialized_pipeline=None, sparse=(), shapes=(), dtypes=(), batch_size=-1,
                        prefetch_queue_depth=2, exec_dynamic=None, **kwargs):  # noqa: N802 - DALI's name
    """The pipeline's next batch as a list of tensors, one per output (DALI's ``DALIIterator()(...)``).

    Each call in eager mode gives the next batch; inside a ``tf.function`` (or a TF1 graph) the
    returned tensors are an op that gives the next batch each time the function runs (a
    ``tf.py_function`` over the live pipeline). ``dtypes`` (required) and ``shapes`` (optional,
    batch first) are checked as :class:`DALIDataset` checks them; ``sparse[i]`` True makes output
    ``i`` a ``tf.SparseTensor`` (samples may differ in shape). GPU outputs stay on the GPU
    (DLPack) where TensorFlow sees one and the op runs there; otherwise tensors are on the CPU.

    ``serialized_pipeline`` takes ``Pipeline.serialize()``'s bytes (stoker's format, not DALI's);
    ``batch_size``, ``num_threads``, ``device_id`` and the queue arguments are the pipeline's own
    (a ``batch_size`` that contradicts it raises an error).
    """
    if pipeline is None:
        if serialized_pipeline is None:
            raise ValueError(f"{_WHO}: give pipeline= (or serialized_pipeline=)")
        from stoker.pipeline.pipeline import Pipeline

        pipeline = Pipeline.deserialize(serialized_pipeline)
    pipe = pipeline
    pipe.build()
    if batch_size not in (-1, None) and batch_size != pipe.max_batch_size:
        raise ValueError(f"{_WHO}: batch_size={batch_size}, but the pipeline's batch size is {pipe.max_batch_size}")
    out_dtypes = [to_tf_dtype(d) for d in dtypes]
    n = len(pipe._outputs)
    if len(out_dtypes) != n:
        raise ValueError(f"{_WHO}: the pipeline has {n} outputs but dtypes gives {len(out_dtypes)} types")
    shapes = list(shapes or [])
    out_shapes = [tf.TensorShape(shapes[k]) if k < len(shapes) else tf.TensorShape(None) for k in range(n)]
    sparse = [bool(sparse[k]) if k < len(sparse) else False for k in range(n)]
    lock = _lock_for(pipe)
    gpu_out = [node.device == "gpu" for node in pipe._outputs]
    keep_on_gpu = any(gpu_out) and tf_sees_gpu()

    def step():
        with lock:
            outs = pipe.run()  # StopIteration (an external source's data ended): TF's OutOfRangeError
        flat = []
        for k, out in enumerate(outs):
            if sparse[k]:
                host = out.as_cpu() if is_gpu_array(out) else out
                samples = [np.asarray(s) for s in host.samples()]
                flat.extend(_sparse_parts(samples, out_dtypes[k]))
                continue
            if keep_on_gpu and is_gpu_array(out):
                t = to_tf(out, f"output {k}")
                if t.dtype != out_dtypes[k]:
                    raise TypeError(f"{_WHO}: output {k}: dtypes[{k}] is tf.{out_dtypes[k].name}, but the pipeline "
                                    f"gives tf.{t.dtype.name}")
                fitted = fit_shape(out_shapes[k], tuple(t.shape), pipe.max_batch_size, k, _WHO)
                flat.append(tf.reshape(t, fitted) if fitted != tuple(t.shape) else t)
                continue
            arr = dense_batch(out, k, _WHO)
            check_dtype(arr, out_dtypes[k], k, _WHO)
            fitted = fit_shape(out_shapes[k], arr.shape, pipe.max_batch_size, k, _WHO)
            flat.append(arr.reshape(fitted))
        return flat

    tout = []
    for k in range(n):
        tout += [tf.int64, out_dtypes[k], tf.int64] if sparse[k] else [out_dtypes[k]]
    flat = tf.py_function(step, inp=[], Tout=tout)
    result, j = [], 0
    for k in range(n):
        if sparse[k]:
            idx, val, dense = flat[j:j + 3]
            idx.set_shape([None, None])
            val.set_shape([None])
            dense.set_shape([None])
            result.append(tf.SparseTensor(indices=idx, values=val, dense_shape=dense))
            j += 3
        else:
            t = flat[j]
            if out_shapes[k].rank is not None:
                t.set_shape(out_shapes[k])
            result.append(t)
            j += 1
    return result


def DALIIterator():  # noqa: N802 - DALI's name
    """DALI's TF1-era iterator op: ``DALIIterator()`` returns :func:`DALIIteratorWrapper`, which is
    called with the pipeline and gives its next batch. Prefer :class:`DALIDataset` (as DALI does);
    this is kept so that code written for DALI's older API runs."""
    return DALIIteratorWrapper
