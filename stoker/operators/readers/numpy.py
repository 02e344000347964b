"""``fn.readers.numpy``: arrays from ``.npy`` files, whole or a region of interest of each.

Output per sample: the array in C order (a Fortran-ordered file is transposed
to it), of the file's dtype and shape; the batch's layout is empty, as DALI's.
The files are the matches of ``file_filter`` under ``file_root`` (its own
files first, listed as ``./name``, then those of each sub-folder in sorted
order; deeper folders are not searched), the lines of ``file_list`` or
``files``. ``source_info`` is the path as listed; errors name the full path.
Any of them may be a URL (``s3://...``; see :mod:`.storage`): whole files are then read
with one request each, regions of interest with ranged reads.

With a region of interest (``roi_*`` / ``rel_roi_*``, per-sample tensors
allowed) only the rows of the file's slowest axis that the box covers are
read. ``device="gpu"`` puts the arrays in GPU memory: see :mod:`.gpu_numpy`.

Differences from DALI, on purpose: big-endian files are read (DALI refuses
them); the optional ``dtype`` argument checks every file's type.
"""

from __future__ import annotations

import fnmatch
import os
import threading
from collections import defaultdict

import numpy as np

from stoker.errors import OperatorError
from stoker.operators.image.geometry import round_half_away
from stoker.operators.image.slice import box_window
from stoker.operators.readers import storage
from stoker.operators.readers._indexed import IndexedReader
from stoker.operators.readers._listing import ListingError
from stoker.operators.readers._npy_format import (
    HEAD_BYTES,
    NpyFormatError,
    NpyHeader,
    array_from_bytes,
    parse_header,
    read_array,
    read_elements_fd,
    read_header,
)
from stoker.operators.readers._npy_roi import POLICIES, ROI_ARGS, conflicts, has_roi, roi_box
from stoker.operators.readers.file import READER_ARGS
from stoker.operators.schema import Arg, Schema, register
from stoker.tensors import TensorListCPU


def list_npy_tree(file_root: str, pattern: str) -> list[str]:
    """Files of ``file_root`` matching ``pattern`` (case-sensitive glob): its own files as
    ``./name``, then the files of each sub-folder as ``sub/name``, every folder sorted by name."""
    if not storage.isdir(file_root):
        what = "is not a directory" if storage.exists(file_root) else "does not exist"
        raise ListingError("file_root", f"{file_root!r} {what}")

    def files_of(folder: str) -> tuple[list[str], list[str]]:
        if storage.is_remote(folder):  # (a URL: listed with retries, see remote)
            try:
                entries = storage.list_dir(folder)
            except OSError as e:
                raise ListingError("file_root", f"cannot list {folder!r}: {e}") from None
            return ([n for n, is_dir in entries if not is_dir and fnmatch.fnmatchcase(n, pattern)],
                    [n for n, is_dir in entries if is_dir])
        names, dirs = [], []
        try:
            with os.scandir(folder) as it:
                for e in it:
                    try:
                        is_dir = e.is_dir()
                    except OSError:
                        is_dir = False
                    if is_dir:
                        dirs.append(e.name)
                    elif fnmatch.fnmatchcase(e.name, pattern):
                        names.append(e.name)
        except OSError as e:
            raise ListingError("file_root", f"cannot list {folder!r}: {e.strerror or e}") from None
        return sorted(names), sorted(dirs)

    top, subdirs = files_of(file_root)
    paths = [f"./{n}" for n in top]
    for d in subdirs:
        paths += [f"{d}/{n}" for n in files_of(storage.join(file_root, d))[0]]
    if not paths:
        raise ListingError("file_root", f"no files matching {pattern!r} in {file_root!r} or its sub-folders")
    return paths


def _read_list(file_list: str) -> list[str]:
    try:
        if storage.is_remote(file_list):
            lines = [ln.strip() for ln in storage.read_bytes(file_list).decode("utf-8").splitlines()]
        else:
            with open(file_list, encoding="utf-8") as f:
                lines = [ln.strip() for ln in f.read().splitlines()]
    except OSError as e:
        why = e if storage.is_remote(file_list) else (e.strerror or e)
        raise ListingError("file_list", f"cannot open {file_list!r}: {why}") from None
    paths = [ln for ln in lines if ln]
    if not paths:
        raise ListingError("file_list", f"{file_list!r} lists no files")
    return paths


# Whole local files are read with os.pread/os.preadv into the output array (see _read_local).
_LOCAL_READS = hasattr(os, "preadv") and hasattr(os, "pread")
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)


