"""Remote reads for :mod:`.storage`: fsspec URLs (``s3://``, ``gs://``, ``http(s)://``, ...).

fsspec and the scheme's driver (``s3fs``, ``gcsfs``, ``aiohttp`` for HTTP) are optional
packages (``pip install stoker[remote]``); a URL whose package is missing fails with
:class:`StorageUnavailableError` naming the package, which the readers raise at build.

Endpoints and credentials are configured the fsspec way, not by stoker: the driver's own
variables (``AWS_ACCESS_KEY_ID``, ``AWS_ENDPOINT_URL``, ...), fsspec's ``FSSPEC_S3_ENDPOINT_URL``
style variables and configuration files, or ``fsspec.config.conf["s3"] = {...}`` in Python.

What stoker adds on top of fsspec, all in this file:

* **retries**: a read or a listing that fails with a transient error (a dropped
  connection, a time-out, HTTP 5xx, 429 or S3 throttling) is tried again after
  ``backoff * 2**k`` seconds (with jitter, capped at 10 s), ``retries`` times; a read
  that still fails raises ``OSError`` naming the URL, which the readers turn into a
  sample error (``on_error`` applies). Missing objects and denied access fail at once.
* **concurrency**: :func:`read_many` fetches a whole batch in one call on fsspec's event
  loop (as many requests in flight as the driver's connection pool allows), and every
  function may be called from many threads at once.
* **readahead**: a ranged read that starts where the previous read of the same object
  ended (records read in order) fetches ``readahead`` bytes at once and serves the next
  records from memory; a random access pattern (shuffled records) fetches only what is
  asked, so readahead never multiplies the bytes of a random read.
* **a local cache** (``STOKER_CACHE_DIR``): the first read of an object downloads it whole
  into that folder, and every later read, of this process or the next run, is a local
  read. Objects are assumed not to change (as the files of a data set do not); delete the
  folder when they do. Nothing is evicted. fsspec's own caches work too, by URL chaining:
  ``simplecache::s3://bucket/...``.

Settings (environment variables, read once; :func:`override` changes them in tests):
``STOKER_REMOTE_RETRIES`` (5), ``STOKER_REMOTE_BACKOFF`` (0.2 s), ``STOKER_REMOTE_READAHEAD``
(4 MiB; 0 turns readahead off), ``STOKER_CACHE_DIR`` (unset: no cache).
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import hashlib
import os
import random
import threading
import time
from collections import OrderedDict

from stoker import settings as stoker_settings

# Most bytes the readahead windows of all objects hold together: enough for a window per
# pipeline thread and per open shard, small beside a batch of decoded images.
_READAHEAD_TOTAL = 64 << 20
_BACKOFF_CAP = 10.0

# Packages of the schemes whose fsspec class lives in fsspec itself but needs another package.
_EXTRA_PACKAGES = {"http": "aiohttp", "https": "aiohttp"}


class StorageUnavailableError(ImportError):
    """A URL's scheme needs a package that is not installed (fsspec, or its driver)."""


@dataclasses.dataclass(frozen=True)
class RemoteSettings:
    """How remote reads behave (see the module docstring)."""

    retries: int = 5
    backoff: float = 0.2
    readahead: int = 4 << 20
    cache_dir: str | None = None


def _from_environment() -> RemoteSettings:
    s = stoker_settings.get()
    return RemoteSettings(retries=s.remote_retries, backoff=s.remote_backoff, readahead=s.remote_readahead,
                          cache_dir=s.cache_dir)


_settings: RemoteSettings | None = None


def settings() -> RemoteSettings:
    """The settings in force (read from the environment on first use)."""
    global _settings
    if _settings is None:
        _settings = _from_environment()
    return _settings


@contextlib.contextmanager
def override(**changes):
    """Change settings inside a ``with`` block (tests): ``override(retries=2, backoff=0.01)``."""
    global _settings
    before = settings()
    _settings = dataclasses.replace(before, **changes)
    try:
        yield _settings
    finally:
        _settings = before


# --- the file systems ------------------------------------------------------------------------

_fs_lock = threading.Lock()
_filesystems: dict = {}  # (pid, scheme) -> fsspec file system


def _package_for(scheme: str) -> str:
    try:
        from fsspec.registry import known_implementations
    except ImportError:
        return "fsspec"
    known = known_implementations.get(scheme)
    if known is None:
        return f"an fsspec driver for {scheme}://"
    package = known["class"].split(".")[0]
    return _EXTRA_PACKAGES.get(scheme, package) if package == "fsspec" else package


def _unavailable(url: str, scheme: str, why: str) -> StorageUnavailableError:
    package = _package_for(scheme)
    return StorageUnavailableError(
        f"reading {url!r} needs the Python package '{package}' ({why}); install it with "
        f"`pip install {package}` or `pip install stoker[remote]`")


