"""``fn.readers.webdataset``: samples of webdataset tar archives, one output per extension set.

A sample is a run of consecutive tar members sharing a key (see :mod:`._tar_index`). Output
``j`` is the data of the sample's first member (in archive order) whose extension is one of
``ext[j]``'s ';'-separated alternatives, as a 1D array of ``dtypes[j]`` (default uint8).
A sample with no member for an output gives an empty array (``missing_component_behavior``
"empty", the default), is left out of the data set ("skip"), or stops the listing ("error").

Each output's ``source_info`` is ``"<archive>:<data offset>:<member name>"`` of the member it
holds (empty for an empty output), as in DALI. Members are located by DALI's index files
(``index_paths``, written by ``stoker index webdataset`` or DALI's ``wds2idx``) or, without
them, by reading the archives' member headers when the data set is listed; the data is then
read with one ranged read per sample.

Unlike DALI's own scan of an archive without index, members whose file name starts with a dot
are always skipped (DALI's documentation and ``wds2idx`` say so; its scan keeps some of them).
"""

from __future__ import annotations

import numpy as np

from stoker import types
from stoker.operators.readers import storage
from stoker.operators.readers._indexed import IndexedReader
from stoker.operators.readers._listing import ListingError
from stoker.operators.readers._tar_index import Component, read_index, scan_samples, split_name
from stoker.operators.readers.file import READER_ARGS
from stoker.operators.schema import REQUIRED, Arg, Schema, register

BEHAVIORS = ("empty", "skip", "error")
_HEADER_SLACK = 1536  # a member's header (and a long name's) between two members read at once


def _num_outputs(args: dict) -> int:
    return max(1, len(args.get("ext") or ()))


