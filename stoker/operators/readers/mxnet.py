"""``fn.readers.mxnet``: image records of MXNet RecordIO files (``.rec`` with an ``.idx`` index).

Outputs per sample: the image bytes (1D uint8, as stored, usually an encoded file)
and the label (float32): the header's one label, shape (1,), or the ``flag`` labels
stored after the header when flag > 0. The format is read by :mod:`._recordio`.

The data set is the index's records in offset order. A sample's ``source_info`` is
``"<rec path> at index <offset in that file>"``, as in DALI.
"""

from __future__ import annotations

from stoker.operators.readers import storage
from stoker.operators.readers._indexed import IndexedReader
from stoker.operators.readers._listing import ListingError
from stoker.operators.readers._recordio import parse_image_record, read_index
from stoker.operators.readers.file import READER_ARGS
from stoker.operators.schema import REQUIRED, Arg, Schema, register


@register
class MXNetReader(IndexedReader):
    """Reads MXNet RecordIO image records (``fn.readers.mxnet`` / ``ops.MXNetReader``)."""

    schema = Schema(
        name="readers.mxnet",
        doc="Reads MXNet RecordIO image records: outputs the image bytes (1D uint8) and the label "
            "(float32; shape (1,), or (flag,) for a multi-label record).",
        args=[
            Arg("path", "str_list", REQUIRED, doc="the .rec files, in the order the index counts them"),
            Arg("index_path", "str_list", REQUIRED,
                doc="a list of one .idx file (lines 'key offset'; offsets run across the .rec files)"),
            *READER_ARGS,
        ],
        inputs=(0, 0),
        num_outputs=2,
        legacy_name="MXNetReader",
    )

    def list_samples(self) -> int:
        paths, index = self.args["path"], self.args["index_path"]
        if not paths:
            raise ListingError("path", "names no .rec file")
        if len(index) != 1:
            raise ListingError("index_path", f"takes one index file, got {len(index)}")
        self._paths = list(paths)
        self._file_of, self._offsets, self._sizes = read_index(index[0], self._paths)
        return len(self._offsets)

    def sample_source(self, i: int) -> str:
        return f"{self._paths[self._file_of[i]]} at index {int(self._offsets[i])}"

    def listing_digest(self, digest) -> None:
        digest.update("\0".join(self._paths).encode("utf-8", "surrogateescape"))
        for a in (self._file_of, self._offsets, self._sizes):
            digest.update(a.tobytes())

    def reads_ranges(self) -> bool:
        return not any(storage.is_remote(p) for p in self._paths)

    def sample_range(self, i: int) -> tuple[str, int, int]:
        return self._paths[self._file_of[i]], int(self._offsets[i]), int(self._sizes[i])

    def parse_sample(self, i: int, raw) -> tuple:
        try:
            return parse_image_record(raw)
        except ValueError as e:
            raise ValueError(f"{self.sample_source(i)}: {e}") from None

    def output_layouts(self, input_layouts):
        return ["", ""]
