"""JPEG frame hints of a whole batch at once, with NumPy: no Python step per sample.

:func:`frame_hints` gives, for samples lying in one buffer, the rows that
:func:`stoker.backend.jpeg_header.frame_hint` gives one by one. The segment walk
advances every sample's position together, one NumPy step per segment, so a batch
of 256 JPEGs (a dozen segments before the frame header) costs a few dozen array
operations instead of 256 Python walks, each waiting for the GIL in a busy
pipeline. Readers of containers (TFRecord, webdataset, RecordIO) hand their batch
over in one buffer (see :mod:`stoker.operators.readers._batch_read`), so the mixed
decoders get their hints this way; the file reader's I/O process scans its own.
"""

from __future__ import annotations

import numpy as np

from stoker.backend.jpeg_header import frame_hint

# Walk steps before the samples still walking are handed to frame_hint one by one: fill bytes
# (0xFF 0xFF ...) take a step each, and real files reach their frame header in about a dozen.
_MAX_STEPS = 48
_SOF = np.zeros(256, bool)
_SOF[0xC0:0xD0] = True
_SOF[[0xC4, 0xC8, 0xCC]] = False
_EXIF = np.frombuffer(b"Exif", np.uint8).astype(np.int64)


def frame_hints(base: np.ndarray, offsets, sizes) -> np.ndarray:
    """(N, 6) int64 frame hints (marker, precision, height, width, components, ends with EOI)
    of the samples ``base[offsets[i]:offsets[i] + sizes[i]]`` (``base``: a 1-D uint8 array),
    equal row by row to :func:`frame_hint`; all zero where a sample has no readable frame."""
    buf = np.asarray(base).reshape(-1).view(np.uint8)
    off = np.asarray(offsets, np.int64).reshape(-1)
    size = np.asarray(sizes, np.int64).reshape(-1)
    n = off.size
    out = np.zeros((n, 6), np.int64)
    if n == 0 or buf.size == 0:
        return out
    rows = np.flatnonzero(size >= 4)
    head = _gather(buf, off[rows], size[rows], 2)
    rows = rows[(head[:, 0] == 0xFF) & (head[:, 1] == 0xD8)]
    pos = np.full(rows.size, 2, np.int64)
    found_rows, found_seg = [], []
    for _ in range(_MAX_STEPS):
        if not rows.size:
            break
        rest = size[rows] - pos
        seg = _gather(buf, off[rows] + pos, rest, 10)  # the segment's first bytes (0 past the end)
        ok = (rest >= 4) & (seg[:, 0] == 0xFF)
        rows, pos, rest, seg = rows[ok], pos[ok], rest[ok], seg[ok]
        marker = seg[:, 1]
        fill = marker == 0xFF
        length = (seg[:, 2] << 8) | seg[:, 3]
        exif = (marker == 0xE1) & (rest >= 8) & (seg[:, 4:8] == _EXIF).all(axis=1)
        sof = ~fill & ~exif & _SOF[marker]
        hit = sof & (rest >= 10)
        found_rows.append(rows[hit])
        found_seg.append(seg[hit])
        go = ~exif & ~sof & (fill | ((marker != 0xDA) & (length >= 2)))
        pos = np.where(fill, pos + 1, pos + 2 + length)[go]
        rows = rows[go]
    if rows.size:  # (rare: long runs of fill bytes) the exact walk, one by one
        for i in rows.tolist():
            out[i] = frame_hint(buf[off[i]:off[i] + size[i]])
    if found_rows:
        r = np.concatenate(found_rows)
        seg = np.concatenate(found_seg)
        out[r, 0] = seg[:, 1]
        out[r, 1] = seg[:, 4]
        out[r, 2] = (seg[:, 5] << 8) | seg[:, 6]
        out[r, 3] = (seg[:, 7] << 8) | seg[:, 8]
        out[r, 4] = seg[:, 9]
        out[r, 5] = _ends_with_eoi(buf, off[r], size[r])
    return out


def _gather(buf: np.ndarray, start: np.ndarray, avail: np.ndarray, width: int) -> np.ndarray:
    """(M, width) int64: the ``width`` bytes from each ``start``, 0 past each sample's ``avail``
    bytes (and past the buffer)."""
    k = np.arange(width, dtype=np.int64)
    idx = start[:, None] + k[None, :]
    inside = k[None, :] < avail[:, None]
    return np.where(inside, buf[np.minimum(idx, buf.size - 1)], 0).astype(np.int64)


def _ends_with_eoi(buf: np.ndarray, off: np.ndarray, size: np.ndarray) -> np.ndarray:
    """Whether the bytes FF D9 occur in each sample's last 32 bytes (as ``has_end_marker``)."""
    k = np.arange(32, dtype=np.int64)
    start = off + np.maximum(size - 32, 0)
    idx = start[:, None] + k[None, :]
    valid = idx < (off + size)[:, None]
    win = np.where(valid, buf[np.minimum(idx, buf.size - 1)], 0)
    pair = (win[:, :-1] == 0xFF) & (win[:, 1:] == 0xD9) & valid[:, 1:]
    return pair.any(axis=1).astype(np.int64)