@register
class NumpyReader(IndexedReader):
    """Reads ``.npy`` arrays, optionally a region of each (``fn.readers.numpy`` / ``ops.readers.Numpy``)."""

    schema = Schema(
        name="readers.numpy",
        doc="Reads arrays from .npy files (any numeric or boolean dtype, any number of dimensions, C or "
            "Fortran order; output in C order, empty layout). The files are those matching file_filter in "
            "file_root and its sub-folders, the lines of file_list, or files. A region of interest "
            "(roi_start/rel_roi_start with roi_end/rel_roi_end/roi_shape/rel_roi_shape on roi_axes) reads "
            "only a box of each array; out_of_bounds_policy decides about boxes that leave it.",
        args=[
            Arg("file_root", "str", None, doc="folder of the files (and root of relative paths)"),
            Arg("file_filter", "str", "*.npy", doc="glob pattern of the file names listed under file_root"),
            Arg("file_list", "str", None, doc="text file with one path per line"),
            Arg("files", "str_list", None, doc="paths to read (relative to file_root if given)"),
            Arg("roi_start", "int_list", None, tensor=True, doc="start of the region in elements"),
            Arg("rel_roi_start", "float_list", None, tensor=True, doc="start of the region as fractions"),
            Arg("roi_end", "int_list", None, tensor=True, doc="end (exclusive) of the region in elements"),
            Arg("rel_roi_end", "float_list", None, tensor=True, doc="end of the region as fractions"),
            Arg("roi_shape", "int_list", None, tensor=True, doc="size of the region in elements"),
            Arg("rel_roi_shape", "float_list", None, tensor=True, doc="size of the region as fractions"),
            Arg("roi_axes", "int_list", [], doc="axes the region arguments refer to (default: all, in order)"),
            Arg("out_of_bounds_policy", "str", "error",
                doc="region leaving the array: 'error', 'pad' (with fill_value) or 'trim_to_shape'"),
            Arg("fill_value", "float", 0.0, doc="value of the padded elements (out_of_bounds_policy='pad')"),
            Arg("dtype", "dtype", None, doc="stoker: the type every file must hold (checked; default: any)"),
            Arg("use_o_direct", "bool", False, doc="accepted for compatibility (reads go through the page cache)"),
            Arg("register_buffers", "bool", True, doc="accepted for compatibility (GPU staging is always pinned)"),
            Arg("cache_header_information", "bool", False,
                doc="keep each file's header after its first read instead of reading it every time"),
            *READER_ARGS,
        ],
        inputs=(0, 0),
        num_outputs=1,
        devices=("cpu", "gpu"),
        legacy_name="NumpyReader",
    )

    def setup(self) -> None:
        super().setup()
        a = self.args
        if a["files"] is not None and a["file_list"] is not None:
            raise self._arg_error("files", "give either files or file_list, not both")
        if a["files"] is None and a["file_list"] is None and a["file_root"] is None:
            raise self._arg_error("file_root", "is required unless files or file_list is given")
        if a["out_of_bounds_policy"] not in POLICIES:
            raise self._arg_error("out_of_bounds_policy", f"must be one of {', '.join(POLICIES)}, "
                                  f"got {a['out_of_bounds_policy']!r}")
        why = conflicts({k for k in ROI_ARGS if a.get(k) is not None})
        if why:
            raise self._arg_error("roi_start", why)
        self._headers: dict[int, NpyHeader] = {}
        self._headers_lock = threading.Lock()
        self._header_texts: dict[bytes, NpyHeader] = {}  # header text -> its parse
        # device="gpu": the references each iteration's advance() took, for the host half of the
        # GPU path (gpu_numpy.prepare), which the executor does not hand them to.
        self._gpu_refs: dict[int, list] = defaultdict(list)

    def bind_pipeline(self, pipe) -> None:
        super().bind_pipeline(pipe)
        self.pipeline_on_error = getattr(pipe, "on_error", "raise") or "raise"

    # --- IndexedReader ------------------------------------------------------------------------
    def list_samples(self) -> int:
        a = self.args
        root = a["file_root"]
        if a["files"] is not None:
            paths = list(a["files"])
            if not paths:
                raise ListingError("files", "is empty")
            base = root
        elif a["file_list"] is not None:
            paths = _read_list(a["file_list"])
            base = root if root is not None else storage.parent(a["file_list"])
        else:
            paths = list_npy_tree(root, a["file_filter"])
            base = root
        self.paths = paths
        self.full_paths = [storage.join(base, p) if base else p for p in paths]
        return len(paths)

    def sample_source(self, i: int) -> str:
        return self.paths[i]

    def load_sample(self, i: int) -> tuple:
        return (self.read(i, self.args),)

    def reads_ranges(self) -> bool:
        """Whole files on the CPU: batches through the I/O helper (see IndexedReader). A region
        of interest reads part of each file, here, as before."""
        a = self.args
        return self.device == "cpu" and not any(a.get(k) is not None for k in ROI_ARGS) \
            and not any(storage.is_remote(p) for p in self.full_paths)

    def sample_range(self, i: int) -> tuple[str, int, None]:
        return self.full_paths[i], 0, None

    def parse_sample(self, i: int, raw) -> tuple:
        path = self.full_paths[i]
        h = self._headers.get(i) or self._parsed_header(raw, path)
        self._check_dtype(i, h)
        if self.args["cache_header_information"] and i not in self._headers:
            with self._headers_lock:
                self._headers[i] = h
        return (array_from_bytes(path, h, raw),)

    def _parsed_header(self, raw, path: str) -> NpyHeader:
        """The header at the start of ``raw``: parsed once per distinct header text (files of one
        data set mostly share it), since parsing takes tens of microseconds of Python a file."""
        h = self._header_or_need(raw, path)
        if isinstance(h, int):
            raise NpyFormatError(f"{path!r}: truncated .npy header")
        return h

    def _header_or_need(self, raw, path: str) -> NpyHeader | int:
        """As :meth:`_parsed_header`, but the number of bytes needed when ``raw`` is too short."""
        if len(raw) >= 12 and raw[6] in (1, 2, 3):
            end = 10 + int(raw[8]) + (int(raw[9]) << 8) if raw[6] == 1 else \
                12 + int.from_bytes(raw[8:12].tobytes(), "little")
            key = raw[:end].tobytes()
            h = self._header_texts.get(key)
            if h is not None:
                return h
        else:
            key = None
        h = parse_header(raw, path)
        if isinstance(h, int):
            return h
        if key is not None and len(self._header_texts) < 256:
            self._header_texts[key] = h
        return h

    def advance(self, batch):
        refs = super().advance(batch)
        if self.device == "gpu":
            self._gpu_refs[batch.iteration].extend(refs)
        return refs

    # --- reading ------------------------------------------------------------------------------
    def header(self, i: int) -> NpyHeader:
        """The header of file ``i`` (cached with ``cache_header_information``)."""
        h = self._headers.get(i)
        if h is None:
            h = read_header(self.full_paths[i])
            self._check_dtype(i, h)
            if self.args["cache_header_information"]:
                with self._headers_lock:
                    self._headers[i] = h
        return h

    def _check_dtype(self, i: int, h: NpyHeader) -> None:
        want = self.args["dtype"]
        if want is not None and np.dtype(want) != h.dtype.newbyteorder("="):
            raise ValueError(f"argument 'dtype': {self.full_paths[i]!r} holds {h.dtype.newbyteorder('=')} "
                             f"values, dtype asks for {np.dtype(want)}")

    def plan(self, i: int, args: dict):
        """``(header, window)`` of sample ``i`` with one sample's arguments ``args``: ``window``
        is None for the whole array, else ``(out_shape, start, padded)`` (see ``box_window``)."""
        h = self.header(i)
        if not has_roi(args):
            return h, None
        axes, begin, end = roi_box(args, h.shape)
        if args["out_of_bounds_policy"] == "error" and not all(
                0 <= b and e <= h.shape[ax] for ax, b, e in zip(axes, begin, end)):
            box = ", ".join(f"[{b}, {e})" for b, e in zip(begin, end))
            raise ValueError(f"argument 'out_of_bounds_policy' is 'error' and the region of interest {box} on "
                             f"axes {axes} leaves the array of shape {h.shape} in {self.full_paths[i]!r}; use "
                             "out_of_bounds_policy='pad' or 'trim_to_shape'")
        return h, box_window(h.shape, axes, begin, end, args["out_of_bounds_policy"], "readers.numpy")

    def read(self, i: int, args: dict) -> np.ndarray:
        """Sample ``i`` as an array (its region of interest when ``args`` give one)."""
        if _LOCAL_READS and not has_roi(args) and not storage.is_remote(self.full_paths[i]):
            return self._read_local(i)
        if not has_roi(args) and i not in self._headers:
            # The whole array with a header not known yet: one read of the whole file (one open)
            # instead of a read of the header and another of the elements.
            path = self.full_paths[i]
            data = storage.read_bytes(path)
            h = parse_header(data, path)
            if isinstance(h, int):
                raise NpyFormatError(f"{path!r}: truncated .npy header")
            self._check_dtype(i, h)
            if self.args["cache_header_information"]:
                with self._headers_lock:
                    self._headers[i] = h
            return array_from_bytes(path, h, data)
        h, window = self.plan(i, args)
        return read_window(self.full_paths[i], h, window, args["fill_value"])

    def _read_local(self, i: int) -> np.ndarray:
        """The whole array of local file ``i``: one open, a read of the header (unless known) and
        one of the elements, straight into the new array (no bytes object, no second copy)."""
        path = self.full_paths[i]
        h = self._headers.get(i)
        try:
            fd = os.open(storage.local_path(path), _OPEN_FLAGS)
        except OSError as e:
            raise OSError(f"cannot read file {path!r}: {e.strerror or e}") from None
        try:
            if h is None:
                h = self._header_of_fd(fd, path)
                self._check_dtype(i, h)
                if self.args["cache_header_information"]:
                    with self._headers_lock:
                        self._headers[i] = h
            return read_elements_fd(fd, path, h)
        except OSError as e:
            raise OSError(f"cannot read file {path!r}: {e.strerror or e}") from None
        finally:
            os.close(fd)

    def _header_of_fd(self, fd: int, path: str) -> NpyHeader:
        head = os.pread(fd, HEAD_BYTES, 0)
        h = self._header_or_need(np.frombuffer(head, np.uint8), path)
        if isinstance(h, int) and len(head) == HEAD_BYTES:  # (a long header)
            head = os.pread(fd, h, 0)
            h = self._header_or_need(np.frombuffer(head, np.uint8), path)
        if isinstance(h, int):
            raise NpyFormatError(f"{path!r}: truncated .npy header")
        return h

    def run_cpu(self, batch, inputs, arg_inputs):
        """Read the batch's files on the thread pool, each with its own region arguments."""
        refs = batch.prepared
        if self.device == "gpu":  # (device="gpu" through the host fallback: see gpu_numpy)
            self._gpu_refs.pop(batch.iteration, None)
        if not arg_inputs and self._range_reads() is not None:  # (region arguments as inputs: read here)
            return super().run_cpu(batch, inputs, arg_inputs)
        sources = [self.sample_source(r) for r in refs]
        batch.sources = sources
        results = self.map_samples(batch, len(refs), lambda k: self.read(refs[k], self.sample_args(arg_inputs, k)))
        kept = [k for k in range(len(refs)) if results[k] is not None]
        arrays = [results[k] for k in kept]
        self.check_batch(arrays, [refs[k] for k in kept])
        return [TensorListCPU(arrays, "", [sources[k] for k in kept])]

    def check_samples(self, results: list, refs: list) -> None:
        self.check_batch([r[0] for r in results], refs)

    def check_batch(self, arrays: list, refs: list) -> None:
        """A batch's samples must agree in number of dimensions and dtype (one tensor list)."""
        if not arrays:
            return
        first = arrays[0]
        for a, r in zip(arrays, refs):
            if a.ndim != first.ndim or a.dtype != first.dtype:
                raise OperatorError(
                    f"the files of a batch must hold arrays of one dtype and number of dimensions: "
                    f"{self.full_paths[refs[0]]!r} holds {first.ndim}-D {first.dtype}, {self.full_paths[r]!r} "
                    f"{a.ndim}-D {a.dtype}", operator=self.instance_name, origin=self.origin,
                    source=self.sample_source(r))

    def close(self) -> None:
        self._gpu_refs.clear()
        super().close()


