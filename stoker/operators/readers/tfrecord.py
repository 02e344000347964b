"""``fn.readers.tfrecord``: the features of the ``tf.train.Example`` records of TFRecord files.

One output per entry of ``features``, in the dict's order (as DALI, which hands them back as a
dict keyed by feature name): int64 and float32 features as arrays of that type, string
features as the bytes of their value (1D uint8). A sample's ``source_info`` is
``"<path> at index <byte offset of the record>"``, DALI's wording.

The records are found through DALI's index files (``index_path``: one "offset size" line per
record, ``stoker index tfrecord`` or DALI's ``tfrecord2idx`` writes them) or, without them, by
reading every record header of the files when the data set is listed.

A record that is truncated, fails its checksum (see :mod:`._tfrecord_format`) or is not a
valid Example fails as a bad sample naming the file and the record's offset, so that
``on_error="skip"`` drops it.

Where DALI leaves an output undefined, stoker chooses: a record without a fixed-length
feature gives its ``default_value`` (TensorFlow's meaning; DALI returns uninitialized memory),
without a variable-length one an empty array; a fixed-length feature whose value count does
not match its shape is an error of that sample.
"""

from __future__ import annotations

import math

import numpy as np

from stoker import tfrecord as tfrec
from stoker.operators.readers import storage
from stoker.operators.readers._indexed import IndexedReader
from stoker.operators.readers._listing import ListingError
from stoker.operators.readers._proto import ProtoError
from stoker.operators.readers._tfrecord_format import (
    BYTES_LIST,
    FLOAT_LIST,
    INT64_LIST,
    RecordError,
    example_features,
    read_index,
    record_data,
    scan_records,
)
from stoker.operators.readers.file import READER_ARGS
from stoker.operators.schema import REQUIRED, Arg, Schema, register

_KIND = {tfrec.int64: INT64_LIST, tfrec.float32: FLOAT_LIST, tfrec.string: BYTES_LIST}
_KIND_NAME = {BYTES_LIST: "bytes", FLOAT_LIST: "float", INT64_LIST: "int64"}


def _num_outputs(args: dict) -> int:
    features = args.get("features")
    return len(features) if isinstance(features, dict) and features else 1


