"""File reading in a helper process, so that a batch's I/O costs the pipeline's process no GIL.

Why: in a GPU pipeline every ``open``/``read`` of a sample releases and retakes
the GIL, and each retake waits behind the pipeline's other Python threads. On
an H100 reading a batch of 256 files inside the process took 12-29 ms of the
CPU stage, more than everything else in it. Here one request per batch goes to
a small process (plain Python, only the standard library); it reads the files
(whole, or byte ranges of them; or the records of LMDB databases, which it opens
itself with py-lmdb: see :class:`_Databases`)
into one anonymous shared memory file and hands back its descriptor, which the
pipeline maps once: samples are NumPy views of that mapping, with no copy. With
each batch it sends the files' JPEG frame hints and, from the second batch on,
the result of the mixed decoders' structure check (the only step that imports
NumPy here).

This file is run as a script (``python -I -S io_worker.py FD``), not imported as
part of stoker in the helper process, so the helper starts in milliseconds and never
touches CUDA; it loads the message framing and the shared memory slots it shares with
stoker's other helpers (:mod:`stoker.workers`) by path. :class:`ReadWorker` is the
pipeline-side handle, started isolated like every helper
(:func:`stoker.workers.processes.start_helper`).
"""

from __future__ import annotations

import json
import mmap
import os
import signal
import socket
import stat
import sys
import threading

# stoker/ of this file (stoker/operators/readers/io_worker.py)
_STOKER_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir)
# In the helper: where the pipeline's process has NumPy ("numpy") and py-lmdb ("lmdb"), given to
# start_helper as setup and read from standard input at the helper's start.
_SETUP: dict = {}


