"""TFRecord files: the record framing, the index, and the features of a ``tf.train.Example``.

A TFRecord file is a sequence of records, each::

    uint64 length | uint32 masked_crc32c(length) | length bytes of data | uint32 masked_crc32c(data)

(little-endian). The data of each record is a serialized ``tf.train.Example``:
``Example.features`` (field 1) is a ``Features`` whose field 1 is the map entries
``{key: 1 (string), value: 2 (Feature)}``; a ``Feature`` holds one of ``bytes_list`` (1),
``float_list`` (2) or ``int64_list`` (3), each a message whose field 1 is the repeated values.
Only the features a pipeline asks for are decoded (see :func:`example_features`).

Checksums are verified with the ``crc32c`` package (or ``google-crc32c``) when one is
installed; without either, records are still checked for truncation and malformed
protobuf, and a note at listing says the checksums are skipped.
"""

from __future__ import annotations

import logging
import struct

import numpy as np

from stoker.operators.readers import storage
from stoker.operators.readers._proto import BYTES, FIXED32, VARINT, ProtoError, fields

_log = logging.getLogger("stoker")

HEADER = 12  # length + its checksum
FOOTER = 4  # the data's checksum


def _find_crc32c():
    try:
        import crc32c

        return crc32c.crc32c
    except ImportError:
        pass
    try:
        import google_crc32c

        return lambda data: google_crc32c.value(bytes(data))
    except ImportError:
        return None


_crc32c = _find_crc32c()
_crc_note_shown = False


def checksums_verified() -> bool:
    """Whether record checksums are checked (a crc32c package is installed); the first call
    without one logs why they are not."""
    global _crc_note_shown
    if _crc32c is None and not _crc_note_shown:
        _crc_note_shown = True
        _log.info("readers.tfrecord: no crc32c package, so record checksums are not verified (truncated or "
                  "malformed records are still detected); pip install crc32c to verify them")
    return _crc32c is not None


def masked_crc(data) -> int:
    """TFRecord's masked CRC-32C of ``data`` (requires a crc32c package)."""
    crc = _crc32c(data) & 0xFFFFFFFF
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


class RecordError(ValueError):
    """A record that is truncated, fails its checksum or is not a valid ``Example``."""


# --- framing ------------------------------------------------------------------------------------
def scan_records(path: str) -> tuple[list[int], list[int], dict[int, str]]:
    """The (offsets, sizes) of the records of a TFRecord file, found by reading their headers, and
    the records found broken: ``{position in the lists: why}``. A broken header ends the scan (the
    rest of the file cannot be framed): it is listed as one broken record, which fails when read."""
    offsets: list[int] = []
    sizes: list[int] = []
    broken: dict[int, str] = {}
    total = storage.file_size(path)
    verify = checksums_verified()
    with storage.open_binary(path) as f:
        offset = 0
        while offset < total:
            f.seek(offset)
            head = f.read(HEADER)
            why = None
            if len(head) < HEADER:
                why = f"truncated record header ({len(head)} of {HEADER} bytes)"
            else:
                (length,) = struct.unpack_from("<Q", head)
                if verify and masked_crc(head[:8]) != struct.unpack_from("<I", head, 8)[0]:
                    why = "the record length fails its checksum"
                elif offset + HEADER + length + FOOTER > total:
                    why = f"truncated record: {length} bytes of data announced, the file ends before"
            if why is not None:
                broken[len(offsets)] = why
                offsets.append(offset)
                sizes.append(total - offset)
                break
            offsets.append(offset)
            sizes.append(HEADER + length + FOOTER)
            offset += HEADER + length + FOOTER
    return offsets, sizes, broken


def read_index(index_path: str) -> tuple[list[int], list[int]]:
    """The (offsets, sizes) of DALI's TFRecord index: one line "offset size" per record. Raises
    ValueError naming the file and line of a malformed one."""
    text = storage.read_bytes(index_path).decode("utf-8", "replace")
    offsets: list[int] = []
    sizes: list[int] = []
    for number, line in enumerate(text.splitlines(), 1):
        parts = line.split()
        if not parts:
            continue
        try:
            offset, size = (int(p) for p in parts[:2])
            if len(parts) != 2 or offset < 0 or size <= 0:
                raise ValueError
        except ValueError:
            raise ValueError(f"{index_path}:{number}: expected 'offset size', got {line.strip()!r}") from None
        offsets.append(offset)
        sizes.append(size)
    return offsets, sizes


