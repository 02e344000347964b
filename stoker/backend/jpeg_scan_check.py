"""A cheap structural check of a JPEG's entropy-coded data, for the mixed decoders' ``strict`` mode.

Why: the GPU decoders (nvJPEG's engines, nvImageCodec) decode damaged entropy-coded data
silently into garbage pixels, where the strict CPU decoder stops at libjpeg's first "Corrupt
JPEG data" warning and fails the sample with the file's name. Decoding every image on the CPU
to find out would cost the GPU path its speed, so the mixed decoders run this check instead and
send the files it flags to the CPU decoder, which then refuses (or, strict off, decodes) them.

What it looks at, without Huffman decoding: the marker segments up to each scan (SOS), then the
scan data, where a 0xFF byte may only be followed by 0x00 (stuffing), by RSTn markers (in order
0..7 cyclically, as many as the frame size, sampling factors and restart interval imply), by fill
bytes (0xFF), or by a marker that may end a scan (EOI; DHT, DQT, DRI, DNL, SOS, APPn, COM between
the scans of progressive or multi-scan files). Flagged: other markers inside scan data (a second
SOI, 0xFF 0x01..0xBF, a frame header), a scan with no data, a missing end-of-image marker, RST
markers out of order, too few or too many of them, an empty restart interval, segments whose
length runs past the data. Bytes after EOI are ignored, as libjpeg and DALI ignore them.

What it cannot see: damage that leaves the marker structure intact, e.g. a bit flipped or bytes
zeroed inside Huffman data between two markers (only decoding finds those). With restart markers
(camera files often have them) bytes inserted or lost show up as a wrong RST count or order.

Cost: two NumPy passes over each file's scan data (compare with 0xFF, then with the next byte)
and a search for the first marker; files with restart markers also list their marker positions.
The segment walk is a few Python steps per file. See benchmarks in the helper's report / tests.
"""

from __future__ import annotations

import threading

import numpy as np

# Markers that may end a scan and begin the next segment (multi-scan and progressive files):
# DHT, DAC, SOS, DQT, DNL, DRI, APPn, COM. EOI (0xD9) ends the image.
_BETWEEN_SCANS = frozenset([0xC4, 0xCC, 0xDA, 0xDB, 0xDC, 0xDD, *range(0xE0, 0xF0), 0xFE])
_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
_EOI, _SOS, _DRI, _DNL = 0xD9, 0xDA, 0xDD, 0xDC
_RST0 = 0xD0

_local = threading.local()


def structure_check_wanted(strict: bool, on_error: str | None) -> bool:
    """Whether the mixed decoders run this check: the decoder is strict and the
    ``jpeg_structure_check`` setting says so (auto: only under on_error 'skip' / 'substitute',
    where a damaged file is to be dropped; on an H100 the check, done by readers.file's I/O
    process, halved the GPU training pipeline's speed, so it is not the default under 'raise').
    ``on_error`` None: the pipeline's policy is unknown (taken as 'raise')."""
    if not strict:
        return False
    from stoker import settings

    wanted = settings.get().jpeg_structure_check
    return bool(wanted) if wanted is not None else on_error in ("skip", "substitute")


def _scratch(n: int) -> np.ndarray:
    """A reused uint8 work buffer of at least ``n`` bytes, one per thread. Why: a fresh array per
    file costs page faults that, measured, cost more than the comparisons themselves."""
    buf = getattr(_local, "buf", None)
    if buf is None or buf.size < n:
        buf = _local.buf = np.empty(max(n, 1 << 20), np.uint8)
    return buf[:n]


def scan_problem(data) -> str | None:
    """The first structural problem of a JPEG's scans (a short reason), or None when its
    structure is sound. ``data``: the encoded file (bytes or a 1-D uint8 array)."""
    buf = np.ascontiguousarray(np.frombuffer(data, np.uint8) if isinstance(data, (bytes, bytearray))
                               else np.asarray(data).reshape(-1).view(np.uint8))
    mv = memoryview(buf)
    n = len(mv)
    if n < 4 or mv[0] != 0xFF or mv[1] != 0xD8:
        return "not a JPEG (no start-of-image marker)"
    walk = _Walk(buf, mv)
    return walk.run()


