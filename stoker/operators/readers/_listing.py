"""Listing the files of ``readers.file``: class folders, a list file, or explicit paths.

Each function returns ``(paths, labels)`` where ``paths`` are as DALI reports
them in ``source_info`` (relative to ``file_root`` when one is given) and the
caller joins them with the root to open them.

One bad entry of a folder tree never stops the listing: a symbolic link loop, a
dangling link or a folder that cannot be read is listed like a file, with the
reason it cannot be read (``broken``), and the reader fails that sample when it
is read, as it fails a corrupt file: ``on_error="skip"`` drops and reports it,
``"raise"`` stops with an error naming its path.
"""

from __future__ import annotations

import fnmatch
import os
from concurrent.futures import ThreadPoolExecutor

from stoker.errors import printable
from stoker.operators.readers import storage

# Class folders of a remote file_root listed at once: each listing is a round trip (tens of
# ms on S3), so a thousand classes listed one after the other would hold the build for a minute.
_REMOTE_LISTINGS_IN_FLIGHT = 16

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


def _reason(e: OSError) -> str:
    return f"[Errno {e.errno}] {e.strerror}" if e.errno is not None and e.strerror else str(e)


def _is_dir(entry: os.DirEntry) -> bool | str:
    """True/False, or why the entry's type cannot be known (a link loop, a dangling link, no
    permission): such an entry is listed as a broken class folder, so that the labels of the
    other classes stay those of an intact tree."""
    try:
        if entry.is_dir():
            return True
        if entry.is_symlink() and not os.path.exists(entry.path):
            return f"dangling symbolic link (to {os.readlink(entry.path)!r})"
        return False
    except OSError as e:
        return _reason(e)


def _class_files(folder: str, match_file) -> tuple[list[str], dict[str, str]] | str:
    """The matching file names of one class folder (sorted) and {name: why it cannot be read} for
    the broken ones among them; or why the folder cannot be listed."""
    try:
        with os.scandir(folder) as it:
            entries = [e for e in it if match_file(e.name)]
    except OSError as e:
        return f"class folder cannot be listed: {_reason(e)}"
    names: list[str] = []
    broken: dict[str, str] = {}
    for e in entries:
        try:
            if e.is_file():
                names.append(e.name)
            elif e.is_symlink() and not os.path.exists(e.path):  # (a link to a folder is no file)
                names.append(e.name)
                broken[e.name] = f"dangling symbolic link (to {os.readlink(e.path)!r})"
        except OSError as err:  # a link loop, a file whose type cannot be read
            names.append(e.name)
            broken[e.name] = _reason(err)
    return sorted(names), broken


def list_class_folders(file_root: str, file_filters: list[str] | None, dir_filters: list[str] | None,
                       case_sensitive: bool) -> tuple[list[str], list[int], dict[int, str]]:
    """Files directly inside the sub-folders of ``file_root``; label = rank of the folder's sorted name.

    Like DALI: only the first level of sub-folders is a class, files directly in
    ``file_root`` and in deeper folders are ignored, names sort by code point.
    Returns ``(paths, labels, broken)``: ``broken`` maps the index of each entry
    that cannot be read (see the module docstring) to the reason; a class folder
    that cannot be listed is one such entry, its own path.
    """
    match_file = _matcher(file_filters if file_filters is not None else DEFAULT_FILE_FILTERS, case_sensitive)
    match_dir = _matcher(dir_filters, case_sensitive) if dir_filters else (lambda name: True)
    if storage.is_remote(file_root):
        found, listings = _list_remote_root(file_root, match_file, match_dir)
    else:
        local_root = storage.local_path(file_root)
        if not os.path.isdir(local_root):
            what = "is not a directory" if os.path.exists(local_root) else "does not exist"
            raise ListingError("file_root", f"{file_root!r} {what}")
        try:
            with os.scandir(local_root) as it:
                found = {e.name: _is_dir(e) for e in it if match_dir(e.name)}
        except OSError as e:
            raise ListingError("file_root", f"cannot list {file_root!r}: {_reason(e)}") from None
        listings = None
    classes = sorted(name for name, kind in found.items() if kind is not False)
    paths: list[str] = []
    labels: list[int] = []
    broken: dict[int, str] = {}
    for label, cls in enumerate(classes):
        if found[cls] is not True:
            listed = f"class folder cannot be read: {found[cls]}"
        elif listings is not None:
            listed = listings[cls]
        else:
            listed = _class_files(os.path.join(local_root, cls), match_file)
        if isinstance(listed, str):
            broken[len(paths)] = listed
            paths.append(cls)
            labels.append(label)
            continue
        names, bad = listed
        for n in names:
            if n in bad:
                broken[len(paths)] = bad[n]
            paths.append(f"{cls}/{n}")
        labels.extend([label] * len(names))
    if not paths:
        filters = file_filters if file_filters is not None else "the default image/audio extensions"
        raise ListingError("file_root", f"no files matching {filters} in the sub-folders of {file_root!r} "
                           f"({len(classes)} sub-folder(s) found; each sub-folder is one class)")
    return paths, labels, broken


