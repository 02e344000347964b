"""Writes MXNet RecordIO files (``.rec`` + ``.idx``) for the reader tests, from the format's
description: each record is the magic 0xced7230a, a uint32 ``lrecord`` (continuation flag in
the top 3 bits, length in the low 29), the payload and zero padding to 4 bytes. A payload that
holds the magic at a 4-byte-aligned position is cut there into parts (flags 1, 2..., 3) and the
magic itself is dropped, as dmlc's writer does. An image record's payload is the ``IRHeader``
(struct ``'<IfQQ'``: flag, label, id, id2), ``flag`` extra float32 labels when flag > 0, then the
image bytes. The ``.idx`` has one ``key\\toffset`` line per record.
"""

from __future__ import annotations

import struct

MAGIC = 0xCED7230A
_MAGIC_BYTES = struct.pack("<I", MAGIC)


def _part(cflag: int, data: bytes) -> bytes:
    pad = (-len(data)) % 4
    return _MAGIC_BYTES + struct.pack("<I", cflag << 29 | len(data)) + data + b"\0" * pad


def record(payload: bytes) -> bytes:
    """One record, split into parts where the payload holds the magic at an aligned position."""
    cuts = [i for i in range(0, len(payload) - 3, 4) if payload[i:i + 4] == _MAGIC_BYTES]
    if not cuts:
        return _part(0, payload)
    out, start = b"", 0
    for k, i in enumerate(cuts):
        out += _part(1 if k == 0 else 2, payload[start:i])
        start = i + 4
    return out + _part(3, payload[start:])


def image_payload(image: bytes, label=0.0, id_=0, id2=0) -> bytes:
    """IRHeader + labels + image: a list/tuple ``label`` is stored as flag=len(label) float32s."""
    if isinstance(label, (list, tuple)):
        return struct.pack("<IfQQ", len(label), 0.0, id_, id2) + struct.pack(f"<{len(label)}f", *label) + image
    return struct.pack("<IfQQ", 0, float(label), id_, id2) + image


def write_recordio(rec_path: str, idx_path: str | None, payloads, first_key: int = 0) -> list[int]:
    """Write ``payloads`` as records; returns each record's offset (and writes the index)."""
    offsets, blob = [], b""
    for p in payloads:
        offsets.append(len(blob))
        blob += record(p)
    with open(rec_path, "wb") as f:
        f.write(blob)
    if idx_path is not None:
        with open(idx_path, "w") as f:
            for k, off in enumerate(offsets):
                f.write(f"{first_key + k}\t{off}\n")
    return offsets