def read_window(path: str, h: NpyHeader, window, fill_value: float) -> np.ndarray:
    """The array of file ``path`` cut to ``window`` (see :meth:`NumpyReader.plan`), C-ordered."""
    if window is None:
        return read_array(path, h)
    out_shape, start, padded = window
    if not padded:
        return read_array(path, h, start, [s + n for s, n in zip(start, out_shape)])
    # Pad: read the part of the box inside the array, place it in an array of fill values.
    lo = [min(max(s, 0), e) for s, e in zip(start, h.shape)]
    hi = [max(min(s + n, e), l0) for s, n, e, l0 in zip(start, out_shape, h.shape, lo)]
    dtype = h.dtype.newbyteorder("=")
    out = np.empty(out_shape, dtype)
    out[...] = fill_in(fill_value, dtype)
    if all(b < e for b, e in zip(lo, hi)):
        inside = read_array(path, h, lo, hi)
        out[tuple(slice(b - s, e - s) for b, e, s in zip(lo, hi, start))] = inside
    elif h.nbytes:
        read_array(path, h, [0] * len(h.shape), [0] * len(h.shape))  # (checks the file's size)
    return out


def fill_in(value: float, dtype) -> np.ndarray:
    """``fill_value`` in ``dtype`` as DALI's reader converts it: rounded (halves away from zero)
    and saturated for integers (5.7 -> 6, -3 -> 0 in uint8)."""
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return np.asarray(value != 0)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        v = round_half_away(float(value)) if np.isfinite(value) else (info.max if value > 0 else info.min)
        return np.asarray(min(max(v, info.min), info.max), dtype)
    return np.asarray(value, dtype)