def _list_remote_root(file_root: str, match_file, match_dir) -> tuple[dict, dict]:
    """The class folders of a remote ``file_root`` ({name: True}) and each one's listing, as
    :func:`_class_files` gives it; the class folders are listed concurrently. On object stores
    a folder is a key prefix: an empty one does not exist, and a file has no link to follow."""
    try:
        entries = storage.list_dir(file_root)
    except NotADirectoryError:
        raise ListingError("file_root", f"{file_root!r} is not a directory (it is an object)") from None
    except FileNotFoundError as e:
        raise ListingError("file_root", f"{file_root!r} does not exist ({_remote_why(e)})") from None
    except OSError as e:
        raise ListingError("file_root", f"cannot list {file_root!r}: {_remote_why(e)}") from None
    found = {name: True for name, is_dir in entries if is_dir and match_dir(name)}

    def one(cls: str):
        try:
            names = [n for n, is_dir in storage.list_dir(storage.join(file_root, cls))
                     if not is_dir and match_file(n)]
        except OSError as e:
            return f"class folder cannot be listed: {_remote_why(e)}"
        return sorted(names), {}

    with ThreadPoolExecutor(min(_REMOTE_LISTINGS_IN_FLIGHT, max(1, len(found))),
                            thread_name_prefix="stoker-list") as pool:
        listings = dict(zip(found, pool.map(one, found)))
    return found, listings


def _remote_why(e: OSError) -> str:
    """The reason part of a storage error ("cannot list 'url': why")."""
    text = str(e)
    return text.split("': ", 1)[1] if "': " in text else text


def read_file_list(file_list: str) -> tuple[list[str], list[int]]:
    """Parse a text file of ``path label`` lines (the path may contain spaces; blank lines are skipped).
    ``file_list`` may be a URL."""
    try:
        if storage.is_remote(file_list):
            lines = storage.read_bytes(file_list).decode("utf-8").splitlines()
        else:
            with open(storage.local_path(file_list), encoding="utf-8") as f:
                lines = f.read().splitlines()
    except OSError as e:
        why = _remote_why(e) if storage.is_remote(file_list) else (e.strerror or e)
        raise ListingError("file_list", f"cannot open {file_list!r}: {why}") from None
    except UnicodeDecodeError as e:
        raise ListingError("file_list", f"{file_list!r} is not UTF-8 text: {e}") from None
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
            raise ListingError("file_list", f"{printable(file_list)}:{lineno}: expected 'path label' with an integer "
                               f"label, got {line!r}") from None
        paths.append(parts[0].rstrip())
        labels.append(label)
    if not paths:
        raise ListingError("file_list", f"{file_list!r} lists no files")
    return paths, labels
