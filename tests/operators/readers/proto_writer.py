"""A tiny protocol-buffers encoder for the reader tests: Caffe ``Datum`` and Caffe2 ``TensorProtos``.

Written from the protobuf wire format (varints, length-delimited fields, fixed32
floats, packed repeated fields), independently of stoker's decoder, so that the
tests do not check the decoder against itself. DALI reading the same bytes is the
oracle that the encoding is right.
"""

from __future__ import annotations

import struct

VARINT, FIXED64, BYTES, FIXED32 = 0, 1, 2, 5


def varint(n: int) -> bytes:
    n &= (1 << 64) - 1  # negative int32/int64 values take ten bytes (two's complement), as protobuf does
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)


def tag(number: int, wire: int) -> bytes:
    return varint(number << 3 | wire)


def int_field(number: int, value: int) -> bytes:
    return tag(number, VARINT) + varint(value)


def bytes_field(number: int, value: bytes) -> bytes:
    return tag(number, BYTES) + varint(len(value)) + value


def float_field(number: int, value: float) -> bytes:
    return tag(number, FIXED32) + struct.pack("<f", value)


def packed_ints(number: int, values) -> bytes:
    return bytes_field(number, b"".join(varint(int(v)) for v in values))


def packed_floats(number: int, values) -> bytes:
    return bytes_field(number, struct.pack(f"<{len(values)}f", *values))


def datum(data: bytes | None = None, label: int | None = None, channels: int | None = None,
          height: int | None = None, width: int | None = None, encoded: bool | None = None,
          float_data=()) -> bytes:
    """A ``caffe.Datum``: channels=1, height=2, width=3, data=4, label=5, float_data=6, encoded=7.
    Fields left None are absent from the message."""
    out = b""
    for number, value in ((1, channels), (2, height), (3, width)):
        if value is not None:
            out += int_field(number, value)
    if data is not None:
        out += bytes_field(4, data)
    if label is not None:
        out += int_field(5, label)
    for v in float_data:  # unpacked, as Caffe's proto2 schema declares it
        out += float_field(6, v)
    if encoded is not None:
        out += int_field(7, int(encoded))
    return out


# caffe2.TensorProto.DataType
FLOAT, INT32, BYTE, STRING, INT64 = 1, 2, 3, 4, 10


def tensor_proto(data_type: int | None = None, dims=(), float_data=(), int32_data=(), byte_data=None,
                 string_data=(), int64_data=(), packed: bool = True, name: str | None = None) -> bytes:
    """A ``caffe2.TensorProto``: dims=1, data_type=2, float_data=3, int32_data=4, byte_data=5,
    string_data=6, name=7, int64_data=10. ``packed=False`` writes repeated numbers one field each
    (a parser must accept both)."""
    out = b"".join(int_field(1, d) for d in dims)
    if data_type is not None:
        out += int_field(2, data_type)
    if float_data:
        out += packed_floats(3, list(float_data)) if packed else b"".join(float_field(3, v) for v in float_data)
    if int32_data:
        out += packed_ints(4, int32_data) if packed else b"".join(int_field(4, v) for v in int32_data)
    if byte_data is not None:
        out += bytes_field(5, byte_data)
    for s in string_data:
        out += bytes_field(6, s)
    if name is not None:
        out += bytes_field(7, name.encode())
    if int64_data:
        out += packed_ints(10, int64_data) if packed else b"".join(int_field(10, v) for v in int64_data)
    return out


def tensor_protos(*protos: bytes) -> bytes:
    """A ``caffe2.TensorProtos``: its ``protos`` (field 1) in order."""
    return b"".join(bytes_field(1, p) for p in protos)
