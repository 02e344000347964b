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


@dataclass(slots=True)
class SampleInfo:
    """Where a per-sample ``external_source`` callback is in the data stream.

    ``idx_in_epoch`` counts samples from the start of the epoch,
    ``idx_in_batch`` within the current batch, ``iteration`` counts batches in
    the epoch and ``epoch_idx`` counts epochs.
    """

    # (slots, not frozen: one is made per sample and call, and a frozen dataclass's __init__ took
    # four times as long; DALI's SampleInfo is a plain object too)

    idx_in_epoch: int
    idx_in_batch: int
    iteration: int
    epoch_idx: int


@dataclass(frozen=True)
class BatchInfo:
    """Where a per-batch ``external_source`` callback is (with ``batch_info=True``)."""

    iteration: int
    epoch_idx: int


class ScalarConstant:
    """A typed Python scalar for arithmetic with DataNodes (what ``Constant(2)`` returns).

    In an expression such as ``images * types.Constant(2).uint8()`` the value is folded into
    the arithmetic operator with ``dtype`` taking part in type promotion, so the result stays
    uint8. A plain ``int`` is typed INT32, ``float`` FLOAT and ``bool`` BOOL; a NumPy scalar or
    0D array keeps its own type. Used as an operator input or a pipeline output it becomes a
    constant node of that type; used as a keyword argument it is its plain value.
    """

    def __init__(self, value, dtype=None):
        self.shape = []
        if getattr(value, "dtype", None) is not None:  # NumPy scalars and 0D arrays carry a type
            if dtype is None:
                dtype = to_dali_type(value.dtype)
            value = value.item()
        if isinstance(value, enum.Enum) or not isinstance(value, (bool, int, float)):
            raise TypeError(f"ScalarConstant takes a bool, int or float, got {type(value).__name__} {value!r}")
        if dtype is None:
            dtype = (DALIDataType.BOOL if isinstance(value, bool) else
                     DALIDataType.INT32 if isinstance(value, int) else DALIDataType.FLOAT)
        dtype = to_dali_type(dtype_from_arg(dtype))
        kind = np.dtype(to_numpy_type(dtype)).kind
        # the value is stored as the Python type of its dtype's kind: 2.7 as uint8 is 2, as in DALI
        self.value = bool(value) if kind == "b" else int(value) if kind in "iu" else float(value)
        self.dtype = dtype

    def _as(self, dtype: DALIDataType) -> ScalarConstant:
        return ScalarConstant(self.value, dtype)

    def bool(self) -> ScalarConstant:
        """This value typed BOOL."""
        return self._as(DALIDataType.BOOL)

    def int8(self) -> ScalarConstant:
        """This value typed INT8."""
        return self._as(DALIDataType.INT8)

    def int16(self) -> ScalarConstant:
        """This value typed INT16."""
        return self._as(DALIDataType.INT16)

    def int32(self) -> ScalarConstant:
        """This value typed INT32."""
        return self._as(DALIDataType.INT32)

    def int64(self) -> ScalarConstant:
        """This value typed INT64."""
        return self._as(DALIDataType.INT64)

    def uint8(self) -> ScalarConstant:
        """This value typed UINT8."""
        return self._as(DALIDataType.UINT8)

    def uint16(self) -> ScalarConstant:
        """This value typed UINT16."""
        return self._as(DALIDataType.UINT16)

    def uint32(self) -> ScalarConstant:
        """This value typed UINT32."""
        return self._as(DALIDataType.UINT32)

    def uint64(self) -> ScalarConstant:
        """This value typed UINT64."""
        return self._as(DALIDataType.UINT64)

    def float16(self) -> ScalarConstant:
        """This value typed FLOAT16."""
        return self._as(DALIDataType.FLOAT16)

    def float32(self) -> ScalarConstant:
        """This value typed FLOAT."""
        return self._as(DALIDataType.FLOAT)

    def float64(self) -> ScalarConstant:
        """This value typed FLOAT64."""
        return self._as(DALIDataType.FLOAT64)

    def numpy_value(self):
        """The value as a NumPy scalar of ``dtype`` (how arithmetic folds it in)."""
        return to_numpy_type(self.dtype)(self.value)

    def __eq__(self, other):
        if isinstance(other, ScalarConstant):
            return self.value == other.value and self.dtype == other.dtype
        return NotImplemented  # lets a DataNode on the other side build its comparison node

    def __ne__(self, other):
        if isinstance(other, ScalarConstant):
            return self.value != other.value or self.dtype != other.dtype
        return NotImplemented

    def __hash__(self):
        return hash((self.value, self.dtype))

    def _require(self, kinds: str, what: str):
        if np.dtype(to_numpy_type(self.dtype)).kind not in kinds:
            raise TypeError(f"convert this {self.dtype.name} constant to {what} explicitly before using it as "
                            f"a Python {what}")

    def __bool__(self):
        self._require("biu", "bool/integer type")
        return bool(self.value)

    def __int__(self):
        self._require("biu", "bool/integer type")
        return int(self.value)

    def __float__(self):
        self._require("f", "floating-point type")
        return float(self.value)

    def __str__(self):
        return f"{self.value}:{self.dtype}"

    def __repr__(self):
        return f"ScalarConstant({self.value!r}, {self.dtype})"


def _is_plain_scalar(value) -> bool:
    if isinstance(value, enum.Enum):  # enums are no arithmetic values: they go to a constant node
        return False
    if isinstance(value, (bool, int, float)):
        return True
    return isinstance(value, (np.generic, np.ndarray)) and np.ndim(value) == 0 and \
        np.asarray(value).dtype.kind in "biuf"


def Constant(value, dtype=None, shape=None, layout=None, device=None, **kwargs):  # noqa: N802 - DALI's name
    """A constant for a pipeline definition (DALI's ``types.Constant``).

    A bool/int/float scalar (or NumPy scalar) with no ``shape``, ``layout``, ``device`` or other
    keyword gives a :class:`ScalarConstant`, typed by ``dtype`` if given, for arithmetic with
    DataNodes. Anything else (a list, an array, a shaped or placed value) gives a constant node
    that produces the value, cast to ``dtype`` and reshaped to ``shape``, for every sample.
    """
    if device is None and shape is None and layout is None and not kwargs and _is_plain_scalar(value):
        return ScalarConstant(value, dtype)
    from stoker.pipeline.data_node import constant_node  # lazily: data_node imports this module

    if isinstance(value, ScalarConstant):
        value, dtype = value.value, dtype if dtype is not None else value.dtype
    return constant_node(value, dtype=dtype, shape=shape, layout=layout, device=device, **kwargs)
