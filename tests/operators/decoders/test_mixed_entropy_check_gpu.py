"""The mixed decoders' entropy check on the device: JPEGs whose Huffman data is damaged while their
marker structure stays intact (bits flipped in the middle of a scan: the structure check passes them,
the engines and nvImageCodec decode them into garbage without a word) go to the CPU decoder under
on_error 'skip' / 'substitute', which drops them with their name; under 'raise' (check off by
default) they decode on the GPU as before; good files decode bit-identically with the check on and
off. Host logic and the fake engines: tests/reliability/test_jpeg_entropy_check.py."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

import stoker.fn as fn
from stoker import pipeline_def, types
from stoker.errors import OperatorError

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "reliability"))
from reliability_images import jpeg_bytes, photo  # noqa: E402
from test_jpeg_entropy_check import _CORPUS  # noqa: E402 - damaged files the strict CPU decoder refuses

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(120)]

BATCH = 4
BAD = {"a_flipped_baseline.jpg": "entropy_baseline_420.jpg", "b_flipped_restart.jpg": "entropy_restart.jpg",
       "c_flipped_444.jpg": "entropy_baseline_444.jpg"}  # sort first: in the first batch


def _good(seed: int) -> bytes:
    return jpeg_bytes(photo(96, 128, seed=seed))


@pytest.fixture
def root(tmp_path):
    cls = tmp_path / "c0"
    cls.mkdir()
    for name, kind in BAD.items():
        (cls / name).write_bytes(_CORPUS[kind])
    for k in range(3 * BATCH - len(BAD)):
        (cls / f"good_{k}.jpg").write_bytes(_good(k + 1))
    return tmp_path


@pytest.fixture(params=[True, False], ids=["nvjpeg", "nvimagecodec"])
def hardware(request, stoker_settings):
    pytest.importorskip("nvidia.nvimgcodec")
    stoker_settings(nvjpeg_hw=request.param)
    return request.param


def _run(root, on_error, batches=3, strict=True):
    """((file name, image) of each sample, error report)."""
    @pipeline_def(batch_size=BATCH, num_threads=2, device_id=0, seed=0, on_error=on_error)
    def p():
        jpegs, _ = fn.readers.file(file_root=str(root), name="Reader")
        return fn.decoders.image(jpegs, device="mixed", output_type=types.RGB, strict=strict), \
            fn.get_property(jpegs, key="source_info")

    pipe = p()
    pipe.build()
    try:
        out = []
        for _ in range(batches):
            images, sources = pipe.run()
            names = [os.path.basename(bytes(np.asarray(sources.at(i))).decode()) for i in range(len(sources))]
            out += list(zip(names, [np.asarray(images.at(i).get()) for i in range(len(images))]))
        return out, pipe.error_report()
    finally:
        pipe.close()


@pytest.mark.parametrize("on_error", ["skip", "substitute"])
def test_damaged_huffman_data_is_dropped_with_the_file_named(root, hardware, on_error):
    out, report = _run(root, on_error)
    assert len(out) == 3 * BATCH and not set(BAD) & {name for name, _ in out}
    assert {os.path.basename(r["source"]) for r in report} == set(BAD)
    assert all("corrupt JPEG data" in r["reason"] for r in report)


def test_raise_decodes_them_on_the_gpu_as_before(root, hardware):
    out, report = _run(root, "raise", batches=1)
    assert [name for name, _ in out][:len(BAD)] == sorted(BAD) and report == []


def test_raise_with_the_check_on_names_the_file(root, hardware, stoker_settings):
    stoker_settings(jpeg_entropy_check=True)
    with pytest.raises(OperatorError) as info:
        _run(root, "raise", batches=1)
    assert sorted(BAD)[0] in str(info.value) and "corrupt JPEG data" in str(info.value)


def test_the_off_switch(root, hardware, stoker_settings):
    stoker_settings(jpeg_entropy_check=False)
    out, report = _run(root, "skip", batches=1)
    assert [name for name, _ in out][:len(BAD)] == sorted(BAD) and report == []


def test_good_files_are_bit_identical_with_the_check_on_and_off(tmp_path, hardware, stoker_settings):
    cls = tmp_path / "c0"
    cls.mkdir()
    for k in range(2 * BATCH):
        (cls / f"good_{k}.jpg").write_bytes(_good(k + 1))
    on, report = _run(tmp_path, "skip", batches=2)
    assert report == []
    stoker_settings(jpeg_entropy_check=False)
    off, _ = _run(tmp_path, "skip", batches=2)
    assert [n for n, _ in on] == [n for n, _ in off]
    for (_, a), (_, b) in zip(on, off):
        np.testing.assert_array_equal(a, b)
