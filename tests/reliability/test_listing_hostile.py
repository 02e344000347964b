"""Listing a folder tree never fails on one bad entry (issue 17, item 4).

Symbolic link loops, dangling links and folders that cannot be listed are listed like files
that cannot be read: ``on_error="skip"`` drops them and reports them with the reason, like a
corrupt file; ``"raise"`` stops with an OperatorError naming the entry. The labels of the other
classes stay those of an intact tree.
"""

from __future__ import annotations

import logging
import os

import cv2
import numpy as np
import pytest

import stoker.fn as fn
from stoker import pipeline_def
from stoker.errors import OperatorError, PipelineBuildError

pytestmark = pytest.mark.timeout(120)


def _png(value: int) -> bytes:
    ok, buf = cv2.imencode(".png", np.full((4, 5, 3), value, np.uint8))
    assert ok
    return buf.tobytes()


@pytest.fixture
def tree(tmp_path):
    """Classes a, b, c with two good images each (pixel value = 10 * label + k)."""
    root = tmp_path / "root"
    for label, cls in enumerate("abc"):
        (root / cls).mkdir(parents=True)
        for k in range(2):
            (root / cls / f"{k}.png").write_bytes(_png(10 * label + k))
    return root


def _pipe(root, on_error, batch_size):
    @pipeline_def(batch_size=batch_size, num_threads=2, device_id=None, seed=1, on_error=on_error,
                  exec_pipelined=False, exec_async=False)
    def p():
        jpegs, labels = fn.readers.file(file_root=str(root), name="R")
        return fn.decoders.image(jpegs), labels

    pipe = p()
    pipe.build()
    return pipe


def _first_epoch(root, good: int):
    """The batch of ``good`` samples a skipping pipeline gives first (exactly the good files of
    the first pass: the bad ones are refilled from the same pass), and the error report of the
    first pass (a second batch reads the rest of it)."""
    pipe = _pipe(root, "skip", good)
    try:
        images, labels = pipe.run()
        got = sorted((images.source_info()[i], int(np.asarray(labels[i])[0]), int(np.asarray(images[i])[0, 0, 0]))
                     for i in range(len(labels)))
        pipe.run()
        return got, [r for r in pipe.error_report() if r["epoch"] == 0]
    finally:
        pipe.close()


INTACT = [("a/0.png", 0, 0), ("a/1.png", 0, 1), ("b/0.png", 1, 10), ("b/1.png", 1, 11), ("c/0.png", 2, 20),
          ("c/1.png", 2, 21)]


def test_symlink_loop_in_a_class_folder_is_a_bad_sample(tree, caplog):
    os.symlink("loop2.png", tree / "b" / "loop1.png")
    os.symlink("loop1.png", tree / "b" / "loop2.png")
    with caplog.at_level(logging.WARNING, logger="stoker"):
        got, report = _first_epoch(tree, 6)
    assert got == INTACT
    assert sorted(r["source"] for r in report) == ["b/loop1.png", "b/loop2.png"]
    assert all("Too many levels of symbolic links" in r["reason"] and r["action"] == "skipped" for r in report)
    assert any("cannot be read" in m and "b/loop1.png" in m for m in caplog.messages)  # said once at listing

    pipe = _pipe(tree, "raise", 8)
    with pytest.raises(OperatorError, match="symbolic links") as info:
        pipe.run()
    assert info.value.source == "b/loop1.png" and info.value.operator == "R"
    pipe.close()


def test_dangling_link_is_a_bad_sample(tree):
    os.symlink(str(tree / "gone.png"), tree / "a" / "2.png")
    got, report = _first_epoch(tree, 6)
    assert got == INTACT
    assert [(r["source"], r["action"]) for r in report] == [("a/2.png", "skipped")]
    assert "dangling symbolic link" in report[0]["reason"] and "gone.png" in report[0]["reason"]


def test_a_link_to_a_folder_inside_a_class_is_not_a_file(tree):
    os.symlink(str(tree / "a"), tree / "a" / "sub.png")  # a cycle, but a folder: not listed, as before
    got, report = _first_epoch(tree, 6)
    assert got == INTACT and report == []


def test_class_folder_that_is_a_link_loop_keeps_the_other_labels(tree):
    os.symlink("bb", tree / "b2")
    os.symlink("b2", tree / "bb")
    got, report = _first_epoch(tree, 6)
    # b2 and bb rank between b and c as classes 2 and 3: c keeps the label of an intact tree + 2,
    # exactly as if the two links were readable (empty) class folders
    assert [(s, lab) for s, lab, _ in got] == [(s, lab + 2 * (lab == 2)) for s, lab, _ in INTACT]
    assert sorted(r["source"] for r in report) == ["b2", "bb"]
    assert all("class folder cannot be read" in r["reason"] for r in report)


def test_unreadable_class_folder_is_reported_under_skip_and_named_under_raise(tree, monkeypatch):
    real = os.scandir
    locked = str(tree / "b")

    def scandir(path="."):
        if os.fspath(path) == locked:  # (the tests may run as root, where chmod 000 locks nothing)
            raise PermissionError(13, "Permission denied", locked)
        return real(path)

    monkeypatch.setattr(os, "scandir", scandir)
    got, report = _first_epoch(tree, 4)
    assert got == [x for x in INTACT if not x[0].startswith("b/")]
    assert [r["source"] for r in report] == ["b"]
    assert "cannot be listed" in report[0]["reason"] and "Permission denied" in report[0]["reason"]

    pipe = _pipe(tree, "raise", 8)
    with pytest.raises(OperatorError, match="Permission denied") as info:
        pipe.run()
    assert info.value.source == "b"
    pipe.close()


def test_broken_entries_fail_alike_through_the_io_helper_process(tree, stoker_environ):
    """The I/O helper process reads a broken class folder's path as it stands (a dangling link):
    the reader still reports the reason found at listing."""
    stoker_environ(STOKER_READER_PROCESS="1")
    os.symlink(str(tree / "nowhere"), tree / "bb")
    os.symlink("loop.png", tree / "c" / "loop.png")
    got, report = _first_epoch(tree, 6)
    assert [(s, lab) for s, lab, _ in got] == [(s, lab + (lab == 2)) for s, lab, _ in INTACT]
    reasons = {r["source"]: r["reason"] for r in report}
    assert set(reasons) == {"bb", "c/loop.png"}
    assert "dangling symbolic link" in reasons["bb"] and "symbolic links" in reasons["c/loop.png"]


def test_file_root_that_cannot_be_listed_names_the_argument(tree, monkeypatch):
    real = os.scandir

    def scandir(path="."):
        if os.fspath(path) == str(tree):
            raise PermissionError(13, "Permission denied", str(tree))
        return real(path)

    monkeypatch.setattr(os, "scandir", scandir)
    with pytest.raises(PipelineBuildError, match=r"readers.file 'R': argument 'file_root': cannot list .*Permission"):
        _pipe(tree, "skip", 2)
