"""Where readers get their bytes: one small interface for local paths and remote URLs.

Every reader opens data through these functions, so that a path may be a local
file or an fsspec URL (``s3://``, ``gs://``, ``http(s)://``, ``file://``) without
each reader knowing the difference. Errors are ``OSError`` naming the path,
which the readers turn into sample errors. A URL whose scheme needs a package
that is not installed raises :class:`StorageUnavailableError` (an ImportError,
never a sample error) naming the package; readers raise it at build.

Remote reads (retries, concurrency, readahead, the local cache and their
settings) are described in :mod:`.remote`.
"""

from __future__ import annotations

import io
import os

from stoker.operators.readers import remote
from stoker.operators.readers.remote import StorageUnavailableError

__all__ = ["StorageUnavailableError", "is_remote", "join", "parent", "require", "file_size", "exists", "isdir",
           "read_bytes", "read_many", "open_binary", "list_dir", "walk", "local_path"]


def is_remote(path: str) -> bool:
    """Whether ``path`` is a URL with a scheme other than a local file."""
    head, sep, _ = str(path).partition("://")
    return bool(sep) and head not in ("", "file") and "/" not in head


def local_path(path: str) -> str:
    """A local path without its ``file://`` prefix."""
    path = os.fspath(path)
    return path[len("file://"):] if path.startswith("file://") else path


_local = local_path


def join(base: str | None, rel: str) -> str:
    """``rel`` under ``base`` (either may be a URL); an absolute ``rel`` stays as it is."""
    if not base or os.path.isabs(rel) or "://" in rel:
        return rel
    if is_remote(base):
        # "./name" (readers.numpy lists a root's own files so) is no object key: S3 refuses it
        rel = "/".join(part for part in rel.split("/") if part != ".")
        return base.rstrip("/") + "/" + rel
    return os.path.join(_local(base), rel)


def parent(path: str) -> str:
    """The folder holding ``path`` (a URL's parent is a URL)."""
    if is_remote(path):
        head, _, rest = path.partition("://")
        return f"{head}://{rest.rstrip('/').rsplit('/', 1)[0]}" if "/" in rest.rstrip("/") else path
    return os.path.dirname(os.path.abspath(_local(path)))


def require(path: str) -> None:
    """Raise StorageUnavailableError now if ``path`` is a URL whose packages are missing (for a
    reader's build: the error names the package to install)."""
    if is_remote(path):
        remote.filesystem(path)


def file_size(path: str) -> int:
    """Size of the file in bytes."""
    if is_remote(path):
        return remote.size_of(path)
    try:
        return os.path.getsize(_local(path))
    except OSError as e:
        raise OSError(f"cannot read file {path!r}: {e.strerror or e}") from None


def exists(path: str) -> bool:
    """Whether a file or folder is there (False also when it cannot be looked up)."""
    if is_remote(path):
        return remote.exists(path)
    return os.path.exists(_local(path))


def isdir(path: str) -> bool:
    """Whether ``path`` is a folder (a URL: a prefix with objects under it)."""
    if is_remote(path):
        return remote.isdir(path)
    return os.path.isdir(_local(path))


def read_bytes(path: str, offset: int = 0, size: int | None = None) -> bytes:
    """``size`` bytes of the file from ``offset`` (to its end when ``size`` is None).

    A URL is read with a ranged request (only those bytes), retried on transient
    errors, with readahead when records are read in order (see :mod:`.remote`).
    """
    if is_remote(path):
        return remote.read(path, offset, size)
    try:
        with open(_local(path), "rb", buffering=0) as f:
            if offset:
                f.seek(offset)
            data = f.read() if size is None else f.read(size)
    except OSError as e:
        raise OSError(f"cannot read file {path!r}: {e.strerror or e}") from None
    if size is not None and len(data) != size:
        raise OSError(f"cannot read file {path!r}: {size} bytes wanted at offset {offset}, "
                      f"the file ends after {len(data)}")
    return data


def read_many(paths: list[str]) -> list:
    """The whole contents of each path: a list of ``bytes``, or the ``OSError`` (naming the path)
    where one could not be read. URLs are fetched concurrently in one call, which is what makes
    a batch of remote files fast: one request's latency, not one per file."""
    out: list = [None] * len(paths)
    urls = [i for i, p in enumerate(paths) if is_remote(p)]
    fetched = remote.read_many([paths[i] for i in urls]) if urls else []
    for i, data in zip(urls, fetched):
        out[i] = data
    for i, p in enumerate(paths):
        if out[i] is None:
            try:
                out[i] = read_bytes(p)
            except OSError as e:
                out[i] = e
    return out


class _RemoteRaw(io.RawIOBase):
    """A seekable read-only file over ranged reads of a URL (each one retried)."""

    def __init__(self, url: str):
        self.url = url
        self.size = remote.size_of(url)
        self.pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.pos, io.SEEK_END: self.size}[whence]
        self.pos = max(0, base + offset)
        return self.pos

    def tell(self) -> int:
        return self.pos

    def readinto(self, buffer) -> int:
        n = min(len(buffer), self.size - self.pos)
        if n <= 0:
            return 0
        data = remote.read(self.url, self.pos, n)
        buffer[:n] = data
        self.pos += n
        return n


def open_binary(path: str):
    """A seekable binary file object (close it when done). A URL's file reads ahead in blocks
    of the readahead size (``STOKER_REMOTE_READAHEAD``, at least 1 MiB)."""
    if is_remote(path):
        return io.BufferedReader(_RemoteRaw(path), buffer_size=max(1 << 20, remote.settings().readahead))
    try:
        return open(_local(path), "rb")
    except OSError as e:
        raise OSError(f"cannot read file {path!r}: {e.strerror or e}") from None


def list_dir(path: str) -> list[tuple[str, bool]]:
    """``(name, is a folder)`` of the entries directly in the folder ``path``, sorted by name.
    OSError naming the path when it cannot be listed (FileNotFoundError when it does not exist)."""
    if is_remote(path):
        return sorted(remote.list_dir(path))
    try:
        with os.scandir(_local(path)) as it:
            return sorted((e.name, e.is_dir()) for e in it)
    except OSError as e:
        cls = FileNotFoundError if isinstance(e, FileNotFoundError) else OSError
        raise cls(f"cannot list {path!r}: {e.strerror or e}") from None


def walk(path: str):
    """``(folder, sub-folder names, file names)`` for ``path`` and every folder below it, top
    down, names sorted; a folder is a URL when ``path`` is one."""
    if is_remote(path):
        yield from remote.walk(path)
        return
    for here, dirs, files in os.walk(_local(path)):
        dirs.sort()
        yield here, dirs, sorted(files)
