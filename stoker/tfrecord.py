"""Feature descriptions of ``fn.readers.tfrecord``, as ``nvidia.dali.tfrecord`` spells them.

A pipeline says which features of each ``tf.train.Example`` to read and how::

    import stoker.tfrecord as tfrec

    features = {"image/encoded": tfrec.FixedLenFeature((), tfrec.string, ""),
                "image/class/label": tfrec.FixedLenFeature([1], tfrec.int64, -1),
                "image/object/bbox/xmin": tfrec.VarLenFeature(tfrec.float32, 0.0)}

The data types are DALI's numbers (``int64`` = 0, ``string`` = 1, ``float32`` = 2). Each
feature becomes one output: ``int64`` -> int64, ``float32`` -> float32, ``string`` -> the
bytes of the feature's (single) value as a 1D uint8 array.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

int64 = 0
string = 1
float32 = 2

_NAMES = {int64: "int64", string: "string", float32: "float32"}
_NUMPY = {int64: np.dtype(np.int64), float32: np.dtype(np.float32), string: np.dtype(np.uint8)}


@dataclass(frozen=True)
class Feature:
    """One feature to read: made by :func:`FixedLenFeature` or :func:`VarLenFeature`.

    ``shape`` is the whole output shape of a fixed-length feature, or the trailing dimensions
    of a variable-length one (``None``: a 1D output). ``default_value`` fills a fixed-length
    feature that a record lacks.
    """

    fixed: bool
    dtype: int
    shape: tuple[int, ...] | None
    default_value: object

    @property
    def numpy_dtype(self) -> np.dtype:
        """The output's element type (uint8 for strings)."""
        return _NUMPY[self.dtype]

    def __repr__(self) -> str:
        kind = "FixedLenFeature" if self.fixed else "VarLenFeature"
        shape = "" if self.shape is None else f"{list(self.shape)}, "
        return f"tfrecord.{kind}({shape}tfrecord.{_NAMES[self.dtype]}, {self.default_value!r})"


def _dtype(value) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or int(value) not in _NAMES:
        raise TypeError(f"a TFRecord feature's dtype is tfrecord.int64, tfrecord.float32 or tfrecord.string, "
                        f"got {value!r}")
    return int(value)


def _shape(value, what: str) -> tuple[int, ...]:
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        value = [value]
    if not isinstance(value, Sequence) and not isinstance(value, np.ndarray):
        raise TypeError(f"a TFRecord feature's {what} is a list of non-negative ints, got {value!r}")
    dims = tuple(int(d) for d in value)
    if any(d < 0 for d in dims):
        raise TypeError(f"a TFRecord feature's {what} is a list of non-negative ints, got {list(dims)}")
    return dims


def FixedLenFeature(shape, dtype, default_value) -> Feature:  # noqa: N802 - DALI's (and TensorFlow's) name
    """A feature with ``prod(shape)`` values in every record, output with that ``shape``.

    A record without the feature gives ``default_value`` broadcast to ``shape`` (for a
    string: its bytes). A string feature holds one byte string: use ``shape`` ``()`` or ``[1]``.
    """
    return Feature(True, _dtype(dtype), _shape(shape, "shape"), default_value)


def VarLenFeature(*args) -> Feature:  # noqa: N802 - DALI's (and TensorFlow's) name
    """A feature with any number of values: ``VarLenFeature(dtype, default_value)`` gives a 1D
    output; ``VarLenFeature(partial_shape, dtype, default_value)`` reshapes the values to
    ``(-1, *partial_shape)``. A record without the feature gives an empty output."""
    if len(args) == 2:
        return Feature(False, _dtype(args[0]), None, args[1])
    if len(args) == 3:
        return Feature(False, _dtype(args[1]), _shape(args[0], "partial_shape"), args[2])
    raise TypeError(f"VarLenFeature takes (dtype, default_value) or (partial_shape, dtype, default_value), "
                    f"got {len(args)} arguments")


__all__ = ["Feature", "FixedLenFeature", "VarLenFeature", "float32", "int64", "string"]
