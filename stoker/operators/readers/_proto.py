"""A small decoder of the protocol-buffers wire format, enough for Caffe's ``Datum`` and
Caffe2's ``TensorProtos`` without generated classes or the ``protobuf`` package.

A message is a sequence of (field number, wire type, value). :func:`fields` splits one into
a ``{number: [raw values]}`` dictionary: varints as ints, length-delimited fields as
``memoryview`` slices (a sub-message, bytes, or a packed repeated field), fixed32/fixed64 as
4/8-byte slices. The typed helpers read repeated numbers whether they were written packed
or one field each, as a proto2 parser must.

Malformed input raises :class:`ProtoError` (a ``ValueError``), which the readers report as
a bad record naming its source.
"""

from __future__ import annotations

import numpy as np


class ProtoError(ValueError):
    """Bytes that are not a well-formed protobuf message."""


VARINT, FIXED64, BYTES, FIXED32 = 0, 1, 2, 5


def _varint(buf, pos: int) -> tuple[int, int]:
    if pos < len(buf) and buf[pos] < 0x80:  # one byte (keys, small sizes): no loop
        return buf[pos], pos + 1
    result = shift = 0
    end = len(buf)
    while True:
        if pos >= end:
            raise ProtoError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift >= 70:
            raise ProtoError("varint longer than 10 bytes")


def fields(data) -> dict[int, list]:
    """The fields of one message: ``{field number: [(wire type, value), ...]}`` in order."""
    buf = memoryview(data).cast("B") if not isinstance(data, memoryview) else data
    out: dict[int, list] = {}
    pos, end = 0, len(buf)
    while pos < end:
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise ProtoError(f"field number 0 at byte {pos}")
        if wire == VARINT:
            value, pos = _varint(buf, pos)
        elif wire == BYTES:
            size, pos = _varint(buf, pos)
            if pos + size > end:
                raise ProtoError(f"field {number} claims {size} bytes, {end - pos} left")
            value, pos = buf[pos:pos + size], pos + size
        elif wire in (FIXED32, FIXED64):
            size = 4 if wire == FIXED32 else 8
            if pos + size > end:
                raise ProtoError(f"field {number} is truncated")
            value, pos = buf[pos:pos + size], pos + size
        else:  # groups (3, 4) and unknown wire types: no message we read uses them
            raise ProtoError(f"field {number} has unsupported wire type {wire}")
        out.setdefault(number, []).append((wire, value))
    return out


def last_int(f: dict, number: int, default=None):
    """A singular integer field (the last occurrence wins, as in protobuf)."""
    for wire, value in reversed(f.get(number, ())):
        if wire == VARINT:
            return value
    return default


def to_int32(v: int) -> int:
    """A varint read as a signed 32-bit value (negatives are sign-extended to 64 bits)."""
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v & 0x80000000 else v


def to_int64(v: int) -> int:
    v &= (1 << 64) - 1
    return v - (1 << 64) if v & (1 << 63) else v


def last_bytes(f: dict, number: int):
    """A singular bytes field as ``bytes``, or None when absent."""
    for wire, value in reversed(f.get(number, ())):
        if wire == BYTES:
            return bytes(value)
    return None


def all_bytes(f: dict, number: int) -> list[bytes]:
    """A repeated bytes/string field."""
    return [bytes(v) for w, v in f.get(number, ()) if w == BYTES]


def messages(f: dict, number: int) -> list[dict]:
    """A repeated sub-message field, each decoded with :func:`fields`."""
    return [fields(v) for w, v in f.get(number, ()) if w == BYTES]


def repeated_varints(f: dict, number: int) -> list[int]:
    """A repeated integer field, packed or not, as unsigned 64-bit values."""
    out: list[int] = []
    for wire, value in f.get(number, ()):
        if wire == VARINT:
            out.append(value)
        elif wire == BYTES:
            pos = 0
            while pos < len(value):
                v, pos = _varint(value, pos)
                out.append(v)
        else:
            raise ProtoError(f"field {number} should hold integers, has wire type {wire}")
    return out


def repeated_int32(f: dict, number: int) -> np.ndarray:
    return np.array([to_int32(v) for v in repeated_varints(f, number)], dtype=np.int32)


def repeated_int64(f: dict, number: int) -> np.ndarray:
    return np.array([to_int64(v) for v in repeated_varints(f, number)], dtype=np.int64)


def repeated_float(f: dict, number: int) -> np.ndarray:
    """A repeated float field (fixed32), packed or not."""
    parts = []
    for wire, value in f.get(number, ()):
        if wire not in (FIXED32, BYTES) or len(value) % 4:
            raise ProtoError(f"field {number} should hold float32 values")
        parts.append(np.frombuffer(value, dtype="<f4"))
    return np.concatenate(parts).astype(np.float32) if parts else np.zeros(0, np.float32)