def record_data(raw: bytes) -> memoryview:
    """The data of one framed record (``raw`` = header, data, footer), checksums verified when a
    crc32c package is installed. Raises RecordError."""
    if len(raw) < HEADER + FOOTER:
        raise RecordError(f"truncated record ({len(raw)} bytes, a record takes at least {HEADER + FOOTER})")
    (length,) = struct.unpack_from("<Q", raw)
    if HEADER + length + FOOTER != len(raw):
        raise RecordError(f"the record header announces {length} bytes of data, the record holds "
                          f"{len(raw) - HEADER - FOOTER}")
    view = memoryview(raw)
    data = view[HEADER:HEADER + length]
    if _crc32c is not None:
        if masked_crc(view[:8]) != struct.unpack_from("<I", raw, 8)[0]:
            raise RecordError("the record length fails its checksum")
        if masked_crc(data) != struct.unpack_from("<I", raw, HEADER + length)[0]:
            raise RecordError("the record data fails its checksum")
    return data


# --- tf.train.Example -----------------------------------------------------------------------------
BYTES_LIST, FLOAT_LIST, INT64_LIST = 1, 2, 3


def example_features(data, wanted: set[bytes]) -> dict[bytes, tuple[int, object]]:
    """The features named in ``wanted`` that the Example holds: ``{name: (kind, values)}``, kind
    being BYTES_LIST (values: list of memoryviews of ``data``), FLOAT_LIST (float32 array) or INT64_LIST (int64
    array). Raises ProtoError for bytes that are not an Example."""
    found: dict[bytes, tuple[int, object]] = {}
    for wire, features in fields(data).get(1, ()):
        if wire != BYTES:
            raise ProtoError("Example.features is not a message")
        for wire, entry in fields(features).get(1, ()):
            if wire != BYTES:
                raise ProtoError("a Features map entry is not a message")
            e = fields(entry)
            keys = [v for w, v in e.get(1, ()) if w == BYTES]
            if not keys or bytes(keys[-1]) not in wanted:
                continue
            values = [v for w, v in e.get(2, ()) if w == BYTES]
            found[bytes(keys[-1])] = _feature(values[-1] if values else b"")
    return found


def _feature(data) -> tuple[int, object]:
    kind, payload = None, []
    for number, items in fields(data).items():  # a oneof: the last list given wins
        if number in (BYTES_LIST, FLOAT_LIST, INT64_LIST):
            for wire, value in items:
                if wire != BYTES:
                    raise ProtoError(f"Feature field {number} is not a message")
                kind, payload = number, fields(value).get(1, [])
    if kind == BYTES_LIST:  # (views of the record: a batch read into one buffer stays there, uncopied)
        return kind, [v for w, v in payload if w == BYTES]
    if kind == FLOAT_LIST:
        parts = []
        for wire, value in payload:
            if wire not in (BYTES, FIXED32) or len(value) % 4:
                raise ProtoError("a FloatList value is not float32")
            parts.append(np.frombuffer(value, "<f4"))
        return kind, _joined(parts, np.float32)
    if kind == INT64_LIST:
        parts = []
        for wire, value in payload:
            if wire == VARINT:
                parts.append(np.array([value & 0xFFFFFFFFFFFFFFFF], np.uint64).view(np.int64))
            elif wire == BYTES:
                parts.append(packed_varints(value))
            else:
                raise ProtoError("an Int64List value is not a varint")
        return kind, _joined(parts, np.int64)
    return 0, []  # an empty Feature: no values of any kind


def _joined(parts: list, dtype) -> np.ndarray:
    if not parts:
        return np.zeros(0, dtype)
    return (parts[0] if len(parts) == 1 else np.concatenate(parts)).astype(dtype, copy=False)


def packed_varints(data) -> np.ndarray:
    """A packed repeated int64 field as an int64 array, decoded with NumPy (no loop per value)."""
    if len(data) == 1 and data[0] < 0x80:  # one small value (a class label): no NumPy passes
        return np.array([data[0]], np.int64)
    b = np.frombuffer(data, np.uint8)
    if not b.size:
        return np.zeros(0, np.int64)
    ends = np.flatnonzero(b < 0x80)
    if not ends.size or ends[-1] != b.size - 1:
        raise ProtoError("truncated varint in a packed Int64List")
    if ends.size == b.size:  # every value fits in 7 bits: the common case of labels and small ints
        return b.astype(np.int64)
    starts = np.empty_like(ends)
    starts[0] = 0
    starts[1:] = ends[:-1] + 1
    lengths = ends - starts + 1
    if lengths.max() > 10:
        raise ProtoError("varint longer than 10 bytes in a packed Int64List")
    position = np.arange(b.size) - np.repeat(starts, lengths)
    # The 7-bit groups do not overlap, so a sum is their bitwise or; bits past 64 wrap away.
    groups = (b & 0x7F).astype(np.uint64) << (7 * position).astype(np.uint64)
    return np.add.reduceat(groups, starts).view(np.int64)
