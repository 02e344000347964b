"""fn.readers.file: listing, order, sharding, padding, shuffling, checkpoints and errors.

DALI's readers.file (CPU) is the oracle for everything stoker promises to match
exactly: listing order, labels, source_info, shard boundaries, padding, shard
rotation and reader_meta(). Shuffling differs on purpose, so it is checked
through properties (permutations, exactly-once coverage, determinism).
"""

import itertools
import json
import os

import numpy as np
import pytest
from oracle import pipeline
from reader_helpers import sample_id, write_tree

import stoker
from stoker import fn, ops, pipeline_def
from stoker.errors import OperatorError, PipelineBuildError


def reader_pipe(lib, batch_size, **reader_args):
    """A built pipeline of ``lib`` whose outputs are readers.file's (named "R"): two threads for
    stoker, one for DALI (oracle.default_threads), seed 7."""
    return pipeline(lib, lambda f, t: f.readers.file(name="R", **reader_args), batch_size, seed=7)


def stoker_pipe(batch_size, **reader_args):
    return reader_pipe("stoker", batch_size, **reader_args)


def dali_pipe(batch_size, **reader_args):
    return reader_pipe("dali", batch_size, **reader_args)


def read(pipe, iterations):
    """(sample id, source_info, label) per sample, per batch."""
    out = []
    for _ in range(iterations):
        jpegs, labels = pipe.run()
        out.append([(sample_id(jpegs.at(i)), jpegs[i].source_info(), int(labels.at(i)[0]))
                    for i in range(len(jpegs))])
    return out


# --- DALI as the oracle ------------------------------------------------------------------------

ORDER_CASES = [(bs, ns, pad, stick) for bs, ns, pad, stick in
               itertools.product([1, 3, 4, 11], [1, 2, 3, 4], [False, True], [False, True])]


