"""Webdataset tar archives: where each member's data lies, how members group into samples, and
DALI's index file of that (``wds2idx``'s format).

A member ``dir/key.ext.more`` belongs to sample ``dir/key`` with extension ``ext.more`` (the
extension starts at the first dot of the file name); consecutive members with the same key
form one sample. Only regular files count; a member whose file name starts with a dot is
skipped, as DALI documents and its ``wds2idx`` does.

The index (DALI's "v1.2")::

    v1.2 <number of samples>
    <ext> <data offset> <size> <member name> [<ext> <offset> <size> <name> ...]   (one line per sample)

"v1.1" indexes have no member names (three fields per component).
"""

from __future__ import annotations

import tarfile
from dataclasses import dataclass

from stoker.operators.readers import storage

INDEX_VERSION = "v1.2"


@dataclass(frozen=True)
class Component:
    """One member of a sample: its extension, where its data starts, its size and its name."""

    ext: str
    offset: int
    size: int
    name: str


def split_name(name: str) -> tuple[str, str]:
    """``(sample key, extension)`` of a member name; a name without a dot in its file name is its
    own key and extension (as DALI splits it)."""
    dot = name.find(".", name.rfind("/") + 1)
    if dot < 0:
        return name, name
    return name[:dot], name[dot + 1:]


def is_hidden(name: str) -> bool:
    return name[name.rfind("/") + 1:].startswith(".")


def tar_members(path: str) -> list[tuple[str, int, int]]:
    """``(name, data offset, size)`` of the regular files of a tar archive, in archive order
    (long names and pax headers resolved by :mod:`tarfile`). Raises OSError naming the file."""
    try:
        with storage.open_binary(path) as f, tarfile.open(fileobj=f, mode="r:") as tar:
            return [(m.name, m.offset_data, m.size) for m in tar if m.isreg()]
    except tarfile.TarError as e:
        raise OSError(f"cannot read tar archive {path!r}: {e}") from None


def group_samples(members) -> list[list[Component]]:
    """Consecutive members with one key -> one sample (a list of its components)."""
    samples: list[list[Component]] = []
    last = None
    for name, offset, size in members:
        if is_hidden(name):
            continue
        key, ext = split_name(name)
        if key != last:
            samples.append([])
            last = key
        samples[-1].append(Component(ext, offset, size, name))
    return samples


def scan_samples(path: str) -> list[list[Component]]:
    """The samples of a tar archive, read from its member headers."""
    return group_samples(tar_members(path))


def read_index(index_path: str) -> list[list[Component]]:
    """The samples listed by a webdataset index ("v1.1" or "v1.2"). Raises ValueError naming the
    file and line of a malformed one."""
    lines = storage.read_bytes(index_path).decode("utf-8", "surrogateescape").splitlines()
    head = lines[0].split() if lines else []
    if len(head) != 2 or head[0] not in ("v1.1", "v1.2") or not head[1].isdigit():
        raise ValueError(f"{index_path}:1: expected a header 'v1.2 <number of samples>' (or v1.1), got "
                         f"{(lines[0] if lines else '')[:80]!r}")
    per = 4 if head[0] == "v1.2" else 3
    samples = []
    for number, line in enumerate(lines[1:], 2):
        parts = line.split()
        if not parts:
            continue
        if len(parts) % per:
            raise ValueError(f"{index_path}:{number}: expected groups of {per} fields "
                             f"('ext offset size{' name' if per == 4 else ''}'), got {len(parts)} fields")
        try:
            sample = [Component(parts[j], int(parts[j + 1]), int(parts[j + 2]), parts[j + 3] if per == 4 else "")
                      for j in range(0, len(parts), per)]
        except ValueError:
            raise ValueError(f"{index_path}:{number}: offsets and sizes must be integers: {line[:80]!r}") from None
        if any(c.offset < 0 or c.size < 0 for c in sample):
            raise ValueError(f"{index_path}:{number}: negative offset or size: {line[:80]!r}")
        samples.append(sample)
    if len(samples) != int(head[1]):
        raise ValueError(f"{index_path}: the header announces {head[1]} samples, the file lists {len(samples)}")
    return samples


def format_index(samples: list[list[Component]]) -> str:
    """The text of a "v1.2" index of ``samples``. Raises ValueError for a member name with white
    space or a name ending in a dot (the format separates fields with spaces)."""
    lines = [f"{INDEX_VERSION} {len(samples)}"]
    for sample in samples:
        for c in sample:
            if len(c.name.split()) != 1 or len(c.ext.split()) != 1:
                raise ValueError(f"member {c.name!r}: the index format cannot hold a name with white space "
                                 "or an empty extension")
        lines.append(" ".join(f"{c.ext} {c.offset} {c.size} {c.name}" for c in sample))
    return "\n".join(lines) + "\n"