def _new_filesystem(url: str, scheme: str):
    try:
        import fsspec
    except ImportError:
        raise StorageUnavailableError(
            f"reading {url!r} needs the Python package 'fsspec' (and its driver for {scheme}://); "
            f"install them with `pip install stoker[remote]`") from None
    try:
        cls = fsspec.get_filesystem_class(scheme)
    except ImportError as e:
        raise _unavailable(url, scheme, str(e)) from None
    except ValueError:  # fsspec has never heard of the scheme
        raise StorageUnavailableError(f"reading {url!r}: no fsspec driver is known for {scheme}:// "
                                      f"(is the URL's scheme misspelled?)") from None
    options = {}
    if "s3" in ((cls.protocol,) if isinstance(cls.protocol, str) else cls.protocol):
        # aiobotocore keeps 10 connections by default: a batch of 256 files would queue
        # behind them. The user's fsspec configuration still wins for the keys it sets.
        from fsspec.config import conf

        user = dict(conf.get(scheme, {}).get("config_kwargs", {}))
        options["config_kwargs"] = {"max_pool_connections": 64, **user}
    try:
        return fsspec.filesystem(scheme, **options)
    except ImportError as e:  # (a driver that imports its own dependencies late)
        raise _unavailable(url, scheme, str(e)) from None


def filesystem(url: str):
    """(fsspec file system, path inside it) of ``url``; raises StorageUnavailableError when the
    packages its scheme needs are missing."""
    scheme = url.partition("://")[0]
    if "::" in scheme:  # a chained URL (simplecache::s3://...): fsspec parses it each time
        try:
            from fsspec.core import url_to_fs
        except ImportError:
            raise _unavailable(url, "fsspec", "fsspec is not installed") from None
        try:
            return url_to_fs(url)
        except ImportError as e:
            raise _unavailable(url, scheme.rsplit("::", 1)[-1], str(e)) from None
    key = (os.getpid(), scheme)  # (a forked child makes its own: the event loop does not survive a fork)
    fs = _filesystems.get(key)
    if fs is None:
        with _fs_lock:
            fs = _filesystems.get(key)
            if fs is None:
                fs = _filesystems[key] = _new_filesystem(url, scheme)
    return fs, fs._strip_protocol(url)


def reset() -> None:
    """Forget the file systems, readahead windows and settings (tests, a changed configuration)."""
    global _settings
    with _fs_lock:
        _filesystems.clear()
    with _windows_lock:
        _windows.clear()
        _last_end.clear()
    _settings = None


# --- errors and retries ------------------------------------------------------------------------

_TRANSIENT_ERRNOS = {errno.ECONNRESET, errno.ECONNREFUSED, errno.ECONNABORTED, errno.ETIMEDOUT, errno.EPIPE,
                     errno.EAGAIN, errno.EHOSTUNREACH, errno.ENETUNREACH, errno.ENETDOWN}
_TRANSIENT_CODES = {"SlowDown", "Throttling", "ThrottlingException", "RequestTimeout", "RequestTimeTooSkewed",
                    "InternalError", "ServiceUnavailable", "RequestLimitExceeded", "TooManyRequests"}
_TRANSIENT_NAMES = {"ClientConnectionError", "ServerDisconnectedError", "ClientPayloadError",
                    "ClientOSError", "ServerTimeoutError", "EndpointConnectionError", "ConnectionClosedError",
                    "ReadTimeoutError", "ConnectTimeoutError", "IncompleteRead", "FSTimeoutError",
                    "ResponseStreamingError", "ProtocolError"}


def _status(e: BaseException) -> int | None:
    """The HTTP status behind an error of aiohttp (``status``) or botocore (``response``)."""
    status = getattr(e, "status", None)
    if isinstance(status, int):
        return status
    response = getattr(e, "response", None)
    if isinstance(response, dict):
        return response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return None


def is_transient(e: BaseException) -> bool:
    """Whether an error is worth a retry: the connection, a time-out, the server busy or failing
    (5xx, 429, S3 throttling). A missing object or denied access is not."""
    seen = 0
    while e is not None and seen < 8:  # the driver's error, then what it wraps
        if isinstance(e, (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError)):
            return False
        if isinstance(e, (ConnectionError, TimeoutError)):
            return True
        if isinstance(e, OSError) and e.errno in _TRANSIENT_ERRNOS:
            return True
        status = _status(e)
        if status is not None:
            return status >= 500 or status in (408, 429)
        response = getattr(e, "response", None)
        if isinstance(response, dict) and response.get("Error", {}).get("Code") in _TRANSIENT_CODES:
            return True
        if any(c.__name__ in _TRANSIENT_NAMES for c in type(e).__mro__):
            return True
        e = e.__cause__ or e.__context__
        seen += 1
    return False


