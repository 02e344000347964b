"""Listing the files of ``readers.file``: class folders, a list file, or explicit paths.

Each function returns ``(paths, labels)`` where ``paths`` are as DALI reports
them in ``source_info`` (relative to ``file_root`` when one is given) and the
caller joins them with the root to open them.
"""

from __future__ import annotations

import fnmatch
import os

DEFAULT_FILE_FILTERS = ["*.jpg", "*.jpeg", "*.png", "*.bmp", "*.tif", "*.tiff", "*.pnm", "*.ppm", "*.pgm",
                        "*.pbm", "*.jp2", "*.webp", "*.flac", "*.ogg", "*.wav"]


class ListingError(ValueError):
    """A problem with the data set description; carries the argument it is about."""

    def __init__(self, arg: str, message: str):
        super().__init__(message)
        self.arg = arg


def _matcher(patterns: list[str], case_sensitive: bool):
    if case_sensitive:
        return lambda name: any(fnmatch.fnmatchcase(name, p) for p in patterns)
    lowered = [p.lower() for p in patterns]
    return lambda name: any(fnmatch.fnmatchcase(name.lower(), p) for p in lowered)


def list_class_folders(file_root: str, file_filters: list[str] | None, dir_filters: list[str] | None,
                       case_sensitive: bool) -> tuple[list[str], list[int]]:
    """Files directly inside the sub-folders of ``file_root``; label = rank of the folder's sorted name.

    Like DALI: only the first level of sub-folders is a class, files directly in
    ``file_root`` and in deeper folders are ignored, names sort by code point.
    """
    if not os.path.isdir(file_root):
        what = "is not a directory" if os.path.exists(file_root) else "does not exist"
        raise ListingError("file_root", f"{file_root!r} {what}")
    match_file = _matcher(file_filters if file_filters is not None else DEFAULT_FILE_FILTERS, case_sensitive)
    match_dir = _matcher(dir_filters, case_sensitive) if dir_filters else (lambda name: True)
    with os.scandir(file_root) as it:
        classes = sorted(e.name for e in it if e.is_dir() and match_dir(e.name))
    paths: list[str] = []
    labels: list[int] = []
    for label, cls in enumerate(classes):
        with os.scandir(os.path.join(file_root, cls)) as it:
            names = sorted(e.name for e in it if e.is_file() and match_file(e.name))
        paths.extend(f"{cls}/{n}" for n in names)
        labels.extend([label] * len(names))
    if not paths:
        filters = file_filters if file_filters is not None else "the default image/audio extensions"
        raise ListingError("file_root", f"no files matching {filters} in the sub-folders of {file_root!r} "
                           f"({len(classes)} sub-folder(s) found; each sub-folder is one class)")
    return paths, labels


def read_file_list(file_list: str) -> tuple[list[str], list[int]]:
    """Parse a text file of ``path label`` lines (the path may contain spaces; blank lines are skipped)."""
    try:
        with open(file_list, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise ListingError("file_list", f"cannot open {file_list!r}: {e.strerror or e}") from None
    paths: list[str] = []
    labels: list[int] = []
    for lineno, line in enumerate(lines, 1):
        text = line.strip()
        if not text:
            continue
        parts = text.rsplit(None, 1)
        try:
            if len(parts) != 2:
                raise ValueError
            label = int(parts[1])
        except ValueError:
            raise ListingError("file_list", f"{file_list}:{lineno}: expected 'path label' with an integer "
                               f"label, got {line!r}") from None
        paths.append(parts[0].rstrip())
        labels.append(label)
    if not paths:
        raise ListingError("file_list", f"{file_list!r} lists no files")
    return paths, labels
