"""Data types, image types, interpolation types and layouts, under DALI's names.

A DALI pipeline refers to ``types.FLOAT``, ``types.RGB``, ``types.INTERP_LINEAR``
and so on; the same names work here. Each enum member converts to and from NumPy
dtypes with :func:`to_numpy_type` / :func:`to_dali_type`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np


class DALIDataType(enum.IntEnum):
    """Element types of tensors (DALI's numbering)."""

    NO_TYPE = -1
    UINT8 = 0
    UINT16 = 1
    UINT32 = 2
    UINT64 = 3
    INT8 = 4
    INT16 = 5
    INT32 = 6
    INT64 = 7
    FLOAT16 = 8
    FLOAT = 9
    FLOAT64 = 10
    BOOL = 11
    STRING = 12

    def __repr__(self) -> str:
        return f"DALIDataType.{self.name}"

    __str__ = __repr__


class DALIImageType(enum.IntEnum):
    """Colour spaces that decoders produce and colour operators accept."""

    RGB = 0
    BGR = 1
    GRAY = 2
    YCbCr = 3
    ANY_DATA = 4

    def __repr__(self) -> str:
        return f"DALIImageType.{self.name}"

    __str__ = __repr__


class DALIInterpType(enum.IntEnum):
    """Interpolation (resampling) methods."""

    INTERP_NN = 0
    INTERP_LINEAR = 1
    INTERP_CUBIC = 2
    INTERP_LANCZOS3 = 3
    INTERP_TRIANGULAR = 4
    INTERP_GAUSSIAN = 5

    def __repr__(self) -> str:
        return f"DALIInterpType.{self.name}"

    __str__ = __repr__


class PipelineAPIType(enum.Enum):
    """How a pipeline is driven (kept for DALI compatibility)."""

    BASIC = 0
    ITERATOR = 1
    SCHEDULED = 2


# Module-level aliases, as DALI users write them: types.UINT8, types.RGB, ...
NO_TYPE = DALIDataType.NO_TYPE
UINT8 = DALIDataType.UINT8
UINT16 = DALIDataType.UINT16
UINT32 = DALIDataType.UINT32
UINT64 = DALIDataType.UINT64
INT8 = DALIDataType.INT8
INT16 = DALIDataType.INT16
INT32 = DALIDataType.INT32
INT64 = DALIDataType.INT64
FLOAT16 = DALIDataType.FLOAT16
FLOAT = DALIDataType.FLOAT
FLOAT64 = DALIDataType.FLOAT64
BOOL = DALIDataType.BOOL
STRING = DALIDataType.STRING

RGB = DALIImageType.RGB
BGR = DALIImageType.BGR
GRAY = DALIImageType.GRAY
YCbCr = DALIImageType.YCbCr
ANY_DATA = DALIImageType.ANY_DATA

INTERP_NN = DALIInterpType.INTERP_NN
INTERP_LINEAR = DALIInterpType.INTERP_LINEAR
INTERP_CUBIC = DALIInterpType.INTERP_CUBIC
INTERP_LANCZOS3 = DALIInterpType.INTERP_LANCZOS3
INTERP_TRIANGULAR = DALIInterpType.INTERP_TRIANGULAR
INTERP_GAUSSIAN = DALIInterpType.INTERP_GAUSSIAN

# Layout constants that DALI exposes.
NHWC = "HWC"
NCHW = "CHW"
NFHWC = "FHWC"
NFCHW = "FCHW"
SAME = ""

CPU_ONLY_DEVICE_ID = None

_TO_NUMPY = {
    DALIDataType.UINT8: np.uint8,
    DALIDataType.UINT16: np.uint16,
    DALIDataType.UINT32: np.uint32,
    DALIDataType.UINT64: np.uint64,
    DALIDataType.INT8: np.int8,
    DALIDataType.INT16: np.int16,
    DALIDataType.INT32: np.int32,
    DALIDataType.INT64: np.int64,
    DALIDataType.FLOAT16: np.float16,
    DALIDataType.FLOAT: np.float32,
    DALIDataType.FLOAT64: np.float64,
    DALIDataType.BOOL: np.bool_,
}
_FROM_NUMPY = {np.dtype(v): k for k, v in _TO_NUMPY.items()}


def to_numpy_type(dali_type: DALIDataType | int) -> type:
    """NumPy scalar type for a DALIDataType."""
    try:
        return _TO_NUMPY[DALIDataType(dali_type)]
    except (KeyError, ValueError):
        raise TypeError(f"no NumPy type for {dali_type!r}") from None


def to_dali_type(dtype) -> DALIDataType:
    """DALIDataType for a NumPy dtype (or anything ``np.dtype`` accepts)."""
    if isinstance(dtype, DALIDataType):
        return dtype
    try:
        return _FROM_NUMPY[np.dtype(dtype)]
    except (KeyError, TypeError):
        raise TypeError(f"no DALI type for {dtype!r}") from None


def dtype_from_arg(value) -> np.dtype:
    """Accept a DALIDataType, a NumPy dtype or a torch dtype-like name; return a NumPy dtype."""
    if isinstance(value, DALIDataType):
        return np.dtype(to_numpy_type(value))
    if isinstance(value, int) and not isinstance(value, bool):
        return np.dtype(to_numpy_type(DALIDataType(value)))
    name = getattr(value, "__module__", "")
    if name.startswith("torch"):
        return np.dtype(str(value).replace("torch.", ""))
    return np.dtype(value)


@dataclass(frozen=True)
class SampleInfo:
    """Where a per-sample ``external_source`` callback is in the data stream.

    ``idx_in_epoch`` counts samples from the start of the epoch,
    ``idx_in_batch`` within the current batch, ``iteration`` counts batches in
    the epoch and ``epoch_idx`` counts epochs.
    """

    idx_in_epoch: int
    idx_in_batch: int
    iteration: int
    epoch_idx: int


@dataclass(frozen=True)
class BatchInfo:
    """Where a per-batch ``external_source`` callback is (with ``batch_info=True``)."""

    iteration: int
    epoch_idx: int


class Constant:
    """Wraps a value so that it enters the graph as a constant node (as DALI's ``types.Constant``)."""

    def __new__(cls, value, dtype=None, shape=None, layout=None, device=None, **kwargs):
        from stoker.pipeline.data_node import constant_node

        return constant_node(value, dtype=dtype, shape=shape, layout=layout, device=device)


ScalarConstant = Constant