def reason(e: BaseException) -> str:
    """A short text of why a remote call failed."""
    if isinstance(e, FileNotFoundError):
        return "no such object"
    if isinstance(e, OSError) and e.strerror:
        return f"[Errno {e.errno}] {e.strerror}" if e.errno else e.strerror
    status = _status(e)
    text = str(e) or type(e).__name__
    return f"HTTP {status}: {text}" if status is not None and str(status) not in text else text


def _delay(attempt: int) -> float:
    base = settings().backoff * (2 ** attempt)
    return min(_BACKOFF_CAP, base * (0.5 + random.random()))  # (jitter: many threads do not retry in step)


def with_retries(call, url: str, what: str = "read file"):
    """``call()``, tried again on transient errors; a failure raises OSError naming ``url``
    (FileNotFoundError when the object does not exist)."""
    retries = settings().retries
    for attempt in range(retries + 1):
        try:
            return call()
        except StorageUnavailableError:
            raise
        except Exception as e:  # noqa: BLE001 - drivers raise aiohttp/botocore errors, not only OSError
            if attempt < retries and is_transient(e):
                time.sleep(_delay(attempt))
                continue
            tried = f" (after {attempt + 1} attempts)" if attempt else ""
            cls = FileNotFoundError if isinstance(e, FileNotFoundError) else OSError
            raise cls(f"cannot {what} {url!r}: {reason(e)}{tried}") from e
    raise AssertionError("unreachable")


# --- the local cache ---------------------------------------------------------------------------

_download_locks: dict[str, threading.Lock] = {}
_download_lock = threading.Lock()


def _cache_path(url: str) -> str:
    digest = hashlib.sha256(url.encode("utf-8", "surrogateescape")).hexdigest()
    name = url.rstrip("/").rsplit("/", 1)[-1][-80:]  # (a readable tail for whoever looks in the folder)
    return os.path.join(settings().cache_dir, digest[:2], f"{digest[:32]}-{name}")


def _cached_copy(url: str, fs, path: str) -> str:
    """The local copy of ``url`` under the cache folder, downloaded whole on first use."""
    local = _cache_path(url)
    if os.path.exists(local):
        return local
    with _download_lock:
        lock = _download_locks.setdefault(local, threading.Lock())
    with lock:  # one download per object, however many threads ask for it
        if not os.path.exists(local):
            os.makedirs(os.path.dirname(local), exist_ok=True)
            tmp = f"{local}.{os.getpid()}.{threading.get_ident()}.part"
            try:
                # (streamed to disk: a shard of gigabytes never sits in memory whole)
                with_retries(lambda: fs.get_file(path, tmp), url)
                os.replace(tmp, local)  # (readers of this or another process never see half a file)
            finally:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
    return local


# --- reads -------------------------------------------------------------------------------------

_windows_lock = threading.Lock()
_windows: OrderedDict = OrderedDict()  # url -> (start, bytes): the readahead window of each object
_last_end: dict[str, int] = {}  # url -> where its last ranged read ended (sequential detection)


def _from_window(url: str, offset: int, size: int) -> bytes | None:
    with _windows_lock:
        window = _windows.get(url)
        if window is None:
            return None
        start, data = window
        if start <= offset and offset + size <= start + len(data):
            _windows.move_to_end(url)
            _last_end[url] = offset + size
            return data[offset - start:offset - start + size]
        return None


def _keep_window(url: str, start: int, data: bytes) -> None:
    with _windows_lock:
        _windows[url] = (start, data)
        _windows.move_to_end(url)
        total = sum(len(d) for _, d in _windows.values())
        while total > _READAHEAD_TOTAL and len(_windows) > 1:
            _, (_, old) = _windows.popitem(last=False)
            total -= len(old)


def _ranged(url: str, fs, path: str, offset: int, size: int) -> bytes:
    hit = _from_window(url, offset, size)
    if hit is not None:
        return hit
    readahead = settings().readahead
    with _windows_lock:
        sequential = _last_end.get(url) == offset
        _last_end[url] = offset + size
        if len(_last_end) > 4096:  # (forget old objects: one entry per shard read, not per sample)
            _last_end.pop(next(iter(_last_end)))
    want = max(size, readahead) if sequential and size < readahead else size
    data = with_retries(lambda: fs.cat_file(path, start=offset, end=offset + want), url)
    if len(data) > want:
        # A server that ignores Range (python's http.server does) sends the whole object.
        data = data[offset:offset + want]
    if want > size and len(data) > size:
        _keep_window(url, offset, data)
        return data[:size]
    return data


