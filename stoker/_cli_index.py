"""``stoker index tfrecord FILES...`` and ``stoker index webdataset TARS...``: the index files of
``fn.readers.tfrecord`` (``index_path``) and ``fn.readers.webdataset`` (``index_paths``), in the
formats of DALI's ``tfrecord2idx`` and ``wds2idx``, so either library reads them.

* TFRecord: one line "offset size" per record; written to ``FILE.idx``. Every record's
  framing (and checksums, with a crc32c package) is checked first: a broken file gets no index.
* Webdataset: "v1.2 <samples>" then one line per sample; written to the archive's name up to
  its first dot plus ``.idx`` (``shard-000.tar`` -> ``shard-000.idx``), as ``wds2idx`` names it.
  Offsets are those of the member data as :mod:`tarfile` finds them, long (GNU/pax) names
  included.

``-o`` names the index file for one input, or a folder for several. Files are written whole or
not at all (a temporary file renamed into place).
"""

from __future__ import annotations

import argparse
import os

FORMATS = ("tfrecord", "webdataset")


def add_parser(sub) -> None:
    """Add the ``index`` command to the ``stoker`` sub-command parsers."""
    p = sub.add_parser("index", help="write the index files of TFRecord files or webdataset tar archives",
                       description="Write DALI-format index files (tfrecord2idx / wds2idx) for "
                       "fn.readers.tfrecord's index_path or fn.readers.webdataset's index_paths.")
    p.add_argument("format", choices=FORMATS, help="kind of the input files")
    p.add_argument("files", nargs="+", metavar="FILE", help="TFRecord files or tar archives")
    p.add_argument("-o", "--output", metavar="PATH",
                   help="index file (one input) or folder (several inputs); default: beside each input")


def index_name(path: str, fmt: str) -> str:
    """The default index file of ``path``: ``FILE.idx`` (TFRecord) or the archive's name up to its
    first dot plus ``.idx`` (webdataset, as ``wds2idx``)."""
    if fmt == "tfrecord":
        return path + ".idx"
    folder, name = os.path.split(path)
    stem = name.split(".", 1)[0] if not name.startswith(".") else name
    return os.path.join(folder, (stem or name) + ".idx")


def _targets(files: list[str], fmt: str, output: str | None) -> list[str]:
    from stoker._cli_pipeline import CLIError

    if output is None:
        return [index_name(f, fmt) for f in files]
    if len(files) == 1 and not os.path.isdir(output):
        return [output]
    if os.path.exists(output) and not os.path.isdir(output):
        raise CLIError(f"-o {output}: with {len(files)} inputs, -o names a folder")
    os.makedirs(output, exist_ok=True)
    names = [os.path.basename(index_name(f, fmt)) for f in files]
    if len(set(names)) != len(names):
        raise CLIError(f"-o {output}: two inputs would get the same index name there; index them one at a time")
    return [os.path.join(output, n) for n in names]


def tfrecord_index(path: str) -> str:
    """The text of the index of one TFRecord file. Raises ValueError for a broken record."""
    from stoker.operators.readers import storage
    from stoker.operators.readers._tfrecord_format import record_data, scan_records

    offsets, sizes, broken = scan_records(path)
    for i, (offset, size) in enumerate(zip(offsets, sizes)):
        if i in broken:
            raise ValueError(f"{path}: record at offset {offset}: {broken[i]}")
        try:
            record_data(storage.read_bytes(path, offset, size))  # the checksums, where they can be checked
        except ValueError as e:
            raise ValueError(f"{path}: record at offset {offset}: {e}") from None
    return "".join(f"{o} {s}\n" for o, s in zip(offsets, sizes))


def webdataset_index(path: str) -> str:
    """The text of the index of one webdataset tar archive."""
    from stoker.operators.readers._tar_index import format_index, scan_samples

    samples = scan_samples(path)
    if not samples:
        raise ValueError(f"{path}: the archive has no samples (no regular, non-hidden files)")
    try:
        return format_index(samples)
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from None


def _write(target: str, text: str) -> None:
    tmp = f"{target}.tmp{os.getpid()}"
    try:
        with open(tmp, "w", encoding="utf-8", errors="surrogateescape") as f:
            f.write(text)
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def run(a: argparse.Namespace) -> str:
    """Write the index of every input; returns the report (one line per file). Raises CLIError."""
    from stoker._cli_pipeline import CLIError

    make = tfrecord_index if a.format == "tfrecord" else webdataset_index
    lines = []
    for path, target in zip(a.files, _targets(a.files, a.format, a.output)):
        try:
            text = make(path)
            _write(target, text)
        except (OSError, ValueError) as e:
            raise CLIError(f"{e} (no index written for {path})") from None
        count = text.count("\n") - (1 if a.format == "webdataset" else 0)
        unit = "records" if a.format == "tfrecord" else "samples"
        lines.append(f"{target}: {count} {unit} of {path}")
    return "\n".join(lines)