def _load_by_path(name: str, path: str):
    """The module at ``path``, loaded as ``name`` without importing its package."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


if __name__ == "__main__":
    # The helper (python -I -S: the standard library only): stoker/workers' modules by path, as
    # importing stoker would pull in NumPy and more. They import nothing of stoker themselves.
    _messages = _load_by_path("_stoker_workers_messages", os.path.join(_STOKER_DIR, "workers", "messages.py"))
    _slots = _load_by_path("_stoker_workers_slots", os.path.join(_STOKER_DIR, "workers", "slots.py"))
    recv_msg, send_tagged, Slots = _messages.recv_msg, _messages.send_tagged, _slots.Slots
else:
    from stoker.workers.messages import recv_msg, recv_tagged, send_msg, send_tagged
    from stoker.workers.processes import start_helper, stop_helper
    from stoker.workers.slots import Slots, map_received


# --- the helper process ------------------------------------------------------------------------

def _load_backend_function(filename: str, name: str):
    """Function ``name`` of ``stoker/backend/<filename>``, loaded by path: the helper starts without
    stoker (importing the package would pull in NumPy and more). None when it cannot be loaded."""
    path = os.path.join(_STOKER_DIR, "backend", filename)
    try:
        return getattr(_load_by_path("_stoker_" + filename[:-3], path), name)
    except (OSError, ImportError, AttributeError, SyntaxError):
        return None


def _load_header_scan():
    """:func:`stoker.backend.jpeg_header.frame_hint` (that module needs only the standard library);
    None when it cannot be loaded (the decoders then scan themselves)."""
    return _load_backend_function("jpeg_header.py", "frame_hint")


def _load_structure_check():
    """:func:`stoker.backend.jpeg_scan_check.scan_problem`. It runs here for the mixed decoders'
    ``strict`` mode: tens of microseconds a file in a process of its own rather than in the
    pipeline's, under its GIL. It needs NumPy, which this helper (started without site-packages)
    imports from the folder the pipeline's process named (``numpy`` in the helper's setup: where
    its own NumPy lies). None when it cannot be loaded (the decoders then check in the pipeline's
    process)."""
    where = _SETUP.get("numpy")
    if where and where not in sys.path:
        sys.path.append(where)
    return _load_backend_function("jpeg_scan_check.py", "scan_problem")


def _is_record(entry) -> bool:
    """Whether an entry is an LMDB record, (database path, key, read_ahead), rather than a file
    (a path) or a byte range of one (path, offset, size)."""
    return not isinstance(entry, str) and isinstance(entry[1], bytes)


class _Databases:
    """The LMDB databases of the batches' records, opened here, in the helper, on first use.

    The pipeline's process cannot hand its own environments over: an lmdb handle does not cross
    a process boundary (nor a fork) safely, so the helper opens each database itself, once, as
    the readers do (read-only, without the lock file), and keeps it open for the next batches.
    py-lmdb is imported from where the pipeline's process has it (``lmdb`` in the helper's setup,
    as NumPy is for the structure check): the helper starts without site-packages."""

    def __init__(self):
        self.envs: dict = {}  # real path -> environment
        self.lmdb = None

    def _env(self, path: str, read_ahead: bool):
        key = os.path.realpath(path)
        env = self.envs.get(key)
        if env is None:
            if self.lmdb is None:
                where = _SETUP.get("lmdb")
                if where and where not in sys.path:
                    sys.path.append(where)
                import lmdb

                self.lmdb = lmdb
            env = self.envs[key] = self.lmdb.open(path, readonly=True, lock=False, subdir=os.path.isdir(path),
                                                  readahead=read_ahead)
        return env

    def values(self, entries: list) -> tuple[dict, dict, list]:
        """({position: the record's value, a memoryview valid until its transaction ends},
        {position: why it cannot be read}, the open transactions: abort them after copying)."""
        values, errors, txns = {}, {}, {}
        for i, e in enumerate(entries):
            if not _is_record(e):
                continue
            path, key, read_ahead = e
            try:
                txn = txns.get(path)
                if txn is None:
                    txn = txns[path] = self._env(path, read_ahead).begin(buffers=True)
                value = txn.get(key)
            except Exception as err:  # noqa: BLE001 - lmdb.Error, or no lmdb here: a failed sample
                errors[i] = f"{type(err).__name__}: {err}"
                continue
            if value is None:
                errors[i] = "the key is gone (was the database changed?)"
            else:
                values[i] = value
        return values, errors, list(txns.values())


def _sizes_of(entries: list, values: dict, errors: dict) -> list:
    """The byte count of each entry (a path: the whole file; (path, offset, size): that range;
    an LMDB record: its value, read already into ``values``); an entry that cannot be read is
    added to ``errors`` {position: reason} with size 0."""
    sizes = []
    for i, e in enumerate(entries):
        if i in errors:
            sizes.append(0)
        elif _is_record(e):
            sizes.append(len(values[i]))
        elif not isinstance(e, str):
            sizes.append(e[2])
        else:
            try:
                st = os.stat(e)
                if not stat.S_ISREG(st.st_mode):
                    raise IsADirectoryError(21, "is a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file")
                sizes.append(st.st_size)
            except OSError as err:
                errors[i] = err.strerror or str(err)
                sizes.append(0)
    return sizes


def _read_entries(entries: list, view, offsets: list, sizes: list, errors: dict, values: dict) -> None:
    """Read every entry into its place in ``view``. Ranges of one file (a container's records)
    share one descriptor for the batch and are read with ``preadv``: no seek, no copy. LMDB
    records are copied from their database's mapping (``values``)."""
    fds: dict = {}
    try:
        for i, e in enumerate(entries):
            if i in errors or sizes[i] == 0:
                continue
            dst = view[offsets[i]:offsets[i] + sizes[i]]
            try:
                if isinstance(e, str):
                    with open(e, "rb", buffering=0) as f:
                        sizes[i] = f.readinto(dst)  # a shrunk file keeps what was read
                    continue
                if i in values:
                    dst[:] = values[i]
                    continue
                path, at, want = e
                fd = fds.get(path)
                if fd is None:
                    fd = fds[path] = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
                got = os.preadv(fd, [dst], at)
                if got != want:
                    errors[i] = f"{want} bytes wanted at offset {at}, the file ends after {got}"
            except OSError as err:
                errors[i] = err.strerror or str(err)
    finally:
        for fd in fds.values():
            os.close(fd)


def _read_batch(entries: list, slots: Slots, scan=None, check=None, dbs: _Databases | None = None):
    """Read ``entries`` (paths of whole files, (path, offset, size) ranges, or LMDB records
    (database path, key, read_ahead) when ``dbs`` is given) into one slot.
    Returns (slot id, fd to send or -1, capacity, offsets, sizes, errors by position, frame hints
    or None). ``scan`` (frame_hint) reads each file's JPEG frame header while its bytes are still
    in the cache: about 3 us a file here, in a process of its own, where the pipeline's process
    would wait for its GIL. ``check`` (scan_problem, with ``scan``): a seventh value per file, 1
    where a JPEG's marker structure is broken (:mod:`stoker.backend.jpeg_scan_check`)."""
    values, errors, txns = dbs.values(entries) if dbs is not None else ({}, {}, [])
    sizes = _sizes_of(entries, values, errors)
    offsets, off = [], 0
    for s in sizes:
        offsets.append(off)
        off += s
    k, fd, capacity, mm = slots.take(off)
    view = memoryview(mm)
    try:
        try:
            _read_entries(entries, view, offsets, sizes, errors, values)
        finally:
            for txn in txns:  # (the records' memoryviews end with their transaction)
                txn.abort()
        hints = None
        if scan is not None:  # (flat int64 bytes: one buffer to pickle, one frombuffer to read)
            import array

            hints = array.array("q")
            width = 6 if check is None else 7
            for i, (o, s) in enumerate(zip(offsets, sizes)):
                if i in errors:
                    hints.extend((0,) * width)
                    continue
                row = scan(view[o:o + s])
                hints.extend(row)
                if check is not None:  # (only JPEGs: a row without a frame marker is all zero)
                    hints.append(int(row[0] != 0 and check(view[o:o + s]) is not None))
            hints = hints.tobytes()
    finally:
        view.release()
    return k, fd, capacity, offsets, sizes, errors, hints


def _serve(sock: socket.socket) -> None:
    slots = Slots()
    dbs = _Databases()
    scan = _load_header_scan()
    check, check_loaded = None, scan is None
    while True:
        try:
            entries, freed, want_hints = recv_msg(sock)
        except EOFError:
            return
        slots.release(freed)
        # want_hints: 0 none, 1 frame hints, 2 frame hints and the structure check's flag
        k, fd, capacity, offsets, sizes, errors, hints = _read_batch(entries, slots, scan if want_hints else None,
                                                                 check if want_hints == 2 else None, dbs)
        # F: a new slot, its descriptor carried by the tag; N: one the pipeline has mapped already
        send_tagged(sock, b"F" if fd >= 0 else b"N", (k, capacity, offsets, sizes, errors, hints),
                    [fd] if fd >= 0 else ())
        if want_hints == 2 and not check_loaded:  # after the batch, which NumPy's import must not delay
            check, check_loaded = _load_structure_check(), True


# --- the pipeline side -------------------------------------------------------------------------

def _package_folder(name: str) -> str | None:
    """The folder that holds package ``name`` as this process would import it (None: not
    installed), found without importing it."""
    import importlib.util

    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin:
        return None
    return os.path.dirname(os.path.dirname(os.path.abspath(spec.origin)))


class ReadWorker:
    """Handle of one I/O helper process; :meth:`read` returns a batch's file contents."""

    def __init__(self):
        import numpy as np

        self._np = np
        # (the helper's JPEG structure check imports NumPy, and its LMDB reads lmdb, from where
        # this process has them)
        setup = {"numpy": os.path.dirname(os.path.dirname(os.path.abspath(np.__file__)))}
        lmdb_dir = _package_folder("lmdb")
        if lmdb_dir:
            setup["lmdb"] = lmdb_dir
        self.proc, self.sock = start_helper(["-S", os.path.abspath(__file__)], setup=setup)
        self.lock = threading.Lock()
        self.maps: dict[int, mmap.mmap] = {}  # slot id -> this process's mapping of it
        self.freed: list[int] = []  # slots whose batch of samples has been garbage collected
        self.freed_lock = threading.Lock()

    def _free(self, k: int) -> None:
        with self.freed_lock:
            self.freed.append(k)

    def read(self, paths: list, scan_frames: bool = True, check_structure: bool = False):
        """(samples, errors, hints, located): 1D uint8 arrays (read-only views of a shared
        mapping; None where reading failed), {position: reason}, each file's JPEG frame hint as
        an (N, 6) int64 array (:func:`stoker.backend.jpeg_header.frame_hint`; (N, 7) with the
        structure check's flag, see :func:`_read_batch`; None when the
        helper could not scan or ``scan_frames`` is false), and the samples' (addresses, byte sizes) as
        two uint64 arrays (for the hardware decoder's staging: :meth:`HardwareDecoder.stage`).
        ``check_structure``: the hints get the structure check's flag (from the second such batch).
        ``paths``: whole files, (path, offset, size) byte ranges (a container's records), or
        LMDB records (database path, key bytes, read_ahead), which the helper reads from its own
        handle of the database (see :class:`_Databases`). The
        mapping is reused for a later batch once every sample of this one is gone."""
        import weakref

        np = self._np
        with self.lock:
            with self.freed_lock:
                freed, self.freed = self.freed, []
            send_msg(self.sock, (list(paths), freed, (2 if check_structure else 1) if scan_frames else 0))
            _, fds, reply = recv_tagged(self.sock, "the reader's I/O process exited")
            k, capacity, offsets, sizes, errors, hints = reply
            if fds:
                map_received(self.maps, k, fds, capacity)
            base = np.frombuffer(self.maps[k], np.uint8)
        weakref.finalize(base, self._free, k)
        samples = [None if i in errors else base[o:o + s] for i, (o, s) in enumerate(zip(offsets, sizes))]
        if hints is not None:
            hints = np.frombuffer(hints, np.int64).reshape(len(paths), -1)
        located = (np.asarray(offsets, np.uint64) + np.uint64(base.ctypes.data), np.asarray(sizes, np.uint64))
        return samples, errors, hints, located

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        stop_helper(self.proc, self.sock)


if __name__ == "__main__":
    # A terminal's Ctrl-C reaches the whole process group: the pipeline handles it and closes
    # its helpers (which exit when their socket closes), so a helper prints no traceback.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # (what start_helper was given as setup, on standard input: this helper has no stoker to ask)
    _SETUP.update(json.loads(sys.stdin.buffer.read() or b"{}"))
    _serve(socket.socket(fileno=int(sys.argv[1])))
