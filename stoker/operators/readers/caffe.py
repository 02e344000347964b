"""``fn.readers.caffe``: (image, label) records of Caffe LMDB databases.

Each value of the databases is a Caffe ``Datum`` message, decoded by stoker's own
protobuf reader (:mod:`._proto`; no ``caffe`` or ``protobuf`` needed). The LMDB
files are opened with the ``lmdb`` package, an optional dependency
(``pip install lmdb``). :class:`LMDBReader` here is also the base of ``readers.caffe2``.

The data set is every key of every database in ``path``, in key order, database after
database; its order, shards and padding are DALI's (see :class:`._indexed.IndexedReader`).
With 4 or more pipeline threads the records are read by the I/O helper process one batch
ahead (:mod:`._batch_read`), which opens the databases itself: an lmdb handle of this
process cannot be used in another.
A sample's ``source_info`` is ``"<database path> at key <key>"``, as in DALI.
"""

from __future__ import annotations

import os
import threading

import numpy as np

from stoker.operators.readers._indexed import IndexedReader
from stoker.operators.readers._listing import ListingError
from stoker.operators.readers._proto import ProtoError, fields, last_bytes, last_int, to_int32
from stoker.operators.readers.file import READER_ARGS
from stoker.operators.schema import REQUIRED, Arg, Schema, register

# DALI's LMDB readers (caffe, caffe2) take the common reader arguments except the
# shuffle_after_epoch pair.
LMDB_READER_ARGS = tuple(a for a in READER_ARGS if not a.name.startswith("shuffle_after_epoch"))


def require_lmdb(who: str):
    """The ``lmdb`` module, or an ImportError that says which reader needs it and how to get it."""
    try:
        import lmdb
    except ImportError:
        raise ImportError(f"{who} reads LMDB databases with the 'lmdb' package, which is not installed: "
                          "pip install lmdb") from None
    return lmdb


# py-lmdb refuses to open one environment twice in a process, so the readers of one database (the
# shards of a data set in one process, a pipeline built again) share it: path -> [environment, users].
_OPEN: dict = {}
_OPEN_LOCK = threading.Lock()


def _open_env(lmdb, path: str, read_ahead: bool):
    key = os.path.realpath(path)
    with _OPEN_LOCK:
        entry = _OPEN.get(key)
        if entry is None:
            env = lmdb.open(path, readonly=True, lock=False, subdir=os.path.isdir(path), readahead=read_ahead)
            entry = _OPEN[key] = [env, 0]
        entry[1] += 1
        return entry[0]


def _release_env(env) -> None:
    with _OPEN_LOCK:
        for key, entry in list(_OPEN.items()):
            if entry[0] is env:
                entry[1] -= 1
                if entry[1] == 0:
                    del _OPEN[key]
                    env.close()
                return


class LMDBReader(IndexedReader):
    """Base of the readers of records stored as the values of LMDB databases (``path``)."""

    def setup(self) -> None:
        super().setup()
        require_lmdb(self._label())  # at build, so a missing package is not a run-time surprise
        self._envs: list = []
        self._db_paths: list[str] = []
        self._db_of = np.zeros(0, np.int32)  # database of each sample
        self._key_ends = np.zeros(1, np.int64)  # keys concatenated in _keys: sample i is [ends[i], ends[i+1])
        self._keys = b""

    def list_samples(self) -> int:
        lmdb = require_lmdb(self._label())
        paths = self.args["path"]
        if not paths:
            raise ListingError("path", "names no database")
        envs, db_of, key_lens, keys = [], [], [0], []
        for d, path in enumerate(paths):
            try:
                env = _open_env(lmdb, path, bool(self.args.get("read_ahead")))
                envs.append(env)
                with env.begin(buffers=False) as txn:
                    for key in txn.cursor().iternext(keys=True, values=False):
                        keys.append(key)
                        key_lens.append(len(key))
                        db_of.append(d)
            except lmdb.Error as e:
                for env in envs:
                    _release_env(env)
                raise ListingError("path", f"cannot read the LMDB database {path!r}: {e}") from None
        self._envs, self._db_paths = envs, list(paths)
        # (absolute: the I/O helper process opens them itself, whatever the current folder then)
        self._db_abs = [os.path.abspath(p) for p in paths]
        self._db_of = np.asarray(db_of, dtype=np.int32)
        self._key_ends = np.cumsum(np.asarray(key_lens, dtype=np.int64))
        self._keys = b"".join(keys)
        return len(db_of)

    def _key(self, i: int) -> bytes:
        return self._keys[self._key_ends[i]:self._key_ends[i + 1]]

    def sample_source(self, i: int) -> str:
        key = self._key(i).decode("utf-8", "backslashreplace")
        return f"{self._db_paths[self._db_of[i]]} at key {key}"

    def listing_digest(self, digest) -> None:
        digest.update("\0".join(self._db_paths).encode("utf-8", "surrogateescape"))
        digest.update(self._db_of.tobytes())
        digest.update(self._key_ends.tobytes())
        digest.update(self._keys)

    # --- reading: in this process, or by the I/O helper process ---------------------------------
    def reads_ranges(self) -> bool:
        """Always: the helper reads LMDB records (from its own handle of each database)."""
        return True

    def helper_entry(self, i: int) -> tuple[str, bytes, bool]:
        return self._db_abs[self._db_of[i]], self._key(i), bool(self.args.get("read_ahead"))

    def load_sample(self, i: int) -> tuple:
        return self.parse_sample(i, self.record(i))

    def record(self, i: int) -> bytes:
        """The value stored for sample ``i``."""
        env = self._envs[self._db_of[i]]
        key = self._key(i)
        try:
            with env.begin(buffers=False) as txn:
                value = txn.get(key)
        except Exception as e:  # lmdb.Error: a damaged or changed database
            raise OSError(f"cannot read {self.sample_source(i)}: {e}") from None
        if value is None:
            raise OSError(f"cannot read {self.sample_source(i)}: the key is gone (was the database changed?)")
        return value

    def close(self) -> None:
        """Stop the I/O helper process and close this reader's databases (``Pipeline.close``)."""
        super().close()
        self._release_envs()

    def _release_envs(self) -> None:
        envs, self._envs = self._envs, []
        for env in envs:
            _release_env(env)

    def __del__(self):
        # (only the databases: joining the read-ahead thread from a finalizer could run on that
        # very thread; the helper exits by itself when its socket is collected)
        if getattr(self, "_envs", None):
            self._release_envs()