@pytest.mark.oracle
@pytest.mark.parametrize("bs,ns,pad,stick", ORDER_CASES)
def test_order_shards_padding_and_meta_match_dali(tree10, bs, ns, pad, stick):
    root, _ = tree10
    for sid in range(ns):
        args = dict(file_root=root, num_shards=ns, shard_id=sid, pad_last_batch=pad, stick_to_shard=stick)
        ours, theirs = stoker_pipe(bs, **args), dali_pipe(bs, **args)
        iterations = 3 * (-(-10 // bs)) + 4  # at least three passes over the data set, so shards rotate
        assert ours.reader_meta("R") == theirs.reader_meta("R")
        assert read(ours, iterations) == read(theirs, iterations), dict(bs=bs, **args)
        ours.close()


@pytest.mark.oracle
@pytest.mark.parametrize("variant", ["default", "case_sensitive", "txt_filter", "str_filter", "dir_filter",
                                     "dir_filter_case", "dir_filter_case_sensitive", "star"])
def test_listing_matches_dali(tmp_path, variant):
    root = str(tmp_path)
    files = ["b/z.jpg", "b/a.JPG", "b/f10.png", "b/f2.png", "a/sub/deep.jpg", "a/x.txt", "a/y.jpeg",
             "top.jpg", "B2/q.jpg", "a/aa.jpg", "ab/k.webp", "a/.hidden.jpg", "Ab/m.jpg"]
    for i, rel in enumerate(files):
        os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
        with open(os.path.join(root, rel), "wb") as f:
            f.write(bytes([i, i]))
    args = {"default": {}, "case_sensitive": {"case_sensitive_filter": True},
            "txt_filter": {"file_filters": ["*.txt", "*.PNG"]}, "str_filter": {"file_filters": "*.png"},
            "dir_filter": {"dir_filters": ["a*"]}, "dir_filter_case": {"dir_filters": ["A*", "b"]},
            "dir_filter_case_sensitive": {"dir_filters": ["A*"], "case_sensitive_filter": True},
            "star": {"file_filters": ["*"]}}[variant]
    ours, theirs = stoker_pipe(1, file_root=root, **args), dali_pipe(1, file_root=root, **args)
    n = theirs.reader_meta("R")["epoch_size"]
    assert ours.reader_meta("R")["epoch_size"] == n
    assert read(ours, n + 2) == read(theirs, n + 2)


@pytest.mark.oracle
def test_file_list_and_files_match_dali(tree10, tmp_path):
    root, paths = tree10
    listing = os.path.join(root, "list.txt")  # paths relative to the list's folder
    with open(listing, "w") as f:
        f.write(f"{paths[5]} 7\n\n{paths[0]}   3\n{paths[9]} 11\n")
    other = tmp_path / "elsewhere"
    other.mkdir()
    (other / "l.txt").write_text("f001.jpg 4\nf000.jpg 2\n")
    cases = [dict(file_list=str(listing)),
             dict(file_list=str(other / "l.txt"), file_root=os.path.join(root, "c1")),
             dict(files=paths[3:7], file_root=root),
             dict(files=[os.path.join(root, p) for p in paths[:3]], labels=[9, 8, 7])]
    for args in cases:
        ours, theirs = stoker_pipe(2, **args), dali_pipe(2, **args)
        assert ours.reader_meta("R") == theirs.reader_meta("R")
        assert read(ours, 5) == read(theirs, 5), args


# --- properties --------------------------------------------------------------------------------

def test_outputs_are_file_bytes_and_int32_labels(tree10):
    root, paths = tree10
    pipe = stoker_pipe(4, file_root=root)
    jpegs, labels = pipe.run()
    for i in range(4):
        with open(os.path.join(root, paths[i]), "rb") as f:
            np.testing.assert_array_equal(jpegs.at(i), np.frombuffer(f.read(), np.uint8))
        assert jpegs.at(i).dtype == np.uint8 and jpegs.at(i).ndim == 1
        assert labels.at(i).dtype == np.int32 and labels.at(i).shape == (1,)
        assert labels.at(i)[0] == int(paths[i][1])
        assert jpegs[i].source_info() == paths[i]
    assert pipe.epoch_size("R") == 10 and pipe.epoch_size() == {"R": 10}


def _epoch_streams(n, ns, bs, **args):
    """Per shard, per pass: the samples without padding (and check the padding is the last sample)."""
    tmp = args.pop("root")
    out = {}
    largest = -(-n // ns)
    batches = -(-largest // bs)
    for sid in range(ns):
        pipe = stoker_pipe(bs, file_root=tmp, num_shards=ns, shard_id=sid, pad_last_batch=True, **args)
        passes = []
        for _ in range(3):
            ids = [s for batch in read(pipe, batches) for s, _, _ in batch]
            shard = len(passes)  # pass k reads shard (sid + k) % ns
            lo, hi = (n * ((sid + shard) % ns)) // ns, (n * ((sid + shard) % ns + 1)) // ns
            real, pad = ids[:hi - lo], ids[hi - lo:]
            assert all(p == real[-1] for p in pad)
            passes.append(real)
        out[sid] = passes
        pipe.close()
    return out


@pytest.mark.parametrize("shuffle", [None, "random_shuffle", "shuffle_after_epoch"])
@pytest.mark.parametrize("n,ns,bs", [(10, 3, 4), (13, 4, 3), (7, 2, 5)])
def test_every_sample_exactly_once_across_shards_per_epoch(tmp_path, shuffle, n, ns, bs):
    root = str(tmp_path)
    counts = [n // 2, n - n // 2]
    write_tree(root, counts)
    everything = sorted(c * 1000 + i for c, k in enumerate(counts) for i in range(k))
    args = {shuffle: True} if shuffle else {}
    streams = _epoch_streams(n, ns, bs, root=root, **args)
    for k in range(3):
        union = [s for sid in range(ns) for s in streams[sid][k]]
        assert sorted(union) == everything, f"pass {k}"


def test_random_shuffle_is_a_seeded_permutation_per_epoch(tree10):
    root, _ = tree10

    def ids(seed, iterations=10):
        @pipeline_def(batch_size=2, num_threads=1, device_id=None, seed=seed)
        def p():
            return fn.readers.file(file_root=root, random_shuffle=True, initial_fill=3)

        pipe = p()
        pipe.build()
        return [sample_id(j.at(i)) for _ in range(iterations) for j in [pipe.run()[0]] for i in range(2)]

    a, b, c = ids(1), ids(1), ids(2)
    assert a == b
    assert a != c
    assert sorted(a[:10]) == sorted(a[10:20]) == sorted(c[:10])  # each epoch is a permutation
    assert a[:10] != a[10:20]  # and a new one each epoch
    assert a[:10] != sorted(a[:10])


def test_checkpoint_resumes_exactly_and_is_small(tree10):
    root, _ = tree10

    def make(checkpoint=None):
        @pipeline_def(batch_size=3, num_threads=2, device_id=None, seed=3, enable_checkpointing=True,
                      checkpoint=checkpoint)
        def p():
            return fn.readers.file(file_root=root, random_shuffle=True, num_shards=2, shard_id=1,
                                   pad_last_batch=True, name="R")

        pipe = p()
        pipe.build()
        return pipe

    first = make()
    read(first, 4)
    cp = first.checkpoint()
    expected = read(first, 6)
    state = json.loads(cp)
    assert len(cp) < 300 and set(state["sources"]["R"]) == {"epoch", "position", "shard"}
    resumed = make(cp)
    assert read(resumed, 6) == expected


def test_legacy_ops_api(tree10):
    root, paths = tree10

    class P(stoker.Pipeline):
        def __init__(self):
            super().__init__(batch_size=5, num_threads=1, device_id=None)
            self.reader = ops.FileReader(file_root=root, name="R")
            self.reader2 = ops.readers.File(file_root=root)

        def define_graph(self):
            jpegs, labels = self.reader()
            jpegs2, _ = self.reader2()
            return jpegs, labels, jpegs2

    pipe = P()
    pipe.build()
    jpegs, labels, jpegs2 = pipe.run()
    assert [jpegs[i].source_info() for i in range(5)] == paths[:5]
    assert [jpegs2[i].source_info() for i in range(5)] == paths[:5]
    assert pipe.reader_meta("R")["epoch_size"] == 10


# --- errors ------------------------------------------------------------------------------------

def test_missing_root_names_operator_argument_and_path(tmp_path):
    missing = str(tmp_path / "nope")
    with pytest.raises(PipelineBuildError) as e:
        stoker_pipe(2, file_root=missing)
    msg = str(e.value)
    assert "readers.file 'R'" in msg and "file_root" in msg and missing in msg


@pytest.mark.parametrize("case", ["empty", "no_match", "no_list", "labels", "shard", "both", "nothing"])
def test_build_errors(tmp_path, tree10, case):
    root, paths = tree10
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "cls").mkdir()
    args, arg, words = {
        "empty": (dict(file_root=str(tmp_path / "empty")), "file_root", "no files"),
        "no_match": (dict(file_root=root, file_filters=["*.xyz"]), "file_root", "*.xyz"),
        "no_list": (dict(file_list=str(tmp_path / "l.txt")), "file_list", "l.txt"),
        "labels": (dict(files=paths[:3], labels=[1, 2], file_root=root), "labels", "2 labels for 3 files"),
        "shard": (dict(file_root=root, num_shards=2, shard_id=2), "shard_id", "num_shards=2"),
        "both": (dict(file_root=root, files=paths[:1], file_list="x"), "files", "not both"),
        "nothing": ({}, "file_root", "required"),
    }[case]
    with pytest.raises(PipelineBuildError, match="readers.file") as e:
        stoker_pipe(2, **args)
    assert f"argument '{arg}'" in str(e.value) and words in str(e.value)


def test_bad_file_list_line_names_file_and_line(tmp_path, tree10):
    root, paths = tree10
    listing = tmp_path / "l.txt"
    listing.write_text(f"{paths[0]} 1\n{paths[1]}\n")
    with pytest.raises(PipelineBuildError, match=r"l.txt:2"):
        stoker_pipe(2, file_list=str(listing), file_root=root)


def test_unreadable_file_at_run_time_names_the_path(tree10):
    root, paths = tree10
    pipe = stoker_pipe(4, file_root=root)
    os.remove(os.path.join(root, paths[2]))
    with pytest.raises(OperatorError) as e:
        pipe.run()
    assert os.path.join(root, paths[2]) in str(e.value) and "R" in str(e.value)
    pipe.close()


def test_lazy_init_lists_on_first_use(tmp_path):
    root = str(tmp_path / "later")
    @pipeline_def(batch_size=2, num_threads=1, device_id=None)
    def p():
        return fn.readers.file(file_root=root, lazy_init=True, name="R")

    pipe = p()
    pipe.build()  # nothing listed yet: the folder does not exist at build time
    write_tree(root, [2, 1])
    assert pipe.reader_meta("R")["epoch_size"] == 3
    jpegs, _ = pipe.run()
    assert [sample_id(jpegs.at(i)) for i in range(2)] == [0, 1]


def test_checkpoint_of_another_shard_is_refused(tree10):
    root, _ = tree10

    def make(shard_id, checkpoint=None):
        @pipeline_def(batch_size=2, num_threads=1, device_id=None, enable_checkpointing=True, checkpoint=checkpoint)
        def p():
            return fn.readers.file(file_root=root, num_shards=2, shard_id=shard_id, name="R")

        pipe = p()
        pipe.build()
        return pipe

    first = make(1)
    read(first, 1)
    with pytest.raises(PipelineBuildError, match="another shard"):
        make(0, first.checkpoint())
