"""fn.readers.webdataset: samples, extension sets, missing members, dtypes, order, shards,
padding, shuffling, checkpoints and damaged archives.

The archives are written by the independent ``webdataset`` package (``TarWriter``, pax
headers) and indexed by DALI's ``wds2idx`` as well as by stoker. DALI's CPU reader is the
oracle for values, order, shard boundaries, padding, rotation, per-output source_info and
reader_meta.
"""

import json

import numpy as np
import pytest
from oracle import default_threads, libs, to_dali

from stoker import fn, pipeline_def, types
from stoker.errors import OperatorError, PipelineBuildError

wds = pytest.importorskip("webdataset")

COUNTS = [4, 3, 5]


def sample(shard: int, j: int) -> dict:
    """Sample j of shard ``shard``: an image (jpg, every third one png), a class (two int16 values)
    missing from every fifth sample, a json member and a "seg.png" member in some."""
    n = 10 * shard + j
    s = {"__key__": f"part{shard}/s{j:03d}", ("png" if j % 3 == 2 else "jpg"): bytes([shard, j]) + b"\xcd" * (n % 5)}
    if n % 5 != 4:
        s["cls"] = np.array([n, -n], np.int16).tobytes()
    if n % 2:
        s["json"] = json.dumps({"n": n}).encode()
    if n % 3 == 0:  # an extension with a dot: "png" must not take it
        s["seg.png"] = bytes([n]) * 3
    return s


@pytest.fixture
def shards(tmp_path):
    """(archives, stoker's indexes, wds2idx's indexes)."""
    from stoker._cli_index import webdataset_index

    paths, ours, theirs = [], [], []
    for f, count in enumerate(COUNTS):
        path = str(tmp_path / f"shard-{f}.tar")
        with wds.TarWriter(path) as w:
            for j in range(count):
                w.write(sample(f, j))
        paths.append(path)
        ours.append(str(tmp_path / f"shard-{f}.stoker.idx"))
        with open(ours[-1], "w") as out:
            out.write(webdataset_index(path))
        theirs.append(_wds2idx(path, str(tmp_path / f"shard-{f}.wds.idx")))
    return paths, ours, theirs


def _wds2idx(path, index):
    wds2idx = pytest.importorskip("wds2idx")  # DALI's indexer, installed with DALI
    creator = wds2idx.IndexCreator(path, index, verbose=False)
    creator.create_index()
    creator.close()
    return index


def make(lib, batch_size, checkpoint=None, seed=7, **args):
    fn_, deco, _ = libs(lib)
    if lib == "dali":
        extra = {}
        if "dtypes" in args:
            args["dtypes"] = [to_dali(t) for t in args["dtypes"]]
    else:
        extra = dict(enable_checkpointing=True, checkpoint=checkpoint)

    @deco(batch_size=batch_size, num_threads=default_threads(lib), device_id=None, seed=seed, **extra)
    def p():
        out = fn_.readers.webdataset(name="R", **args)
        return tuple(out) if isinstance(out, (list, tuple)) else out

    pipe = p()
    pipe.build()
    return pipe


def read(pipe, iterations):
    """Per batch: per sample, each output's (values, dtype, source_info)."""
    out = []
    for _ in range(iterations):
        outs = pipe.run()
        out.append([tuple((np.array(o.at(i)).tolist(), str(o.at(i).dtype), o[i].source_info()) for o in outs)
                    for i in range(len(outs[0]))])
    return out


# --- DALI as the oracle ------------------------------------------------------------------------

