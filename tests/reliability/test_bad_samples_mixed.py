"""The bad-sample cases of test_bad_samples through the mixed (GPU) decoder.

Under "raise" the error names the operator, the file and the reason; under
"skip" the host half of the decoder finds the bad sample in the CPU stage, so
the executor drops and refills it there: full batches, every good file once.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from test_bad_samples import (  # noqa: F401 - broken is a fixture
    BAD,
    BATCH,
    GOOD,
    VALID,
    _break_after_listing,
    _make_dataset,
    _names,
    broken,
)

import stoker.fn as fn
from stoker import pipeline_def, types
from stoker.errors import OperatorError

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(120)]


def _pipe(root, on_error, decoder="image"):
    @pipeline_def(batch_size=BATCH, num_threads=2, device_id=0, seed=0, on_error=on_error)
    def p():
        jpegs, labels = fn.readers.file(file_root=str(root), name="Reader")
        if decoder == "image_slice":  # anchor and shape inputs, as an SSD pipeline gives them
            anchor = fn.random.uniform(range=(0.0, 0.2), shape=(2,))
            shape = fn.random.uniform(range=(0.5, 0.8), shape=(2,))
            images = fn.decoders.image_slice(jpegs, anchor, shape, device="mixed", output_type=types.RGB)
        else:
            images = fn.decoders.image(jpegs, device="mixed", output_type=types.RGB)
        return images, labels, fn.get_property(jpegs, key="source_info")

    pipe = p()  # the decoder reads nvjpeg_hw (set by the fixture) when it first runs
    pipe.build()
    return pipe


@pytest.fixture(params=[True, False], ids=["nvjpeg", "nvimagecodec"])
def hardware(request, stoker_settings):
    pytest.importorskip("nvidia.nvimgcodec")
    stoker_settings(nvjpeg_hw=request.param)
    return request.param


@pytest.fixture(params=["image", "image_slice"])
def decoder(request):
    return request.param


def test_mixed_raise_names_operator_file_and_reason(broken, hardware, decoder):  # noqa: F811
    case, root, bad, reason, operator = broken
    pipe = _pipe(root, "raise", decoder)
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


def test_mixed_skip_keeps_batches_full_and_each_good_file_once(broken, hardware, decoder):  # noqa: F811
    case, root, bad, _, _ = broken
    pipe = _pipe(root, "skip", decoder)
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


@pytest.mark.parametrize("on_error", ["raise", "skip"])
@pytest.mark.parametrize("case", sorted(VALID))
def test_mixed_unusual_valid_files_decode_like_the_reference(case, on_error, hardware, tmp_path):
    """PNGs, 16-bit and gray+alpha PNGs, CMYK/YCCK and odd JPEGs through the mixed decoder: the
    formats and dtypes the GPU path does not take decode on the CPU (exact); JPEGs a GPU decoder
    takes agree within GPU-vs-libjpeg rounding (mean under 3 levels)."""
    data, ref, output_type, dtype = VALID[case]()
    _make_dataset(tmp_path / "data", data)

    @pipeline_def(batch_size=BATCH, num_threads=2, device_id=0, seed=0, on_error=on_error)
    def p():
        jpegs, _ = fn.readers.file(file_root=str(tmp_path / "data"), name="Reader")
        images = fn.decoders.image(jpegs, device="mixed", output_type=output_type, dtype=dtype)
        return images, fn.get_property(jpegs, key="source_info")

    pipe = p()
    pipe.build()
    try:
        images, sources = pipe.run()
        got = {name: np.asarray(images.at(i).get()) for i, name in enumerate(_names(sources))}
        assert len(images) == BATCH and BAD in got
        want = ref.reshape(got[BAD].shape)
        if data[:2] == b"\xff\xd8":
            assert np.abs(got[BAD].astype(int) - want.astype(int)).mean() < 3.0
        else:
            np.testing.assert_array_equal(got[BAD], want)
        assert pipe.error_report() == []
    finally:
        pipe.close()