@register
class TFRecordReader(IndexedReader):
    """Reads features of TFRecord files (``fn.readers.tfrecord`` / ``ops.readers.TFRecord`` /
    ``ops.TFRecordReader``)."""

    schema = Schema(
        name="readers.tfrecord",
        doc="Reads the tf.train.Example records of TFRecord files: one output per entry of ``features`` "
            "(a dict of name -> stoker.tfrecord.FixedLenFeature / VarLenFeature), returned as a dict in "
            "that order. int64 -> int64, float32 -> float32, string -> the value's bytes as 1D uint8.",
        args=[
            Arg("path", "str_list", REQUIRED, doc="TFRecord files, read in this order"),
            Arg("index_path", "str_list", None,
                doc="one index file per path (lines 'offset size'); default: find the records by "
                    "reading the files' record headers when listing"),
            Arg("features", "any", REQUIRED, doc="dict of feature name -> stoker.tfrecord feature"),
            Arg("use_o_direct", "bool", False, doc="accepted for compatibility (reads go through the page cache)"),
            *READER_ARGS,
        ],
        inputs=(0, 0),
        num_outputs=_num_outputs,
        legacy_name="TFRecordReader",
    )
    # The graph API hands the outputs back as a dict keyed by feature name, as DALI does.
    schema.output_names = staticmethod(lambda a: list(a["features"]) if isinstance(a.get("features"), dict)
                                       else None)

    allows_both_shuffles = True  # as DALI's container readers (see IndexedReader)

    def setup(self) -> None:
        super().setup()
        a = self.args
        if not a["path"]:
            raise self._arg_error("path", "is empty: give one or more TFRecord files")
        if a["index_path"] is not None and len(a["index_path"]) != len(a["path"]):
            raise self._arg_error("index_path", f"has {len(a['index_path'])} entries for {len(a['path'])} "
                                  "files: give one index per file (or none, to scan the files)")
        features = a["features"]
        if not isinstance(features, dict) or not features:
            raise self._arg_error("features", "must be a non-empty dict of feature name -> "
                                  "stoker.tfrecord.FixedLenFeature(...) / VarLenFeature(...)")
        self._features: list[tuple[str, tfrec.Feature, np.ndarray | None]] = []
        for name, f in features.items():
            if not isinstance(name, str):
                raise self._arg_error("features", f"keys are feature names (str), got {name!r}")
            if not isinstance(f, tfrec.Feature):
                raise self._arg_error("features", f"'{name}' is {type(f).__name__}; use "
                                      "stoker.tfrecord.FixedLenFeature or VarLenFeature")
            self._features.append((name, f, self._default(name, f)))
        self._wanted = {name.encode() for name, _, _ in self._features}

    def _default(self, name: str, f: tfrec.Feature):
        """The output of a fixed-length feature that a record lacks."""
        if f.dtype == tfrec.string:
            if f.fixed and math.prod(f.shape) > 1 or not f.fixed:
                raise self._arg_error("features", f"'{name}': a string feature is one byte string per sample; "
                                      "use FixedLenFeature([], stoker.tfrecord.string, default)")
            value = f.default_value
            value = value.encode() if isinstance(value, str) else bytes(value or b"")
            return np.frombuffer(value, np.uint8)
        if not f.fixed:
            return None
        try:
            return np.broadcast_to(np.asarray(f.default_value, f.numpy_dtype), f.shape).copy()
        except (TypeError, ValueError) as e:
            raise self._arg_error("features", f"'{name}': default_value {f.default_value!r} does not fill "
                                  f"shape {list(f.shape)}: {e}") from None

    # --- listing ------------------------------------------------------------------------------
    def list_samples(self) -> int:
        a = self.args
        files, offsets, sizes, broken = [], [], [], {}
        for k, path in enumerate(a["path"]):
            if a["index_path"] is not None:
                try:
                    offs, szs = read_index(a["index_path"][k])
                except (OSError, ValueError) as e:
                    raise ListingError("index_path", str(e)) from None
                bad = {}
            else:
                try:
                    offs, szs, bad = scan_records(path)
                except OSError as e:
                    raise ListingError("path", str(e)) from None
            broken.update({len(offsets) + j: why for j, why in bad.items()})
            files += [k] * len(offs)
            offsets += offs
            sizes += szs
        self._file = np.asarray(files, np.int32)
        self._offset = np.asarray(offsets, np.int64)
        self._size = np.asarray(sizes, np.int64)
        self._broken = broken
        return len(offsets)

    def sample_source(self, i: int) -> str:
        return f"{self.args['path'][self._file[i]]} at index {int(self._offset[i])}"

    # --- reading ------------------------------------------------------------------------------
    def reads_ranges(self) -> bool:
        return not any(storage.is_remote(p) for p in self.args["path"])

    def sample_range(self, i: int) -> tuple[str, int, int]:
        return self.args["path"][self._file[i]], int(self._offset[i]), int(self._size[i])

    def load_sample(self, i: int) -> tuple:
        if i in self._broken:  # (not read: a broken header's record runs to the end of the file)
            path, offset = self.args["path"][self._file[i]], int(self._offset[i])
            raise ValueError(f"{path!r}, record at offset {offset}: {self._broken[i]}")
        return super().load_sample(i)

    def parse_sample(self, i: int, raw) -> tuple:
        path, offset = self.args["path"][self._file[i]], int(self._offset[i])
        where = f"{path!r}, record at offset {offset}"
        if i in self._broken:
            raise ValueError(f"{where}: {self._broken[i]}")
        try:
            found = example_features(record_data(raw), self._wanted)
        except (RecordError, ProtoError) as e:
            raise ValueError(f"{where}: {e}") from None
        return tuple(self._output(name, f, default, found.get(name.encode()), where)
                     for name, f, default in self._features)

    def _output(self, name: str, f: tfrec.Feature, default, value, where: str) -> np.ndarray:
        if value is None:  # the record lacks the feature
            if default is not None:
                return default
            return np.zeros((0, *(f.shape or ())), f.numpy_dtype)
        kind, values = value
        if f.dtype == tfrec.string:
            if kind != BYTES_LIST:
                raise ValueError(f"{where}: feature '{name}' holds {_KIND_NAME.get(kind, 'no')} values, "
                                 "features asks for a string")
            return np.frombuffer(values[0], np.uint8) if values else np.zeros(0, np.uint8)
        if kind != _KIND[f.dtype]:  # another type: no values of this one, as DALI reads it
            values = np.zeros(0, f.numpy_dtype)
        if f.fixed:
            if values.size != math.prod(f.shape):
                raise ValueError(f"{where}: feature '{name}' has {values.size} values, its FixedLenFeature "
                                 f"shape {list(f.shape)} takes {math.prod(f.shape)}")
            return values.reshape(f.shape)
        if f.shape is None:
            return values
        row = math.prod(f.shape)
        if row == 0 or values.size % row:
            raise ValueError(f"{where}: feature '{name}' has {values.size} values, not a whole number of rows "
                             f"of its VarLenFeature partial_shape {list(f.shape)}")
        return values.reshape(-1, *f.shape)

    def output_layouts(self, input_layouts):
        return [""] * self.num_outputs


# DALI's legacy name ops.readers.TFRecord is derived from the schema name; ops.TFRecordReader from legacy_name.
__all__ = ["TFRecordReader"]