def damaged(arrays, idx=None) -> np.ndarray:
    """Boolean mask over ``idx`` (default: all of ``arrays``): the files :func:`scan_problem`
    flags."""
    idx = range(len(arrays)) if idx is None else idx
    return np.fromiter((scan_problem(arrays[i]) is not None for i in idx), bool)


class _Walk:
    """The segment walk of one file (a class only to share the parsed frame between steps)."""

    __slots__ = ("buf", "mv", "n", "comps", "hmax", "vmax", "height", "width", "restart", "mask", "hits",
                 "base")

    def __init__(self, buf: np.ndarray, mv: memoryview):
        self.buf, self.mv, self.n = buf, mv, len(mv)
        self.comps: dict[int, tuple[int, int]] = {}  # component id -> (H, V) sampling factors
        self.hmax = self.vmax = self.height = self.width = 0
        self.restart = 0
        self.mask = None  # marker mask of the data from the first scan on (see _markers)
        self.hits = None  # its positions, listed once a scan with restart markers needs them
        self.base = 0

    def run(self) -> str | None:
        mv, n = self.mv, self.n
        pos, seen_frame = 2, False
        while True:
            if pos + 2 > n:
                return "the data ends before the end-of-image marker (truncated)"
            if mv[pos] != 0xFF:
                # stray bytes between segments: libjpeg skips them (one warning, same pixels), and
                # the strict CPU decoder tolerates them, so the walk does too
                found = np.flatnonzero(self.buf[pos:pos + 65536] == 0xFF)
                if not found.size:
                    return f"no marker where a segment should begin (byte {pos})"
                pos += int(found[0])
                continue
            marker = mv[pos + 1]
            if marker == 0xFF:  # fill byte
                pos += 1
                continue
            if marker == _EOI:
                return None if seen_frame and self.mask is not None else "end-of-image marker before any scan"
            if marker == 0xD8:
                return f"a second start-of-image marker at byte {pos}"
            if marker == 0x01 or _RST0 <= marker <= 0xD7:  # parameterless; libjpeg passes over them
                pos += 2
                continue
            if pos + 4 > n:
                return "the data ends inside a segment header (truncated)"
            end = pos + 2 + ((mv[pos + 2] << 8) | mv[pos + 3])
            if end - pos < 4 or end > n:
                return f"segment 0xFF{marker:02X} at byte {pos} has a bad length (runs past the data?)"
            if marker in _SOF:
                if seen_frame:
                    return f"a second frame header at byte {pos}"
                seen_frame = True
                self._frame(pos, end)
            elif marker == _DRI and end - pos >= 6:
                self.restart = (mv[pos + 4] << 8) | mv[pos + 5]
            elif marker == _SOS:
                if not seen_frame:
                    return "a scan before the frame header"
                problem, pos = self._scan(pos, end)
                if problem is not None:
                    return problem
                continue  # pos: the marker that ended the scan
            elif not (0xC0 <= marker <= 0xFE):
                return f"invalid marker 0xFF{marker:02X} at byte {pos}"
            pos = end

    def _frame(self, pos: int, end: int) -> None:
        mv = self.mv
        if end - pos < 10:
            return
        self.height = (mv[pos + 5] << 8) | mv[pos + 6]
        self.width = (mv[pos + 7] << 8) | mv[pos + 8]
        for k in range(mv[pos + 9]):
            at = pos + 10 + 3 * k
            if at + 3 > end:
                break
            self.comps[mv[at]] = (mv[at + 1] >> 4, mv[at + 1] & 15)
        if self.comps:
            self.hmax = max(h for h, _ in self.comps.values())
            self.vmax = max(v for _, v in self.comps.values())

    def _expected_restarts(self, ids: list[int]) -> int | None:
        """RST markers a scan of components ``ids`` holds: one between each two restart intervals
        (ITU T.81 A.2: an interleaved scan's MCUs cover the frame in Hmax x Vmax blocks; a one-
        component scan's are that component's 8x8 blocks). None where it cannot be computed
        (height given later by a DNL marker, unknown component, bad sampling factors)."""
        r, h, w = self.restart, self.height, self.width
        if not r or not h or not w or not self.hmax or not self.vmax:
            return None
        if len(ids) == 1:
            hv = self.comps.get(ids[0])
            if hv is None or not hv[0] or not hv[1]:
                return None
            cw = -(-w * hv[0] // self.hmax)
            ch = -(-h * hv[1] // self.vmax)
            mcus = -(-cw // 8) * -(-ch // 8)
        else:
            mcus = -(-w // (8 * self.hmax)) * -(-h // (8 * self.vmax))
        return -(-mcus // r) - 1

    def _markers(self, start: int) -> np.ndarray:
        """The marker mask from the first scan's data to the end: True at j where byte
        ``base + j`` is 0xFF and the next is not 0x00. Made once per file, in two passes."""
        if self.mask is None:
            self.base = start
            seg = self.buf[start:]
            m = _scratch(max(seg.size - 1, 0))
            np.equal(seg[:-1], 0xFF, out=m.view(bool))
            np.minimum(m, seg[1:], out=m)  # 1 where 0xFF is followed by a non-zero byte
            self.mask = m.view(bool)
        return self.mask

    def _scan(self, pos: int, start: int) -> tuple[str | None, int]:
        """Check one scan whose data begins at ``start``: (problem or None, position of the marker
        that ends it)."""
        mv = self.mv
        ids = [mv[pos + 5 + 2 * k] for k in range(mv[pos + 4]) if pos + 6 + 2 * k <= start]
        mask = self._markers(start)
        rel = start - self.base
        if self.restart or self.hits is not None:
            if self.hits is None:
                self.hits = np.flatnonzero(mask)
            hits = self.hits[np.searchsorted(self.hits, rel):]
            codes = self.buf[self.base + 1 + hits]
            keep = codes != 0xFF  # fill bytes: the marker is the byte after the last 0xFF
            hits, codes = hits[keep], codes[keep]
            rst = (codes >= _RST0) & (codes <= 0xD7)
            k = int(np.argmin(rst)) if rst.size else 0
            if rst.size == 0 or rst[k]:
                return "no end-of-image marker after the last scan (truncated)", self.n
            first = int(hits[0])
            if k:
                if not self.restart:
                    return f"RST markers in a scan without a restart interval (byte {self.base + hits[0]})", 0
                want = _RST0 + (np.arange(k) & 7)
                if (codes[:k] != want).any():
                    bad = int(np.argmax(codes[:k] != want))
                    return (f"RST markers out of order at byte {self.base + hits[bad]} (RST{codes[bad] - _RST0} "
                            f"where RST{want[bad] - _RST0} belongs)"), 0
                gaps = np.diff(hits[:k + 1])
                if (gaps <= 2).any():  # an interval with no data (the marker itself is 2 bytes)
                    return f"an empty restart interval at byte {self.base + hits[int(np.argmax(gaps <= 2))]}", 0
            expected = self._expected_restarts(ids)
            if expected is not None and k != expected:
                return f"{k} RST markers in a scan where the frame implies {expected}", 0
            end = int(hits[k]) + self.base
        else:
            first = rel + int(np.argmax(mask[rel:])) if rel < mask.size else mask.size
            if first >= mask.size or not mask[first]:
                return "no end-of-image marker after the scan (truncated)", self.n
            end = first + self.base
            while end + 2 < self.n and mv[end + 1] == 0xFF:  # fill bytes before the marker
                end += 1
        if first == rel:
            return f"a scan with no data (byte {start})", 0
        code = mv[end + 1]
        if code == _EOI or code in _BETWEEN_SCANS:
            return None, end
        return f"invalid marker 0xFF{code:02X} inside scan data (byte {end})", 0
