"""on_error="skip" skips bad data, never a bug.

Only data errors (stoker.operators.base.SAMPLE_ERRORS: decode, format and I/O errors, errors
raised on purpose through Operator.error) count as a bad sample. A TypeError, KeyError,
IndexError, AssertionError... raised while an operator computes a sample is a bug in the
operator (or in the user's python_function): it stops the pipeline with an OperatorBugError
naming the operator and the sample, fused or not, on one thread or several, while a corrupt
file beside it is still skipped.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from generated_images import write_class_folders
from reliability_images import jpeg_bytes, photo

import stoker.fn as fn
from stoker import pipeline_def, types
from stoker.errors import OperatorBugError, SampleError
from stoker.operators.base import SAMPLE_ERRORS, BatchContext, Operator
from stoker.operators.schema import get_operator

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """Two classes of 4 good JPEGs; class 0 also holds broken.jpg (a truncated JPEG)."""
    root = write_class_folders(tmp_path_factory.mktemp("code_errors"), 4,
                               lambda c, i: jpeg_bytes(photo(48, 64, seed=4 * c + i)),
                               broken=(0, jpeg_bytes(photo())[:60]))
    return str(root)


def _pipe(root, threads, stage=None):
    """reader -> decoder -> crop -> flip under on_error="skip" (decoder, crop and flip fuse into
    one chain); ``stage`` is appended last when given."""

    @pipeline_def(batch_size=4, num_threads=threads, device_id=None, seed=5, on_error="skip")
    def p():
        jpegs, labels = fn.readers.file(file_root=root, name="reader")
        images = fn.decoders.image(jpegs, output_type=types.RGB)
        images = fn.crop(images, crop=(32, 32), name="crop")
        images = fn.flip(images, horizontal=1, name="flipper")
        if stage is not None:
            images = stage(images)
        return images, fn.get_property(jpegs, key="source_info")

    pipe = p()
    pipe.build()
    return pipe


def _epoch(pipe) -> list[str]:
    names = []
    for _ in range(2):  # 8 good files in batches of 4: one pass
        _, sources = pipe.run()
        names += [bytes(np.asarray(s)).decode().rsplit("/", 1)[-1] for s in sources]
    return names


@pytest.mark.parametrize("fuse", [True, False])
@pytest.mark.parametrize("threads", [1, 2])
def test_a_corrupt_file_is_still_skipped(dataset, stoker_settings, fuse, threads):
    stoker_settings(fuse=fuse, cpu_processes=0)
    pipe = _pipe(dataset, threads)
    try:
        names = _epoch(pipe)
        assert "broken.jpg" not in names and len(names) == 8
        assert [r["source"].rsplit("/", 1)[-1] for r in pipe.error_report()] == ["broken.jpg"]
    finally:
        pipe.close()


@pytest.mark.parametrize("bug", [KeyError("tile"), TypeError("unsupported operand"), IndexError("index 3"),
                                 AssertionError("shape"), AttributeError("no attribute 'w'")])
@pytest.mark.parametrize("fuse", [True, False])
@pytest.mark.parametrize("threads", [1, 2])
def test_a_bug_in_an_operator_stops_the_pipeline_naming_it(dataset, stoker_settings, monkeypatch, fuse, threads,
                                                           bug):
    stoker_settings(fuse=fuse, cpu_processes=0)
    flip = get_operator("flip")

    def broken(self, inputs, args, ctx):
        raise bug

    monkeypatch.setattr(flip, "run_sample", broken)
    pipe = _pipe(dataset, threads)
    try:
        with pytest.raises(OperatorBugError) as info:
            _epoch(pipe)
    finally:
        pipe.close()
    err = info.value
    assert err.operator == "flipper" and err.source.endswith(".jpg")
    assert f"{type(bug).__name__}: {bug}" in str(err) and "on_error does not skip it" in str(err)
    assert err.__cause__ is bug
    assert not pipe.error_report()  # nothing was reported as a bad sample


def test_a_data_error_raised_on_purpose_is_skipped(dataset, monkeypatch):
    """Operator.error (SampleError) and ValueError / OSError keep counting as bad samples."""
    flip = get_operator("flip")
    real = flip.run_sample

    def picky(self, inputs, args, ctx):
        if ctx.source.endswith("/1.jpg"):
            raise self.error("this sample is refused on purpose")
        return real(self, inputs, args, ctx)

    monkeypatch.setattr(flip, "run_sample", picky)
    pipe = _pipe(dataset, 2)
    try:
        names = _epoch(pipe)
    finally:
        pipe.close()
    assert "1.jpg" not in names and len(names) == 8
    skipped = {r["source"].rsplit("/", 1)[-1]: r["reason"] for r in pipe.error_report()}
    assert skipped["1.jpg"] == "this sample is refused on purpose" and set(skipped) == {"1.jpg", "broken.jpg"}


def test_a_bug_in_a_python_function_is_raised_a_data_error_skipped(dataset):
    """The user's function: its ValueError is a bad sample under "skip", its KeyError a bug (DALI
    stops on either; it has no on_error)."""
    calls = itertools.count()

    def lookup(image):
        return {"a": image}["b"]

    def refuse_the_third(image):
        if next(calls) == 2:
            raise ValueError("not this one")
        return image

    bug = _pipe(dataset, 2, stage=lambda x: fn.python_function(x, function=lookup, name="user_fn"))
    try:
        with pytest.raises(OperatorBugError, match="function .*lookup raised KeyError: 'b'") as info:
            _epoch(bug)
    finally:
        bug.close()
    assert info.value.operator == "user_fn" and "test_code_errors_not_skipped.py" in str(info.value)

    data = _pipe(dataset, 1, stage=lambda x: fn.python_function(x, function=refuse_the_third, name="user_fn"))
    try:
        assert len(_epoch(data)) == 8
    finally:
        data.close()
    reasons = [r["reason"] for r in data.error_report() if r["operator"] == "user_fn"]
    assert len(reasons) == 1 and "raised ValueError: not this one" in reasons[0]


def test_a_bug_in_a_batch_python_function_names_it():
    def make_batch():
        return [np.zeros(2) + {}["k"]] * 2

    @pipeline_def(batch_size=2, num_threads=1, device_id=None, on_error="skip")
    def p():
        return fn.python_function(function=make_batch, batch_processing=True, name="batch_fn")

    pipe = p()
    pipe.build()
    try:
        with pytest.raises(OperatorBugError, match="raised KeyError: 'k'") as info:
            pipe.run()
    finally:
        pipe.close()
    assert info.value.operator == "batch_fn"


@pytest.mark.parametrize("exc, bug", [
    (SampleError("x"), False), (ValueError("x"), False), (OSError(5, "I/O error"), False), (EOFError(), False),
    (ZeroDivisionError(), False), (MemoryError(), False), (TypeError("x"), True), (KeyError("x"), True),
    (IndexError("x"), True), (AssertionError(), True), (AttributeError("x"), True), (NameError("x"), True),
    (RuntimeError("x"), True), (NotImplementedError(), True)])
def test_which_errors_are_the_data_s(exc, bug):
    assert isinstance(exc, SAMPLE_ERRORS) is not bug
    op = Operator.__new__(get_operator("flip"))  # (sample_failure reads only the two names)
    op.instance_name, op.origin = "f", ""
    err = op.sample_failure(exc, BatchContext(batch_size=1, sources=["a.jpg"]), 0)
    assert isinstance(err, OperatorBugError) is bug and err.operator == "f" and err.source == "a.jpg"
