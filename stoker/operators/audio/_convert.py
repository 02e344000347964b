"""Sample-value conversions between float audio in [-1, 1] and integer types, as DALI's audio
operators make them ("normalized" conversions).

Signed integers map their positive maximum to 1.0 (int16: x / 32767). Unsigned integers are
offset: 0 is -1.0, the maximum is +1.0 and the middle of the range is silence, so that a uint8
WAV and an int16 one say the same thing. Float to integer rounds to nearest (halves away from zero) and saturates.
"""

from __future__ import annotations

import numpy as np

from stoker.errors import arg_error

# Output types the audio operators produce (DALI's list for audio_resample).
AUDIO_TYPES = tuple(np.dtype(t) for t in (np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32,
                                          np.float32))


def check_audio_dtype(op: str, arg: str, dtype, allowed=AUDIO_TYPES) -> np.dtype | None:
    """``dtype`` as a NumPy dtype if ``allowed`` has it, else an argument error naming the types."""
    if dtype is None:
        return None
    dtype = np.dtype(dtype)
    if dtype not in allowed:
        names = ", ".join(t.name for t in allowed)
        raise arg_error(op, arg, f"unsupported type {dtype.name}; supported: {names}")
    return dtype


def to_float(x: np.ndarray) -> np.ndarray:
    """Samples as float32 in [-1, 1] (floats are taken as they are)."""
    x = np.asarray(x)
    if x.dtype.kind == "f":
        return x.astype(np.float32, copy=False)
    info = np.iinfo(x.dtype)
    if x.dtype.kind == "u":
        # float64: a uint32's top values are not exact in float32
        return (x.astype(np.float64) * (2.0 / info.max) - 1.0).astype(np.float32)
    return (x.astype(np.float64) * (1.0 / info.max)).astype(np.float32)


def from_float(f: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Float samples in [-1, 1] as ``dtype`` (rounded to nearest, saturated); floats are cast."""
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return np.asarray(f).astype(dtype, copy=False)
    info = np.iinfo(dtype)
    f = np.asarray(f, np.float64)
    v = (f + 1.0) * (0.5 * info.max) if dtype.kind == "u" else f * info.max
    return np.clip(round_half_away(v), info.min, info.max).astype(dtype)


def round_half_away(v: np.ndarray) -> np.ndarray:
    """Rounds to nearest with halves away from zero (C's ``round``, what DALI's conversions use;
    NumPy's ``rint`` sends halves to even)."""
    return np.copysign(np.floor(np.abs(v) + 0.5), v)


def cast_saturate(y: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``y`` as ``dtype`` without normalizing: floats cast, integers rounded (halves away from
    zero) and clamped to the type's range."""
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return np.asarray(y).astype(dtype, copy=False)
    info = np.iinfo(dtype)
    return np.clip(round_half_away(np.asarray(y, np.float64)), info.min, info.max).astype(dtype)
