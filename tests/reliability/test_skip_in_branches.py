"""on_error="skip"/"substitute" after a conditional has split the batch: a sample failing inside a
branch (or after the merge) is dropped from the whole batch and from every branch, the batch is
refilled, every good file still comes exactly once per epoch, and the other samples keep their
values (branch taken, decode, flip)."""

from __future__ import annotations

import collections
import os

import cv2
import numpy as np
import pytest
from reliability_images import jpeg_bytes, photo

import stoker
import stoker.fn as fn

pytestmark = pytest.mark.timeout(60)
GOOD = 10


@pytest.fixture
def files(tmp_path):
    """10 good JPEGs of distinct sizes (so each output names its file) and 3 corrupt ones, mixed."""
    d = tmp_path / "c"
    d.mkdir()
    for i in range(GOOD):
        (d / f"f{i:02d}_good.jpg").write_bytes(jpeg_bytes(photo(20 + i, 30 + i, seed=i)))
    for i in (2, 5, 9):
        (d / f"f{i:02d}_zbad.jpg").write_bytes(b"\xff\xd8 not really a jpeg")
    return str(tmp_path)


def _reference(path: str) -> np.ndarray:
    return cv2.cvtColor(cv2.imread(path), cv2.COLOR_BGR2RGB)


def _pipeline(root, where, policy="skip", threads=2):
    @stoker.pipeline_def(batch_size=4, num_threads=threads, device_id=None, seed=11, enable_conditionals=True,
                         on_error=policy)
    def pipe():
        jpegs, labels = fn.readers.file(file_root=root, name="r")
        flip = fn.random.coin_flip(probability=0.5)
        if where == "branch":  # the decoder runs in both branches, on their samples only
            if flip:
                img = fn.flip(fn.decoders.image(jpegs), horizontal=1)
            else:
                img = fn.decoders.image(jpegs)
        else:  # "after": the branches pass the bytes on, the decoder runs after the merge
            if flip:
                enc = jpegs
            else:
                enc = jpegs
            img = fn.flip(fn.decoders.image(enc), horizontal=flip)
        return img, flip, fn.get_property(jpegs, key="source_info")

    p = pipe()
    p.build()
    return p


@pytest.mark.parametrize("where", ["branch", "after"])
def test_failures_in_a_branch_are_skipped_and_refilled(files, where):
    p = _pipeline(files, where)
    seen = collections.Counter()
    flips = set()
    for _ in range(3 * 10 // 4):  # three epochs of 10 good files (readers.file pads nothing here)
        img, flip, src = p.run()
        assert len(img) == len(flip) == len(src) == 4
        for im, f, s in zip(img, flip, src):
            name = bytes(np.array(s)).decode()
            assert "zbad" not in name
            want = _reference(os.path.join(files, name))
            flips.add(int(np.array(f)))
            np.testing.assert_array_equal(np.array(im), want[:, ::-1] if int(np.array(f)) else want)
            seen[name] += 1
    assert flips == {0, 1}  # both branches ran
    assert len(seen) == GOOD and max(seen.values()) - min(seen.values()) <= 1
    report = p.error_report()
    assert report and {r["action"] for r in report} == {"skipped"}
    assert all("zbad" in r["source"] for r in report)
    p.close()


def test_same_batches_with_any_thread_count(files):
    def batches(threads):
        p = _pipeline(files, "branch", threads=threads)
        out = [tuple(np.array(x).tobytes() for x in p.run()[0]) for _ in range(5)]
        p.close()
        return out

    assert batches(1) == batches(3)


def test_substitute_in_a_branch_keeps_the_batch_full(files):
    p = _pipeline(files, "branch", policy="substitute")
    for _ in range(4):
        img, flip, src = p.run()
        assert len(img) == 4
        for s in src:
            assert "zbad" not in bytes(np.array(s)).decode()
    assert {r["action"] for r in p.error_report()} == {"substituted"}
    p.close()
