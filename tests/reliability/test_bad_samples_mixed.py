"""The bad-sample cases of test_bad_samples through the mixed (GPU) decoder.

Under "raise" the error names the operator, the file and the reason; under
"skip" the host half of the decoder finds the bad sample in the CPU stage, so
the executor drops and refills it there: full batches, every good file once.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from test_bad_samples import BAD, BATCH, GOOD, _break_after_listing, _names, broken  # noqa: F401

import stoker.fn as fn
from stoker import pipeline_def, types
from stoker.errors import OperatorError

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(120)]


def _pipe(root, on_error):
    @pipeline_def(batch_size=BATCH, num_threads=2, device_id=0, seed=0, on_error=on_error)
    def p():
        jpegs, labels = fn.readers.file(file_root=str(root), name="Reader")
        images = fn.decoders.image(jpegs, device="mixed", output_type=types.RGB)
        return images, labels, fn.get_property(jpegs, key="source_info")

    pipe = p()  # the decoder reads STOKER_NVJPEG_HW (set by the fixture) when it first runs
    pipe.build()
    return pipe


@pytest.fixture(params=[True, False], ids=["nvjpeg", "nvimagecodec"])
def hardware(request, monkeypatch):
    pytest.importorskip("nvidia.nvimgcodec")
    monkeypatch.setenv("STOKER_NVJPEG_HW", "1" if request.param else "0")
    return request.param


def test_mixed_raise_names_operator_file_and_reason(broken, hardware):  # noqa: F811
    case, root, bad, reason, operator = broken
    pipe = _pipe(root, "raise")
    _break_after_listing(case, bad)
    try:
        with pytest.raises(OperatorError) as info:
            pipe.run()
        err = info.value
        assert BAD in err.source and BAD in str(err)
        if operator == "Reader":
            assert err.operator == "Reader"
    finally:
        pipe.close()


def test_mixed_skip_keeps_batches_full_and_each_good_file_once(broken, hardware):  # noqa: F811
    case, root, bad, _, _ = broken
    pipe = _pipe(root, "skip")
    _break_after_listing(case, bad)
    try:
        for _epoch in range(2):
            images, labels, sources = pipe.run()
            assert len(images) == len(labels) == BATCH
            assert sorted(_names(sources)) == GOOD
            for i in range(BATCH):
                img = np.asarray(images.at(i).get())
                assert img.dtype == np.uint8 and img.ndim == 3 and img.shape[2] == 3
        report = [r for r in pipe.error_report() if r["iteration"] < 2]
        assert [os.path.basename(r["source"]) for r in report] == [BAD, BAD]
        assert all(r["action"] == "skipped" and r["reason"] for r in report)
    finally:
        pipe.close()
