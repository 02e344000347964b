"""Shared checks of the record readers (coco, caffe, caffe2, mxnet) against DALI's CPU readers:
the same reader with the same arguments, batch after batch, across epochs and shards."""

from __future__ import annotations

import numpy as np
from oracle import lookup, pipeline


def make_pipe(lib: str, reader: str, batch_size: int, **kwargs):
    """A built pipeline of one reader (named "R"), giving all its outputs (tests/oracle.py:
    DALI on one thread, stoker on two)."""

    def body(fn, types):
        out = lookup(fn, reader)(name="R", **kwargs)
        return tuple(out) if isinstance(out, (list, tuple)) else out

    return pipeline(lib, body, batch_size, seed=11)


def read(pipe, iterations: int, layouts: list | None = None) -> list:
    """Per batch, per sample: (source_info of output 0, [arrays of every output]); the outputs'
    layouts are appended to ``layouts`` when given."""
    batches = []
    for _ in range(iterations):
        outs = pipe.run()
        outs = outs if isinstance(outs, (list, tuple)) else (outs,)
        if layouts is not None and not layouts:
            layouts.extend(o.layout() for o in outs)
        batches.append([(outs[0][i].source_info(), [np.array(o.at(i)) for o in outs]) for i in range(len(outs[0]))])
    return batches


def assert_same_batches(ours: list, theirs: list, what: str = "") -> None:
    assert len(ours) == len(theirs)
    for b, (x, y) in enumerate(zip(ours, theirs)):
        # DALI names the source on the image output only (an empty name elsewhere); stoker on every output
        assert [s if t else "" for (s, _), (t, _) in zip(x, y)] == [t for t, _ in y], f"{what} batch {b}: sources"
        for i, ((_, xs), (_, ys)) in enumerate(zip(x, y)):
            assert len(xs) == len(ys), f"{what} batch {b} sample {i}: {len(xs)} outputs, DALI {len(ys)}"
            for k, (a, d) in enumerate(zip(xs, ys)):
                where = f"{what} batch {b} sample {i} output {k}"
                assert a.dtype == d.dtype and a.shape == d.shape, \
                    f"{where}: {a.dtype}{a.shape}, DALI {d.dtype}{d.shape}"
                np.testing.assert_array_equal(a, d, err_msg=where)


def check_against_dali(reader: str, batch_size: int, iterations: int, **kwargs) -> list:
    """stoker's batches and reader_meta equal DALI's; returns stoker's batches."""
    ours = make_pipe("stoker", reader, batch_size, **kwargs)
    theirs = make_pipe("dali", reader, batch_size, **kwargs)
    assert ours.reader_meta("R") == theirs.reader_meta("R"), kwargs
    our_layouts, their_layouts = [], []
    a, b = read(ours, iterations, our_layouts), read(theirs, iterations, their_layouts)
    assert our_layouts == their_layouts, f"{reader} {kwargs}: layouts"
    assert_same_batches(a, b, f"{reader} {kwargs}")
    ours.close()
    return a


SHARD_CASES = [(sid, pad, stick) for sid in range(3) for pad in (False, True) for stick in (False, True)]


def check_shards_against_dali(reader: str, n: int, batch_size: int = 4, **kwargs) -> None:
    """num_shards=3 with every shard_id, pad_last_batch and stick_to_shard: three passes and more."""
    iterations = 3 * -(-n // batch_size) + 2
    for sid, pad, stick in SHARD_CASES:
        check_against_dali(reader, batch_size, iterations, num_shards=3, shard_id=sid, pad_last_batch=pad,
                           stick_to_shard=stick, **kwargs)


def check_random_shuffle_covers_shards(reader: str, n: int, **kwargs) -> None:
    """With random_shuffle, each pass over a stuck shard reads each of its samples exactly once,
    and the order changes between passes (batch size 1, so no padding is involved)."""
    for sid in range(3):
        plain = make_pipe("stoker", reader, 1, num_shards=3, shard_id=sid, stick_to_shard=True, **kwargs)
        size = plain.reader_meta("R")["epoch_size"]
        shard = n * (sid + 1) // 3 - n * sid // 3
        expected = sorted(s for batch in read(plain, shard) for s, _ in batch)
        shuffled = make_pipe("stoker", reader, 1, num_shards=3, shard_id=sid, stick_to_shard=True,
                             random_shuffle=True, **kwargs)
        passes = [[s for batch in read(shuffled, shard) for s, _ in batch] for _ in range(3)]
        assert size == n
        for p in passes:
            assert sorted(p) == expected
        assert len({tuple(p) for p in passes}) > 1 or shard < 3
        plain.close()
        shuffled.close()