@pytest.mark.oracle
@pytest.mark.parametrize("bs", [1, 4, 5])
@pytest.mark.parametrize("pad,stick", [(False, False), (True, False), (False, True), (True, True)])
@pytest.mark.parametrize("index", ["none", "stoker", "wds2idx"])
def test_order_shards_padding_and_meta_match_dali(shards, bs, pad, stick, index):
    paths, ours_idx, wds_idx = shards
    n = sum(COUNTS)
    ours_index = {"none": None, "stoker": ours_idx, "wds2idx": wds_idx}[index]
    for sid in range(3):
        args = dict(paths=paths, ext=["jpg;png", "cls"], num_shards=3, shard_id=sid, pad_last_batch=pad,
                    stick_to_shard=stick)
        ours, theirs = make("stoker", bs, index_paths=ours_index, **args), make("dali", bs, index_paths=wds_idx, **args)
        iterations = 3 * (-(-n // bs)) + 2  # past three passes, so the shards rotate
        assert ours.reader_meta("R") == theirs.reader_meta("R")
        assert read(ours, iterations) == read(theirs, iterations), args


@pytest.mark.oracle
@pytest.mark.parametrize("case", ["skip", "empty", "alternatives_in_other_order", "case_insensitive",
                                  "case_sensitive_miss", "dtypes", "same_ext_twice", "dotted_ext"])
def test_extension_sets_missing_members_and_dtypes_match_dali(shards, case):
    paths, _, wds_idx = shards
    args = {
        "skip": dict(ext=["jpg;png", "cls"], missing_component_behavior="skip"),
        "empty": dict(ext=["jpg", "cls", "json"], missing_component_behavior="empty"),
        "alternatives_in_other_order": dict(ext=["png;jpg;json"]),
        "case_insensitive": dict(ext=["JPG;Png", "CLS"], case_sensitive_extensions=False),
        "case_sensitive_miss": dict(ext=["JPG", "cls"]),
        "dtypes": dict(ext=["jpg;png", "cls"], dtypes=[types.UINT8, types.INT16]),
        "same_ext_twice": dict(ext=["cls", "cls;json"]),
        "dotted_ext": dict(ext=["seg.png;jpg", "png"]),
    }[case]
    for index in (None, wds_idx):
        ours = make("stoker", 3, paths=paths, index_paths=index, **args)
        theirs = make("dali", 3, paths=paths, index_paths=wds_idx, **args)
        n = theirs.reader_meta("R")["epoch_size"]
        assert ours.reader_meta("R") == theirs.reader_meta("R")
        assert read(ours, n) == read(theirs, n), (case, index)


def test_outputs_are_the_members_written(shards):
    paths, _, _ = shards
    pipe = make("stoker", sum(COUNTS), paths=paths, ext=["jpg;png", "cls", "json"], dtypes=[types.UINT8, types.INT16,
                                                                                          types.UINT8])
    image, cls, js = pipe.run()
    written = [(f, sample(f, j)) for f, c in enumerate(COUNTS) for j in range(c)]
    for k, (f, s) in enumerate(written):
        member = s["__key__"] + (".png" if "png" in s else ".jpg")
        assert bytes(image.at(k)) == s.get("jpg", s.get("png"))
        assert cls.at(k).dtype == np.int16 and cls.at(k).tobytes() == s.get("cls", b"")
        assert bytes(js.at(k)) == s.get("json", b"")
        path, offset, name = image[k].source_info().split(":")
        assert (path, name) == (paths[f], member)
        assert open(path, "rb").read()[int(offset):int(offset) + image.at(k).size] == bytes(image.at(k))
        assert (js[k].source_info() == "") == ("json" not in s)


# --- shuffling and checkpoints --------------------------------------------------------------------

def _shuffle_args(shuffle):
    both = shuffle == "both"  # DALI's container readers take both together
    return {"random_shuffle": both or shuffle == "random_shuffle",
            "shuffle_after_epoch": both or shuffle == "shuffle_after_epoch"}


@pytest.mark.parametrize("shuffle", ["random_shuffle", "shuffle_after_epoch", "both"])
def test_shuffled_passes_cover_each_shard_exactly_once(shards, shuffle):
    paths, _, _ = shards
    n, ns = sum(COUNTS), 3
    everything = sorted(s.get("jpg", s.get("png")) for f, c in enumerate(COUNTS) for j in range(c)
                        for s in [sample(f, j)])
    per_pass = {k: [] for k in range(3)}
    for sid in range(ns):
        pipe = make("stoker", 1, paths=paths, ext=["jpg;png"], num_shards=ns, shard_id=sid, **_shuffle_args(shuffle))
        for k in range(3):
            shard = (sid + k) % ns
            size = n * (shard + 1) // ns - n * shard // ns
            got = [bytes(pipe.run()[0].at(0)) for _ in range(size)]
            assert len(set(got)) == size, f"pass {k} of shard {shard} repeats a sample"
            per_pass[k] += got
    for k in range(3):
        assert sorted(per_pass[k]) == everything, f"pass {k}"


def test_checkpoint_resumes_exactly(shards):
    paths, ours_idx, _ = shards
    args = dict(paths=paths, index_paths=ours_idx, ext=["jpg;png", "cls"], random_shuffle=True, num_shards=2,
                shard_id=0, pad_last_batch=True)
    first = make("stoker", 4, **args)
    read(first, 3)
    cp = first.checkpoint()
    expected = read(first, 6)
    assert set(json.loads(cp)["sources"]["R"]) == {"epoch", "position", "shard"}
    assert read(make("stoker", 4, checkpoint=cp, **args), 6) == expected


# --- errors and damaged archives ----------------------------------------------------------------

def test_truncated_archive_skips_and_reports_the_sample(shards):
    paths, ours_idx, _ = shards
    data = open(paths[2], "rb").read()
    last = sample(2, COUNTS[2] - 1)
    cut = data.index(last["jpg"] if "jpg" in last else last["png"])  # the last sample's image starts here
    open(paths[2], "wb").write(data[:cut + 1])

    @pipeline_def(batch_size=4, num_threads=2, device_id=None, on_error="skip")
    def p():
        return tuple(fn.readers.webdataset(paths=paths, index_paths=ours_idx, ext=["jpg;png", "cls"]))

    pipe = p()
    pipe.build()
    got = [bytes(b.at(i)) for _ in range(3) for b in [pipe.run()[0]] for i in range(len(b))]
    expected = [s.get("jpg", s.get("png")) for f, c in enumerate(COUNTS) for j in range(c)
                for s in [sample(f, j)] if (f, j) != (2, COUNTS[2] - 1)]
    assert got[:len(expected)] == expected
    (report,) = pipe.error_report()
    assert report["source"].startswith(f"{paths[2]}:") and "part2/s004" in report["source"]

    @pipeline_def(batch_size=12, num_threads=1, device_id=None)
    def q():
        return fn.readers.webdataset(paths=paths, index_paths=ours_idx, ext=["jpg;png"], name="W")

    strict = q()
    strict.build()
    with pytest.raises(OperatorError) as e:
        strict.run()
    assert str(e.value).startswith("[W]") and paths[2] in str(e.value)


@pytest.mark.parametrize("case", ["error", "dtypes", "index_count", "index_line", "not_tar", "behavior", "ext"])
def test_errors_name_the_argument_and_the_archive(shards, tmp_path, case):
    paths, ours_idx, _ = shards
    (tmp_path / "bad.idx").write_text("v1.2 1\njpg 10 zz a.jpg\n")
    (tmp_path / "junk.tar").write_bytes(b"not a tar archive" * 64)
    base = dict(paths=paths, ext=["jpg;png", "cls"])
    args, arg, words = {
        "error": (dict(missing_component_behavior="error"), "missing_component_behavior", "'part2/s004' of"),
        "dtypes": (dict(ext=["jpg"], dtypes=[types.INT32]), "dtypes", "shard-0.tar"),
        "index_count": (dict(index_paths=ours_idx[:1]), "index_paths", "1 entries for 3 archives"),
        "index_line": (dict(index_paths=[str(tmp_path / "bad.idx")] * 3), "index_paths", "bad.idx:2"),
        "not_tar": (dict(paths=[str(tmp_path / "junk.tar")]), "paths", "junk.tar"),
        "behavior": (dict(missing_component_behavior="drop"), "missing_component_behavior", "'drop'"),
        "ext": (dict(ext=[]), "ext", "is empty"),
    }[case]
    with pytest.raises(PipelineBuildError, match="readers.webdataset") as e:
        make("stoker", 2, **{**base, **args})
    assert f"argument '{arg}'" in str(e.value) and words in str(e.value)
