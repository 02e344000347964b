"""The ``.npy`` format for ``readers.numpy``: the header, and reading all or a box of an array.

A ``.npy`` file is a magic string, a header (a Python dict literal with
``descr``, ``fortran_order`` and ``shape``) and the raw elements. A header in
the form ``numpy.save`` writes for plain types is matched directly; any other is
parsed with NumPy's own ``numpy.lib.format`` readers, so every version of the
format NumPy writes is understood. The elements are then read through
:mod:`.storage`, and only the byte range a region of interest needs: the rows
of the slowest axis that the box covers (axis 0 in C order, the last axis in
Fortran order).

Arrays come out in C order (a Fortran-ordered file is transposed in memory,
as DALI does) and in native byte order.
"""

from __future__ import annotations

import io
import math
import os
import re
import threading
from dataclasses import dataclass

import numpy as np
from numpy.lib import format as npy

from stoker.operators.readers import storage

# NumPy parses the header's dict with ast.literal_eval, which CPython 3.11 can break on when
# threads call it at once ("AST constructor recursion depth mismatch"): one parse at a time.
_HEADER_LOCK = threading.Lock()

# Enough for the magic, the length field and the header of any array NumPy writes with a
# shape of up to a few dozen dimensions; a longer header is read in a second call.
HEAD_BYTES = 512


@dataclass(frozen=True)
class NpyHeader:
    """What the header of one ``.npy`` file says.

    ``shape`` is the logical (C-order) shape; ``offset`` is where the elements
    start in the file; ``fortran`` tells that they are stored in Fortran order.
    """

    dtype: np.dtype
    shape: tuple[int, ...]
    fortran: bool
    offset: int

    @property
    def nbytes(self) -> int:
        # (math.prod: exact, and a tenth of np.prod's cost on a tuple, paid on every sample read)
        return math.prod(self.shape) * self.dtype.itemsize


class NpyFormatError(ValueError):
    """The file is not a ``.npy`` array stoker can read (corrupt, truncated or of an unsupported type)."""


def parse_header(head: bytes, path: str) -> NpyHeader | int:
    """The header in the first bytes ``head`` of a file; or, when ``head`` is too short to hold
    it, the number of bytes needed. Raises NpyFormatError naming ``path``."""
    f = io.BytesIO(head)
    try:
        version = npy.read_magic(f)
    except ValueError as e:
        raise NpyFormatError(f"{path!r} is not a .npy file ({e})") from None
    length_bytes = 2 if version == (1, 0) else 4
    if len(head) < 8 + length_bytes:
        return 8 + length_bytes
    header_len = int.from_bytes(head[8:8 + length_bytes], "little")
    offset = 8 + length_bytes + header_len
    if len(head) < offset:
        return offset
    plain = _plain_header(head[8 + length_bytes:offset])
    if plain is not None:
        shape, fortran, dtype = plain
    else:
        f.seek(0)
        npy.read_magic(f)
        try:
            with _HEADER_LOCK:
                if version == (1, 0):
                    shape, fortran, dtype = npy.read_array_header_1_0(f, max_header_size=1 << 20)
                else:
                    shape, fortran, dtype = npy.read_array_header_2_0(f, max_header_size=1 << 20)
        except (ValueError, SyntaxError, TypeError) as e:
            raise NpyFormatError(f"{path!r}: corrupt .npy header ({e})") from None
    if dtype.hasobject or dtype.kind in "cOVUSM" or dtype.fields is not None or dtype.subdtype is not None:
        raise NpyFormatError(f"{path!r}: arrays of dtype {dtype} are not supported (numbers and booleans only)")
    if any(int(s) < 0 for s in shape):
        raise NpyFormatError(f"{path!r}: corrupt .npy header (negative extent in shape {shape})")
    return NpyHeader(dtype, tuple(int(s) for s in shape), bool(fortran), offset)