@register
class WebdatasetReader(IndexedReader):
    """Reads webdataset tar archives (``fn.readers.webdataset`` / ``ops.readers.Webdataset``)."""

    schema = Schema(
        name="readers.webdataset",
        doc="Reads samples of webdataset tar archives: output j holds the member of each sample whose "
            "extension is one of ext[j]'s ';'-separated alternatives, as 1D dtypes[j] (default uint8).",
        args=[
            Arg("paths", "str_list", REQUIRED, doc="tar archives, read in this order"),
            Arg("index_paths", "str_list", None,
                doc="one index file per archive (DALI's wds2idx format); default: read the archives' "
                    "member headers when listing"),
            Arg("ext", "str_list", REQUIRED, doc="one extension set per output; alternatives separated by ';'"),
            Arg("missing_component_behavior", "str", "",
                doc="a sample lacking an output's member: 'empty' (default, an empty array), 'skip' (leave "
                    "the sample out) or 'error'"),
            Arg("dtypes", "any", None, doc="type of each output (default uint8); member sizes must be multiples"),
            Arg("case_sensitive_extensions", "bool", True, doc="match ext case-sensitively"),
            *READER_ARGS,
        ],
        inputs=(0, 0),
        num_outputs=_num_outputs,
    )

    allows_both_shuffles = True  # as DALI's container readers (see IndexedReader)

    def setup(self) -> None:
        super().setup()
        a = self.args
        if not a["paths"]:
            raise self._arg_error("paths", "is empty: give one or more tar archives")
        if a["index_paths"] is not None and len(a["index_paths"]) != len(a["paths"]):
            raise self._arg_error("index_paths", f"has {len(a['index_paths'])} entries for {len(a['paths'])} "
                                  "archives: give one index per archive (or none, to scan the archives)")
        if not a["ext"]:
            raise self._arg_error("ext", "is empty: give one extension set per output, e.g. ['jpg', 'cls']")
        fold = (lambda s: s) if a["case_sensitive_extensions"] else str.lower
        self._fold = fold
        self._ext_sets = [{fold(e) for e in spec.split(";") if e} for spec in a["ext"]]
        behavior = (a["missing_component_behavior"] or "empty").lower()
        if behavior not in BEHAVIORS:
            raise self._arg_error("missing_component_behavior", f"must be one of {', '.join(BEHAVIORS)}, "
                                  f"got {a['missing_component_behavior']!r}")
        self._behavior = behavior
        self._dtypes = self._output_dtypes(a["dtypes"], len(a["ext"]))

    def _output_dtypes(self, value, n: int) -> list[np.dtype]:
        if value is None:
            return [np.dtype(np.uint8)] * n
        values = list(value) if isinstance(value, (list, tuple)) else [value]
        try:
            dtypes = [types.dtype_from_arg(v) for v in values]
        except (TypeError, ValueError):
            raise self._arg_error("dtypes", f"expected data types such as types.UINT8, got {value!r}") from None
        if len(dtypes) != n:
            raise self._arg_error("dtypes", f"has {len(dtypes)} types for {n} outputs (ext): give one per output")
        return dtypes

    # --- listing ------------------------------------------------------------------------------
    def list_samples(self) -> int:
        a = self.args
        self._samples: list[tuple[int, tuple[Component | None, ...], Component]] = []
        for k, path in enumerate(a["paths"]):
            if a["index_paths"] is not None:
                try:
                    samples = read_index(a["index_paths"][k])
                except (OSError, ValueError) as e:
                    raise ListingError("index_paths", str(e)) from None
            else:
                try:
                    samples = scan_samples(path)
                except OSError as e:
                    raise ListingError("paths", str(e)) from None
            for components in samples:
                picked = self._pick(components)
                if None in picked and not self._missing(path, components, picked):
                    continue
                self._check_sizes(path, picked)
                self._samples.append((k, picked, next((c for c in picked if c is not None), components[0])))
        self._span = [self._covering(picked) for _, picked, _ in self._samples]
        return len(self._samples)

    def _pick(self, components: list[Component]) -> tuple[Component | None, ...]:
        """Each output's component: the first, in archive order, whose extension it takes."""
        picked: list[Component | None] = [None] * len(self._ext_sets)
        for c in components:
            ext = self._fold(c.ext)
            for j, wanted in enumerate(self._ext_sets):
                if picked[j] is None and ext in wanted:
                    picked[j] = c
        return tuple(picked)

    def _missing(self, path: str, components: list[Component], picked) -> bool:
        """Whether a sample lacking some outputs is kept (behavior "empty")."""
        if self._behavior == "error":
            j = picked.index(None)
            key = split_name(components[0].name)[0] if components[0].name else f"at offset {components[0].offset}"
            raise ListingError("missing_component_behavior",
                               f"is 'error' and sample {key!r} of {path!r} has no member for output {j} "
                               f"(ext {self.args['ext'][j]!r}); its members: "
                               f"{', '.join(c.ext for c in components)}")
        return self._behavior == "empty"

    def _check_sizes(self, path: str, picked) -> None:
        for j, c in enumerate(picked):
            if c is not None and c.size % self._dtypes[j].itemsize:
                raise ListingError("dtypes", f"member {c.name!r} of {path!r} has {c.size} bytes, not a whole "
                                   f"number of {self._dtypes[j]} values (output {j})")

    def sample_source(self, i: int) -> str:
        k, _, first = self._samples[i]
        return f"{self.args['paths'][k]}:{first.offset}:{first.name}"

    def output_source(self, i: int, j: int) -> str:
        """``source_info`` of output ``j`` of sample ``i`` (DALI's: archive, offset, member)."""
        k, picked, _ = self._samples[i]
        c = picked[j]
        return "" if c is None else f"{self.args['paths'][k]}:{c.offset}:{c.name}"

    # --- reading ------------------------------------------------------------------------------
    def reads_ranges(self) -> bool:
        """Batches through the I/O helper when each sample's members are neighbours (one range
        covers them) and the archives are local files."""
        if any(storage.is_remote(p) for p in self.args["paths"]):
            return False
        return all(span is not None for span in self._span)

    @staticmethod
    def _covering(picked) -> tuple[int, int] | None:
        """(offset, size) of the one read that covers a sample's members, or None when they lie
        too far apart for one read ((0, 0) for a sample with none)."""
        present = [c for c in picked if c is not None]
        if not present:
            return 0, 0
        lo = min(c.offset for c in present)
        hi = max(c.offset + c.size for c in present)
        return (lo, hi - lo) if hi - lo <= sum(c.size for c in present) + _HEADER_SLACK * len(present) else None

    def sample_range(self, i: int) -> tuple[str, int, int]:
        k = self._samples[i][0]
        lo, size = self._span[i]
        return self.args["paths"][k], lo, size

    def parse_sample(self, i: int, raw) -> tuple:
        _, picked, _ = self._samples[i]
        lo = self._span[i][0]
        return tuple(np.zeros(0, dt) if c is None else raw[c.offset - lo:c.offset - lo + c.size].view(dt)
                     for c, dt in zip(picked, self._dtypes))

    def load_sample(self, i: int) -> tuple:
        k, picked, _ = self._samples[i]
        path = self.args["paths"][k]
        present = [c for c in picked if c is not None]
        data: dict[int, bytes | memoryview] = {}
        if present:
            lo = min(c.offset for c in present)
            hi = max(c.offset + c.size for c in present)
            if hi - lo <= sum(c.size for c in present) + _HEADER_SLACK * len(present):
                # The members of a sample are neighbours in the archive: one read for all of them.
                block = memoryview(storage.read_bytes(path, lo, hi - lo))
                data = {c.offset: block[c.offset - lo:c.offset - lo + c.size] for c in present}
            else:
                data = {c.offset: storage.read_bytes(path, c.offset, c.size) for c in present}
        return tuple(np.zeros(0, dt) if c is None else np.frombuffer(data[c.offset], dt)
                     for c, dt in zip(picked, self._dtypes))

    def output_layouts(self, input_layouts):
        return [""] * self.num_outputs
