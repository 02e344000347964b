"""File names with control characters cannot forge log lines (issue 17, item 9).

Every name that reaches a log line, an error message or an error report goes through
``stoker.errors.printable``: unchanged unless it holds control characters, else escaped as
``repr`` writes it.
"""

from __future__ import annotations

import ast
import logging
import os

import cv2
import numpy as np
import pytest

import stoker.fn as fn
from stoker import pipeline_def
from stoker.errors import OperatorError, PipelineBuildError, printable

pytestmark = pytest.mark.timeout(120)
EVIL = "evil\nWARNING stoker: forged line\x1b[2J.png"


@pytest.mark.parametrize("name", ["a.jpg", "dir/file name.png", "café_日本.jpg", "n\u00a0b.png", ""])
def test_ordinary_names_are_unchanged(name):
    assert printable(name) == name


@pytest.mark.parametrize("name", ["a\nb", "a\rb", "tab\there", "esc\x1b[31m", "nul\x00", "del\x7f", "c1\x85",
                                  "ls\u2028x", "ps\u2029x", "rtl\u202egpj.exe", "zw\u200bx", "bom\ufeff",
                                  "surrogate\udcff"])
def test_names_with_control_characters_are_escaped_reversibly(name):
    out = printable(name)
    assert out == repr(name) and ast.literal_eval(out) == name
    assert "\n" not in out and "\x1b" not in out and out.isprintable()
    assert printable(out) == out  # escaping twice changes nothing


@pytest.fixture
def evil_tree(tmp_path):
    root = tmp_path / "root"
    (root / "c").mkdir(parents=True)
    for k in range(3):
        ok, buf = cv2.imencode(".png", np.full((2, 3, 3), k, np.uint8))
        (root / "c" / f"{k}.png").write_bytes(buf.tobytes())
    (root / "c" / EVIL).write_bytes(b"not an image")
    return root


def _pipe(root, on_error, batch_size=3, **reader):
    @pipeline_def(batch_size=batch_size, num_threads=1, device_id=None, seed=1, on_error=on_error,
                  exec_pipelined=False, exec_async=False)
    def p():
        jpegs, labels = fn.readers.file(file_root=str(root), name="R", **reader)
        return fn.decoders.image(jpegs), labels

    pipe = p()
    pipe.build()
    return pipe


def _lines(caplog) -> list[str]:
    """The log as a file handler writes it: one record per line, if nothing forged one."""
    fmt = logging.Formatter("%(levelname)s %(name)s: %(message)s")
    return "\n".join(fmt.format(r) for r in caplog.records).split("\n")


def test_skipped_sample_with_a_newline_in_its_name_is_one_log_line(evil_tree, caplog):
    pipe = _pipe(evil_tree, "skip", batch_size=4)
    with caplog.at_level(logging.WARNING, logger="stoker"):
        pipe.run()
    report = pipe.error_report()
    pipe.close()
    assert [r["source"] for r in report] == [repr(f"c/{EVIL}")]
    lines = _lines(caplog)
    assert len(lines) == len(caplog.records) == 1
    assert lines[0].startswith("WARNING stoker: stoker: skipped sample 'c/evil\\nWARNING stoker: forged")
    assert "\x1b" not in lines[0]


def test_the_error_under_raise_names_the_escaped_file(evil_tree):
    pipe = _pipe(evil_tree, "raise", batch_size=4)
    with pytest.raises(OperatorError) as info:
        pipe.run()
    pipe.close()
    message = str(info.value)
    assert info.value.source == f"c/{EVIL}"  # the attribute keeps the real name, for programs
    assert f"(sample: {repr('c/' + EVIL)})" in message
    assert "\x1b" not in message and "\nWARNING" not in message


def test_the_iterator_summary_is_one_line(evil_tree, caplog):
    torch = pytest.importorskip("torch")  # noqa: F841
    from stoker.plugin.pytorch import DALIGenericIterator

    it = DALIGenericIterator(_pipe(evil_tree, "skip"), ["data", "label"], reader_name="R")
    with caplog.at_level(logging.WARNING, logger="stoker"):
        list(it)
    it._pipes[0].close()
    summaries = [r for r in caplog.records if "stoker iterator" in r.getMessage()]
    assert len(summaries) == 1 and "\n" not in summaries[0].getMessage()
    assert len(_lines(caplog)) == len(caplog.records)


def test_listing_warning_escapes_broken_entries(evil_tree, caplog):
    os.symlink("nowhere", evil_tree / "c" / "x\ny.png")
    with caplog.at_level(logging.WARNING, logger="stoker"):
        _pipe(evil_tree, "skip").close()
    listing = [r.getMessage() for r in caplog.records if "cannot be read" in r.getMessage()]
    assert len(listing) == 1 and "'c/x\\ny.png'" in listing[0] and "\n" not in listing[0]


def test_file_list_error_escapes_the_list_name(tmp_path):
    listing = tmp_path / "list\nFORGED.txt"
    listing.write_text("a.png notanumber\n")
    with pytest.raises(PipelineBuildError) as info:
        _pipe(tmp_path, "raise", file_list=str(listing)).close()
    assert "\nFORGED" not in str(info.value) and "list\\nFORGED.txt" in str(info.value)