# The header as numpy.save writes it for an array of one plain type: the three keys in this
# order, a type string and a tuple of integers. NumPy's own parser (ast.literal_eval) takes
# about 90 us and runs under _HEADER_LOCK, one file at a time across the reader's threads;
# this match takes a few microseconds and no lock. Other headers go to NumPy's parser.
_PLAIN_HEADER = re.compile(rb"\{'descr': '([^']+)', 'fortran_order': (True|False), "
                           rb"'shape': \(((?:[0-9]+, )*[0-9]+,?|)\), \} *\n?\Z")


def _plain_header(text: bytes) -> tuple[tuple[int, ...], bool, np.dtype] | None:
    """(shape, fortran order, dtype) of a header in numpy.save's usual form, else None."""
    m = _PLAIN_HEADER.match(text)
    if m is None:
        return None
    extents = m.group(3)
    if extents and b"," not in extents:
        return None  # "(5)" is a number, not a tuple: NumPy's parser says what is wrong
    try:
        dtype = np.dtype(m.group(1).decode("ascii"))
    except (TypeError, ValueError):
        return None
    return tuple(int(s) for s in extents.split(b",") if s), m.group(2) == b"True", dtype


def read_header(path: str) -> NpyHeader:
    """The header of the ``.npy`` file at ``path`` (one small read, two for a long header)."""
    head = _read_head(path, HEAD_BYTES)
    got = parse_header(head, path)
    if isinstance(got, int):
        head = _read_head(path, got)
        got = parse_header(head, path)
        if isinstance(got, int):
            raise NpyFormatError(f"{path!r}: truncated .npy header")
    return got


def _read_head(path: str, size: int) -> bytes:
    with storage.open_binary(path) as f:
        return f.read(size)


def stored_shape(h: NpyHeader) -> tuple[int, ...]:
    """The shape of the elements as they lie in the file (reversed for Fortran order)."""
    return h.shape[::-1] if h.fortran else h.shape


def slow_axis_range(h: NpyHeader, start: list[int], stop: list[int]) -> tuple[int, int]:
    """The rows ``[lo, hi)`` of the file's slowest axis that the box ``[start, stop)`` (logical
    axes, inside the array) covers."""
    if not h.shape:
        return 0, 1
    axis = len(h.shape) - 1 if h.fortran else 0
    return start[axis], stop[axis]


