"""MXNet RecordIO: the index (``.idx``) and the image records of ``.rec`` files.

A record is the magic 0xced7230a, a uint32 ``lrecord`` whose top 3 bits say whether
this part is a whole record (0) or the first (1), a middle (2) or the last (3) part
of one, and whose low 29 bits are the part's length; then the part's bytes, zero-padded
to 4 bytes. A writer splits a record where its payload holds the magic at an aligned
position and drops the magic; reading puts it back between the parts.

An image record's payload starts with an ``IRHeader`` (uint32 flag, float32 label,
uint64 id, uint64 id2). With flag > 0 it is followed by ``flag`` float32 labels,
which replace the header's label; the rest is the image.

The index lists ``key offset`` pairs; as in DALI only the offsets matter: sorted,
each record runs to the next offset (to the end of the data for the last one), and
the offsets count across the ``.rec`` files as if they were one file.
"""

from __future__ import annotations

import struct

import numpy as np

from stoker.operators.readers import storage
from stoker.operators.readers._listing import ListingError

MAGIC = 0xCED7230A
_MAGIC_BYTES = struct.pack("<I", MAGIC)
_HEADER = struct.Struct("<IfQQ")  # IRHeader: flag, label, id, id2


def read_index(index_path: str, rec_paths: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The records listed by ``index_path``: (file index, offset in that file, size) arrays, in
    offset order, records of size 0 (repeated offsets) left out."""
    sizes = []
    for p in rec_paths:
        try:
            sizes.append(storage.file_size(p))
        except OSError as e:
            raise ListingError("path", str(e)) from None
    try:
        text = storage.read_bytes(index_path).decode("utf-8", "replace")
    except OSError as e:
        raise ListingError("index_path", str(e)) from None
    words = text.split()
    try:
        offsets = np.array([int(w) for w in words[1::2][:len(words) // 2]], dtype=np.int64)
    except ValueError:
        raise ListingError("index_path", f"{index_path!r} is not a RecordIO index (lines of 'key offset')") from None
    if offsets.size == 0:
        raise ListingError("index_path", f"{index_path!r} lists no records")
    offsets.sort()
    file_starts = np.concatenate([[0], np.cumsum(np.asarray(sizes, dtype=np.int64))])
    if offsets[0] < 0 or offsets[-1] >= file_starts[-1]:
        raise ListingError("index_path", f"{index_path!r} lists offsets outside the {int(file_starts[-1])} bytes "
                                         "of the .rec files: is it the index of these files?")
    ends = np.concatenate([offsets[1:], file_starts[-1:]])
    keep = ends > offsets
    offsets, ends = offsets[keep], ends[keep]
    file_of = np.searchsorted(file_starts, offsets, side="right") - 1
    return file_of.astype(np.int32), offsets - file_starts[file_of], ends - offsets


def _payload(buf: bytes) -> bytes:
    """The payload of the record at the start of ``buf``, its parts joined."""
    parts, pos = [], 0
    while True:
        if pos + 8 > len(buf):
            raise ValueError(f"truncated record: a part header at byte {pos} runs past the {len(buf)} bytes")
        magic, lrec = struct.unpack_from("<II", buf, pos)
        if magic != MAGIC:
            raise ValueError(f"bad magic number 0x{magic:08x} at byte {pos} (RecordIO's is 0x{MAGIC:08x})")
        cflag, length = lrec >> 29, lrec & ((1 << 29) - 1)
        start = pos + 8
        if start + length > len(buf):
            raise ValueError(f"truncated record: a part of {length} bytes at byte {start} runs past the "
                             f"{len(buf)} bytes")
        parts.append(buf[start:start + length])
        if cflag == 0 and len(parts) == 1:
            return parts[0]
        if cflag == 3:
            return _MAGIC_BYTES.join(parts)
        if cflag not in (1, 2) or (cflag == 1) != (len(parts) == 1):
            raise ValueError(f"continuation flag {cflag} out of place in part {len(parts)} of the record")
        pos = start + length + (-length % 4)


def parse_image_record(buf: bytes) -> tuple[np.ndarray, np.ndarray]:
    """(image bytes as 1D uint8, label as float32 1D) of one image record."""
    payload = _payload(buf)
    if len(payload) < _HEADER.size:
        raise ValueError(f"the record's {len(payload)} bytes are too few for its {_HEADER.size}-byte header")
    flag, label, _, _ = _HEADER.unpack_from(payload, 0)
    body = memoryview(payload)[_HEADER.size:]
    if flag == 0:
        labels = np.array([label], dtype=np.float32)
        image = body
    else:
        if flag * 4 > len(body):
            raise ValueError(f"the header announces {flag} labels ({flag * 4} bytes), the record has "
                             f"{len(body)} bytes after it")
        labels = np.frombuffer(body[:flag * 4], dtype="<f4").astype(np.float32)
        image = body[flag * 4:]
    return np.frombuffer(image, dtype=np.uint8), labels