def read(url: str, offset: int = 0, size: int | None = None) -> bytes:
    """``size`` bytes of ``url`` from ``offset`` (to its end when None), with retries, readahead
    and the local cache; OSError naming the URL when the read fails."""
    fs, path = filesystem(url)
    if settings().cache_dir:
        local = _cached_copy(url, fs, path)
        with open(local, "rb", buffering=0) as f:
            f.seek(offset)
            data = f.read() if size is None else f.read(size)
    elif size is None:
        data = with_retries(lambda: fs.cat_file(path, start=offset or None), url)
    elif size == 0:
        return b""
    else:
        data = _ranged(url, fs, path, offset, size)
    if size is not None and len(data) != size:
        raise OSError(f"cannot read file {url!r}: {size} bytes wanted at offset {offset}, "
                      f"the object ends after {offset + len(data)}")
    return data


def read_many(urls: list[str]) -> list:
    """The whole contents of each URL, fetched concurrently: a list of bytes, or an OSError
    naming the URL where a read failed (after retries)."""
    out: list = [None] * len(urls)

    def one(i):
        try:
            out[i] = read(urls[i])
        except OSError as e:
            out[i] = e

    if settings().cache_dir or len(urls) < 2:
        missing = [i for i, u in enumerate(urls) if settings().cache_dir and not os.path.exists(_cache_path(u))]
        if len(missing) > 1:  # downloads into the cache, side by side
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(min(16, len(missing)), thread_name_prefix="stoker-cache") as pool:
                list(pool.map(one, missing))
        for i in range(len(urls)):
            if out[i] is None:
                one(i)
        return out
    groups: dict[int, tuple] = {}  # id(fs) -> (fs, [positions], [paths])
    for i, u in enumerate(urls):
        fs, path = filesystem(u)
        groups.setdefault(id(fs), (fs, [], []))
        groups[id(fs)][1].append(i)
        groups[id(fs)][2].append(path)
    for fs, positions, paths in groups.values():
        todo = list(range(len(paths)))
        for attempt in range(settings().retries + 1):
            try:
                got = fs.cat_ranges([paths[k] for k in todo], None, None, on_error="return")
            except Exception as e:  # noqa: BLE001 - the whole call failed (the loop, the session)
                got = [e] * len(todo)
            again = []
            for k, value in zip(todo, got):
                if not isinstance(value, BaseException):
                    out[positions[k]] = value
                elif attempt < settings().retries and is_transient(value):
                    again.append(k)
                else:
                    tried = f" (after {attempt + 1} attempts)" if attempt else ""
                    cls = FileNotFoundError if isinstance(value, FileNotFoundError) else OSError
                    err = cls(f"cannot read file {urls[positions[k]]!r}: {reason(value)}{tried}")
                    err.__cause__ = value
                    out[positions[k]] = err
            if not again:
                break
            todo = again
            time.sleep(_delay(attempt))
    return out


def size_of(url: str) -> int:
    """Size of the object in bytes."""
    fs, path = filesystem(url)
    info = with_retries(lambda: fs.info(path), url, "read file")
    if info.get("type") == "directory":
        raise IsADirectoryError(f"cannot read file {url!r}: is a directory")
    return int(info["size"])


def exists(url: str) -> bool:
    """Whether an object or a prefix is there (False also when the lookup keeps failing)."""
    fs, path = filesystem(url)
    try:
        return bool(with_retries(lambda: fs.exists(path), url, "look up"))
    except OSError:
        return False


def list_dir(url: str) -> list[tuple[str, bool]]:
    """(name, is a folder) of the entries directly under ``url``. FileNotFoundError when there is
    nothing there, NotADirectoryError when ``url`` is an object."""
    fs, path = filesystem(url)
    own = path.rstrip("/")

    def listing():
        fs.invalidate_cache(path)  # (a listing at build must see what was uploaded since the last one)
        return fs.ls(path, detail=True)

    entries = with_retries(listing, url, "list")
    out = []
    for e in entries:
        name = e["name"].rstrip("/")
        if name == own:  # the object itself, or S3's empty marker object of the folder
            if e.get("type") != "directory" and len(entries) == 1:
                raise NotADirectoryError(f"cannot list {url!r}: it is an object, not a folder")
            continue
        out.append((name.rsplit("/", 1)[-1], e.get("type") == "directory"))
    return out


def isdir(url: str) -> bool:
    """Whether ``url`` is a prefix with objects under it (a folder)."""
    fs, path = filesystem(url)
    try:
        return bool(with_retries(lambda: fs.isdir(path), url, "look up"))
    except OSError:
        return False


def walk(url: str):
    """``(folder URL, sub-folder names, file names)`` for ``url`` and every folder below it."""
    pending = [url.rstrip("/")]
    while pending:
        here = pending.pop(0)
        entries = list_dir(here)
        dirs = sorted(n for n, d in entries if d)
        yield here, dirs, sorted(n for n, d in entries if not d)
        pending[:0] = [f"{here}/{d}" for d in dirs]