def read_array(path: str, h: NpyHeader, start: list[int] | None = None,
               stop: list[int] | None = None, check_size: bool = True) -> np.ndarray:
    """The elements of the box ``[start, stop)`` of the array (all of it when None), C-ordered
    and native-endian; the box must lie inside the array. Only the rows of the slowest axis the
    box covers are read. Raises OSError/NpyFormatError naming ``path`` (a truncated file among
    them)."""
    shape = h.shape
    ndim = len(shape)
    if start is None:
        start, stop = [0] * ndim, list(shape)
    sshape = stored_shape(h)
    row = int(np.prod(sshape[1:], dtype=np.int64)) * h.dtype.itemsize if ndim else h.dtype.itemsize
    lo, hi = slow_axis_range(h, start, stop)
    nrows = max(hi - lo, 0)
    if check_size and h.nbytes and (lo + nrows) * row < h.nbytes:
        # A read that stops short of the end would not notice a truncated file: look at its size.
        _check_length(path, h)
    if nrows == 0 or row == 0 or any(b >= e for b, e in zip(start, stop)):
        box = tuple(max(e - b, 0) for b, e in zip(start, stop))
        return np.empty(box, h.dtype.newbyteorder("="))
    data = storage.read_bytes(path, h.offset + lo * row, nrows * row)
    arr = np.frombuffer(data, h.dtype, count=nrows * row // h.dtype.itemsize)
    if ndim:
        arr = arr.reshape((nrows, *sshape[1:]))
        if h.fortran:
            arr = arr.T  # logical axes; the rows read are the last logical axis
            sel = tuple(slice(b, e) for b, e in zip(start[:-1], stop[:-1])) + (slice(0, nrows),)
        else:
            sel = (slice(0, nrows),) + tuple(slice(b, e) for b, e in zip(start[1:], stop[1:]))
        arr = arr[sel]
    else:
        arr = arr.reshape(())
    if not arr.dtype.isnative:
        return arr.astype(arr.dtype.newbyteorder("="), order="C")
    # (read-only when nothing was copied: a view of the bytes read, as readers.file gives)
    return np.asarray(arr, order="C")  # (not ascontiguousarray: it turns a 0-D array into shape (1,))


def array_from_bytes(path: str, h: NpyHeader, data: bytes) -> np.ndarray:
    """The whole array from ``data``, the file's bytes (C-ordered, native-endian; a read-only view
    of ``data`` where no copy is needed)."""
    if len(data) < h.offset + h.nbytes:
        raise NpyFormatError(f"{path!r}: truncated .npy file ({len(data)} bytes; the header describes "
                             f"{h.offset + h.nbytes}: shape {h.shape}, dtype {h.dtype})")
    count = h.nbytes // h.dtype.itemsize if h.dtype.itemsize else 0
    arr = np.frombuffer(data, h.dtype, count=count, offset=h.offset).reshape(stored_shape(h))
    if h.fortran:
        arr = arr.T
    if not arr.dtype.isnative:
        return arr.astype(arr.dtype.newbyteorder("="), order="C")
    return np.asarray(arr, order="C")


# Per-thread scratch for read_elements_fd: where a file's elements must be rearranged (Fortran
# order, foreign byte order) they are read here and copied out, not into a new buffer each time.
_scratch = threading.local()
_SCRATCH_MAX = 64 << 20  # (larger reads get a buffer of their own: no thread keeps more)


def _pread_into(fd: int, buf: np.ndarray, offset: int) -> int:
    """Read into the C-contiguous ``buf`` from ``offset`` of ``fd`` until it is full or the file
    ends (preadv may stop short, at 2 GiB on Linux); the number of bytes read."""
    flat = buf.reshape(-1).view(np.uint8)
    total, size = 0, flat.size
    while total < size:
        n = os.preadv(fd, [flat[total:]], offset + total)
        if n <= 0:
            break
        total += n
    return total


def read_elements_fd(fd: int, path: str, h: NpyHeader) -> np.ndarray:
    """The whole array of the open local file ``fd`` (header ``h``) read straight into a new
    array: C-ordered, native-endian, writable, as :func:`array_from_bytes` gives it. Raises
    NpyFormatError for a truncated file, OSError (unwrapped) for a failed read."""
    sshape = stored_shape(h)
    nbytes = h.nbytes
    if not h.fortran and h.dtype.isnative:
        out = np.empty(sshape, h.dtype)
        got = _pread_into(fd, out, h.offset) if nbytes else 0
        if got < nbytes:
            _truncated(path, h, h.offset + got)
        return out
    if nbytes > _SCRATCH_MAX:
        raw = np.empty(nbytes, np.uint8)
    else:
        raw = getattr(_scratch, "buf", None)
        if raw is None or raw.size < nbytes:
            raw = _scratch.buf = np.empty(max(nbytes, 1 << 16), np.uint8)
        raw = raw[:nbytes]
    got = _pread_into(fd, raw, h.offset) if nbytes else 0
    if got < nbytes:
        _truncated(path, h, h.offset + got)
    count = nbytes // h.dtype.itemsize if h.dtype.itemsize else 0
    arr = np.frombuffer(raw, h.dtype, count=count).reshape(sshape)
    if h.fortran:
        arr = arr.T
    return arr.astype(h.dtype.newbyteorder("="), order="C")  # (a copy: the scratch is reused)


def _truncated(path: str, h: NpyHeader, size: int):
    raise NpyFormatError(f"{path!r}: truncated .npy file ({size} bytes; the header describes "
                         f"{h.offset + h.nbytes}: shape {h.shape}, dtype {h.dtype})")


def _check_length(path: str, h: NpyHeader) -> None:
    size = storage.file_size(path)
    if size < h.offset + h.nbytes:
        raise NpyFormatError(f"{path!r}: truncated .npy file ({size} bytes; the header describes "
                             f"{h.offset + h.nbytes}: shape {h.shape}, dtype {h.dtype})")