def _caffe_outputs(args: dict) -> int:
    return int(bool(args.get("image_available", True))) + int(bool(args.get("label_available", True)))


@register
class CaffeReader(LMDBReader):
    """Reads Caffe ``Datum`` records (``fn.readers.caffe`` / ``ops.readers.Caffe`` / ``ops.CaffeReader``)."""

    schema = Schema(
        name="readers.caffe",
        doc="Reads (image, label) pairs from Caffe LMDB databases of ``Datum`` records. Outputs, in order: "
            "the image (encoded bytes, 1D uint8; or HWC uint8 for a datum stored raw with encoded=false) "
            "when ``image_available``, and the label (int32, shape (1,)) when ``label_available``. "
            "Needs the 'lmdb' package.",
        args=[
            Arg("path", "str_list", REQUIRED, doc="paths of the LMDB databases (folders or files)"),
            Arg("image_available", "bool", True, doc="the records hold an image (output 0)"),
            Arg("label_available", "bool", True, doc="the records hold a label (the next output)"),
            *LMDB_READER_ARGS,
        ],
        inputs=(0, 0),
        num_outputs=_caffe_outputs,
        legacy_name="CaffeReader",
    )

    def setup(self) -> None:
        super().setup()
        if not (self.args["image_available"] or self.args["label_available"]):
            raise self._arg_error("image_available", "with label_available=False too, there is nothing to read")

    def parse_sample(self, i: int, raw) -> tuple:
        """The outputs of a ``Datum`` (``raw``: its bytes, or a uint8 view of them)."""
        try:
            f = fields(raw)
        except ProtoError as e:
            raise ValueError(f"{self.sample_source(i)} is not a Caffe Datum ({len(raw)} bytes): {e}") from None
        out = []
        if self.args["image_available"]:
            out.append(self._image(f, i))
        if self.args["label_available"]:
            label = last_int(f, 5)
            if label is None:
                raise ValueError(f"{self.sample_source(i)}: the Datum has no label; read it with "
                                 "label_available=False")
            out.append(np.array([to_int32(label)], dtype=np.int32))
        return tuple(out)

    def _image(self, f: dict, i: int) -> np.ndarray:
        data = last_bytes(f, 4)
        if data is None:
            raise ValueError(f"{self.sample_source(i)}: the Datum has no image data; read it with "
                             "image_available=False")
        encoded = last_int(f, 7)
        pixels = np.frombuffer(data, dtype=np.uint8)
        if encoded is None or encoded:  # an absent flag counts as encoded, as in DALI
            return pixels
        shape = tuple(to_int32(last_int(f, k, 0)) for k in (2, 3, 1))  # height, width, channels
        if min(shape) < 0 or int(np.prod(shape)) != pixels.size:
            raise ValueError(f"{self.sample_source(i)}: a raw image of height x width x channels = "
                             f"{' x '.join(map(str, shape))} does not fit its {pixels.size} bytes")
        return pixels.reshape(shape)

    def output_layouts(self, input_layouts):
        return [""] * self.num_outputs
