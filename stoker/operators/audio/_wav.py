"""A direct reader for the commonest speech file, 16-bit PCM WAV, with NumPy.

libsndfile reads an in-memory file through Python callbacks (soundfile's virtual I/O), each of
them taking the GIL, and converts sample by sample; for a 16-bit WAV that is most of a front
end's decoding time, and with many pipeline threads the callbacks queue on the GIL. Here the
RIFF chunks are walked once and the samples are viewed in place.

Values are libsndfile's: float output is ``sample / 32768`` (exact in float32), INT32 output is
``sample << 16`` and INT16 output the stored samples. Anything else (other sample formats,
compressed or unusual headers) returns None, and the caller uses libsndfile.
"""

from __future__ import annotations

import struct

import numpy as np

_PCM = 1
_EXTENSIBLE = 0xFFFE


def read_pcm16(raw) -> tuple[float, np.ndarray] | None:
    """``(sample_rate, samples)`` of a 16-bit PCM WAV held in ``raw`` (bytes-like), the samples a
    read-only int16 view shaped (frames, channels); None when the file is anything else."""
    mv = memoryview(raw).cast("B")
    if len(mv) < 12 or mv[0:4] != b"RIFF" or mv[8:12] != b"WAVE":
        return None
    pos, fmt = 12, None
    while pos + 8 <= len(mv):
        tag, size = bytes(mv[pos:pos + 4]), struct.unpack_from("<I", mv, pos + 4)[0]
        body = pos + 8
        if tag == b"fmt ":
            if size < 16 or body + size > len(mv):
                return None
            code, channels, rate, _, align, bits = struct.unpack_from("<HHIIHH", mv, body)
            if code == _EXTENSIBLE and size >= 40:
                code = struct.unpack_from("<H", mv, body + 24)[0]  # the sub-format GUID's first field
            if code != _PCM or bits != 16 or channels < 1 or rate < 1 or align != 2 * channels:
                return None
            fmt = (channels, rate)
        elif tag == b"data":
            if fmt is None:
                return None
            channels, rate = fmt
            # a data size past the end (a stream whose header was never patched): what is there
            end = min(body + size, len(mv))
            frames = (end - body) // (2 * channels)
            samples = np.frombuffer(mv, np.dtype("<i2"), frames * channels, body)
            return float(rate), samples.reshape(frames, channels)
        pos = body + size + (size & 1)  # chunks are padded to an even size
    return None


def pcm16_as(samples: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """int16 ``samples`` in the output ``dtype`` as libsndfile converts them (a new array)."""
    if dtype == np.float32:
        return np.multiply(samples, np.float32(1.0 / 32768.0), dtype=np.float32)
    if dtype == np.int32:
        return np.left_shift(samples, 16, dtype=np.int32)
    return samples.astype(np.int16)
