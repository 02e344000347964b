"""The PyTorch iterator exposes the pipelines' error reports and logs one summary per epoch."""

from __future__ import annotations

import logging
import os

import numpy as np
import pytest
from reliability_images import jpeg_bytes, photo

import stoker.fn as fn
from stoker import pipeline_def

pytest.importorskip("torch")
pytestmark = pytest.mark.timeout(60)
BAD = {"b_truncated.jpg": lambda: jpeg_bytes(photo(40, 40))[:60], "d_empty.jpg": lambda: b""}


@pytest.fixture
def root(tmp_path):
    cls = tmp_path / "cls"
    cls.mkdir()
    for i in range(6):
        (cls / f"{'aceg'[i % 4]}_{i}.jpg").write_bytes(jpeg_bytes(photo(12, 14, seed=i)))
    for name, make in BAD.items():
        (cls / name).write_bytes(make())
    return str(tmp_path)


def _iterator(root, on_error="skip", num=1):
    from stoker.plugin.pytorch import DALIGenericIterator

    @pipeline_def(batch_size=2, num_threads=2, device_id=None, seed=0, on_error=on_error)
    def p(shard):
        jpegs, labels = fn.readers.file(file_root=root, name="Reader", shard_id=shard, num_shards=num)
        return fn.decoders.image(jpegs), labels

    return DALIGenericIterator([p(k) for k in range(num)], ["data", "label"], reader_name="Reader",
                               auto_reset=True)


def _summaries(caplog):
    return [r for r in caplog.records if r.name == "stoker" and "stoker iterator: epoch" in r.getMessage()]


def test_error_report_lists_the_bad_files_and_one_summary_is_logged_per_epoch(root, caplog):
    it = _iterator(root)
    with caplog.at_level(logging.WARNING, logger="stoker"):
        for epoch in range(2):
            batches = list(it)
            # 6 good files of 8: the epoch ends with the reader's pass, every good file once
            assert len(batches) == 3
            assert all(b[0]["data"].shape[0] == 2 for b in batches)
            assert len(_summaries(caplog)) == epoch + 1
    report = it.error_report()
    assert {os.path.basename(r["source"]) for r in report} == set(BAD)
    assert all(r["pipeline"] == 0 and r["action"] == "skipped" and r["operator"] == "decoders.image"
               for r in report)
    first, second = (r.getMessage() for r in _summaries(caplog))
    assert "epoch 0" in first and "skipped" in first and "b_truncated.jpg" in first
    assert "epoch 1" in second
    # Every entry is summarized exactly once over the epochs (the pipelines run ahead, so an entry
    # may fall into the next epoch's summary, never into two).
    counts = [int(m.split(" sample(s) skipped")[0].rsplit(" ", 1)[1]) for m in (first, second)]
    assert counts[0] >= 2  # both bad files of the first pass were met before the first epoch ended
    assert sum(counts) <= len(report)
    for p in it._pipes:
        p.close()


def test_several_pipelines_are_labelled(root):
    it = _iterator(root, num=2)
    for _ in it:
        pass
    report = it.error_report()
    assert {r["pipeline"] for r in report} <= {0, 1} and report
    assert {os.path.basename(r["source"]) for r in report} <= set(BAD)
    for p in it._pipes:
        p.close()


def test_no_summary_without_errors(tmp_path, caplog):
    cls = tmp_path / "cls"
    cls.mkdir()
    for i in range(4):
        (cls / f"{i}.jpg").write_bytes(jpeg_bytes(photo(seed=i)))
    it = _iterator(str(tmp_path))
    with caplog.at_level(logging.WARNING, logger="stoker"):
        for _ in it:
            pass
    assert it.error_report() == [] and not _summaries(caplog)
    assert np.asarray(next(iter(it))[0]["label"]).shape == (2, 1)
    for p in it._pipes:
        p.close()


def test_reports_are_capped_but_counted(root, caplog, monkeypatch):
    """A long run keeps only the latest entries (bounded memory); the counts stay exact."""
    from stoker.pipeline import executor

    monkeypatch.setattr(executor, "MAX_ERROR_REPORTS", 1)
    it = _iterator(root)
    with caplog.at_level(logging.WARNING, logger="stoker"):
        for _ in range(3):
            for _ in it:
                pass
    pipe = it._pipes[0]
    total = pipe.error_count()
    assert total >= 6 and it.error_count() == total  # 2 bad files per pass, 3+ passes read
    assert len(pipe.error_report()) == 1 and len(it.error_report()) == 1
    summaries = [r.getMessage() for r in _summaries(caplog)]
    pipe.close()
    assert len(summaries) == 3
    assert all("in all)" in m for m in summaries)  # every epoch met 2 bad files, 1 entry is kept


def test_error_report_survives_close(root):
    """Reports are read after the run: closing the pipelines (or dropping the iterator) keeps them."""
    it = _iterator(root, num=2)
    for _ in it:
        pass
    before = it.error_report()
    assert before and it.error_count() >= len(BAD)
    for p in it._pipes:
        p.close()
        p.close()  # twice is harmless
    # the pipelines ran ahead until closed, so the report may only have grown
    after, count = it.error_report(), it.error_count()
    assert all(r in after for r in before) and count == len(after) >= len(before)
    assert it.error_report() == after  # and it stays as recorded
    pipes = it._pipes
    del it  # iterator teardown: the pipelines still answer
    assert [{**r, "pipeline": i} for i, p in enumerate(pipes) for r in p.error_report()] == after
    assert sum(p.error_count() for p in pipes) == count


def test_summary_once_per_epoch_without_auto_reset(root, caplog):
    from stoker.plugin.pytorch import DALIGenericIterator

    @pipeline_def(batch_size=2, num_threads=2, device_id=None, seed=0, on_error="skip")
    def p(shard):
        jpegs, labels = fn.readers.file(file_root=root, name="Reader", shard_id=shard, num_shards=2)
        return fn.decoders.image(jpegs), labels

    it = DALIGenericIterator([p(0), p(1)], ["data", "label"], reader_name="Reader")
    with caplog.at_level(logging.WARNING, logger="stoker"):
        for epoch in range(2):
            steps = list(it)
            assert steps and all(len(s) == 2 for s in steps)
            for _ in range(2):  # asking again after the end logs nothing more
                with pytest.raises(StopIteration):
                    next(it)
            assert len(_summaries(caplog)) == epoch + 1  # one summary for both pipelines
            it.reset()
    assert "epoch 1" in _summaries(caplog)[-1].getMessage()
    for pipe in it._pipes:
        pipe.close()
