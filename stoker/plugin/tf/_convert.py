"""Element types, shapes and batches between stoker and TensorFlow (no ``tf.data`` here)."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from stoker import types
from stoker.tensors import is_gpu_array

_TO_TF = {
    types.UINT8: tf.uint8,
    types.UINT16: tf.uint16,
    types.UINT32: tf.uint32,
    types.UINT64: tf.uint64,
    types.INT8: tf.int8,
    types.INT16: tf.int16,
    types.INT32: tf.int32,
    types.INT64: tf.int64,
    types.FLOAT16: tf.float16,
    types.FLOAT: tf.float32,
    types.FLOAT64: tf.float64,
    types.BOOL: tf.bool,
}
_FROM_TF = {v: k for k, v in _TO_TF.items()}

#: stoker (DALI) element types and the ``tf.DType`` each becomes; the types DALI's TF plugin can
#: hand over. STRING has no entry: text outputs cannot leave a pipeline as a tensor.
to_tf_type = dict(_TO_TF)


def to_tf_dtype(dtype) -> tf.DType:
    """The ``tf.DType`` of a stoker type (``types.FLOAT``), a NumPy dtype or a ``tf.DType``."""
    if isinstance(dtype, tf.DType):
        return dtype
    try:
        return _TO_TF[types.to_dali_type(dtype)]
    except (KeyError, TypeError):
        raise TypeError(f"no TensorFlow type for {dtype!r}: stoker's TF plugin hands over "
                        f"{', '.join(t.name for t in _TO_TF)}") from None


def from_tf_dtype(dtype) -> types.DALIDataType:
    """The stoker type (``types.DALIDataType``) of a ``tf.DType``."""
    try:
        return _FROM_TF[tf.as_dtype(dtype)]
    except (KeyError, TypeError):
        raise TypeError(f"no stoker type for {dtype!r}") from None


def normalize_dtypes(output_dtypes, who: str) -> tuple[tuple[tf.DType, ...], bool]:
    """``output_dtypes`` as a tuple of ``tf.DType`` and whether it was one value (not a tuple)."""
    def one(d):
        if isinstance(d, tf.DType):
            return d
        if isinstance(d, types.DALIDataType):
            return to_tf_dtype(d)
        raise TypeError(f"{who}: `output_dtypes` should be a tf.DType (or a stoker type such as types.FLOAT), or a "
                        f"tuple of them; got `{output_dtypes!r}` of type {type(output_dtypes).__name__}")

    if output_dtypes is None:
        raise TypeError(f"{who}: `output_dtypes` is required: one tf.DType per pipeline output (a single tf.DType "
                        "for a pipeline with one output)")
    if isinstance(output_dtypes, (tuple, list)):
        if not output_dtypes:
            raise TypeError(f"{who}: `output_dtypes` is empty")
        return tuple(one(d) for d in output_dtypes), False
    return (one(output_dtypes),), True


def normalize_shapes(output_shapes, n: int, single: bool, who: str) -> tuple[tf.TensorShape, ...]:
    """``output_shapes`` as one ``tf.TensorShape`` per output (unknown rank where None)."""
    if output_shapes is None:
        return tuple(tf.TensorShape(None) for _ in range(n))
    if single:
        output_shapes = (output_shapes,)
    elif not isinstance(output_shapes, (tuple, list)):
        raise TypeError(f"{who}: `output_shapes` should be a tuple with one shape per output (as `output_dtypes`), "
                        f"got {output_shapes!r}")
    if len(output_shapes) != n:
        raise ValueError(f"{who}: `output_shapes` has {len(output_shapes)} shapes but `output_dtypes` has {n} types; "
                         "give one shape (or None) per output")
    try:
        return tuple(tf.TensorShape(s) for s in output_shapes)
    except (TypeError, ValueError) as e:
        raise TypeError(f"{who}: `output_shapes` holds something that is not a shape: {e}") from None


def _shape_matches(required: list, actual: tuple, r: int = 0, a: int = 0) -> list[tuple]:
    """Every way of reading ``actual`` as ``required`` when dimensions of size 1 in ``actual`` may
    be dropped (None in ``required``: any size). Each way is the resulting shape."""
    if r == len(required):
        return [()] if all(d == 1 for d in actual[a:]) else []
    if a == len(actual):
        return []
    found = []
    if required[r] is None or required[r] == actual[a]:
        found += [(actual[a], *rest) for rest in _shape_matches(required, actual, r + 1, a + 1)]
    if actual[a] == 1:
        found += _shape_matches(required, actual, r, a + 1)
    return found


def fit_shape(required: tf.TensorShape, actual: tuple, batch_size: int, index: int, who: str) -> tuple:
    """The shape the batch of output ``index`` (``actual``, batch first) takes to satisfy
    ``output_shapes[index]``: itself when compatible, else the one way of dropping size-1
    dimensions that fits (as DALI: a batch of 1 may leave the batch dimension out). Where several
    ways give the same shape, that shape is taken (DALI counts the ways and refuses)."""
    if required.rank is None or required.is_compatible_with(actual):
        return tuple(actual)
    want = required.as_list()
    problem = (f"{who}: output {index}: output_shapes[{index}] is {tuple(want)}, but the pipeline gives a batch of "
               f"shape {tuple(actual)} (batch first)")
    if len(want) >= len(actual):
        raise ValueError(problem)
    if batch_size != 1 and want and want[0] is not None and want[0] != actual[0]:
        raise ValueError(f"{problem}: the first dimension is the batch, of {actual[0]} samples")
    if int(np.prod(actual)) == 1 and required.is_fully_defined() and required.num_elements() == 1:
        return tuple(want)
    ways = set(_shape_matches(want, tuple(actual)))
    if len(ways) != 1:
        raise ValueError(problem + ("" if not ways else f", which fits it in {len(ways)} ways: give the size-1 "
                                                       "dimensions explicitly"))
    return ways.pop()


def dense_batch(batch, index: int, who: str) -> np.ndarray:
    """One pipeline output (a batch) as a host NumPy array with the batch first; GPU batches are
    copied to the host (after the pipeline's work on them is done)."""
    if hasattr(batch, "is_dense_tensor") and not batch.is_dense_tensor():
        shapes = batch.shape()
        raise ValueError(f"{who}: output {index}: the samples differ in shape ({shapes[:4]}"
                         f"{'...' if len(shapes) > 4 else ''}); a TensorFlow tensor is dense: make them equal in the "
                         "pipeline (resize, crop, pad)")
    if is_gpu_array(batch):
        batch = batch.as_cpu() if hasattr(batch, "as_cpu") else batch
    if hasattr(batch, "as_array"):
        arr = batch.as_array()
        if hasattr(arr, "get"):  # a device array (a dense TensorGPU)
            arr = arr.get()
    else:
        arr = np.asarray(batch)
    arr = np.asarray(arr)
    if arr.dtype.kind in "UOS":
        raise TypeError(f"{who}: output {index} holds {arr.dtype} data, which a TensorFlow numeric tensor cannot hold")
    return arr


def check_dtype(arr: np.ndarray, expected: tf.DType, index: int, who: str) -> None:
    if arr.dtype != expected.as_numpy_dtype:
        try:
            got = types.to_dali_type(arr.dtype).name
        except TypeError:
            got = str(arr.dtype)
        raise TypeError(f"{who}: output {index}: output_dtypes[{index}] is tf.{expected.name}, but the pipeline gives "
                        f"{got} (tf.{tf.as_dtype(arr.dtype).name}); change output_dtypes[{index}] or cast in the "
                        "pipeline (fn.cast)")


def tf_sees_gpu() -> bool:
    try:
        return bool(tf.config.list_logical_devices("GPU"))
    except Exception:  # noqa: BLE001 - a broken CUDA setup reads as no GPU
        return False


def to_tf(batch, name: str = "output"):
    """A stoker batch (TensorListCPU/TensorListGPU, or a dense tensor) as one dense ``tf.Tensor``.

    GPU batches stay on the GPU (DLPack, after the pipeline's work on them is done) when
    TensorFlow sees a GPU; otherwise, and for host batches, the tensor is on the CPU.
    """
    if is_gpu_array(batch) and tf_sees_gpu():
        if hasattr(batch, "is_dense_tensor") and not batch.is_dense_tensor():
            dense_batch(batch, 0, f"to_tf({name!r})")  # raises the ragged error
        dense = batch.as_tensor() if hasattr(batch, "as_tensor") else batch
        # __dlpack__() without a stream waits on the host for the pipeline's work: TF reads the
        # memory on streams of its own.
        return tf.experimental.dlpack.from_dlpack(dense.__dlpack__())
    return tf.convert_to_tensor(dense_batch(batch, 0, f"to_tf({name!r})"))
