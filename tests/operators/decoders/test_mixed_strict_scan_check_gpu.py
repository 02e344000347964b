"""The mixed decoders' strict scan check on the device: a restart-marked JPEG whose RST markers are
out of order (the engines and nvImageCodec decode it into garbage without a word) goes to the CPU
decoder under strict, which names it (raise) or drops it (skip); strict=False decodes it on the GPU
as before. Host logic: tests/reliability/test_jpeg_scan_check.py."""

from __future__ import annotations

import io
import os

import numpy as np
import pytest
from PIL import Image

import stoker.fn as fn
from stoker import pipeline_def, types
from stoker.errors import OperatorError

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(120)]

BATCH = 4
BAD = "a_rst_swapped.jpg"  # sorts first: in the first batch


def _jpeg(seed: int, **kw) -> bytes:
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:96, 0:128]
    img = np.stack([x * 2, y * 2, x + y], -1) + rng.integers(-10, 10, (96, 128, 3))
    out = io.BytesIO()
    Image.fromarray(np.clip(img, 0, 255).astype(np.uint8)).save(out, "JPEG", quality=90, **kw)
    return out.getvalue()


def _rst_swapped() -> bytes:
    data = bytearray(_jpeg(0, restart_marker_rows=1))
    rst = [i for i in range(len(data) - 1) if data[i] == 0xFF and 0xD0 <= data[i + 1] <= 0xD7]
    a, b = rst[1], rst[2]
    data[a + 1], data[b + 1] = data[b + 1], data[a + 1]
    return bytes(data)


@pytest.fixture
def root(tmp_path):
    cls = tmp_path / "c0"
    cls.mkdir()
    (cls / BAD).write_bytes(_rst_swapped())
    for k in range(2 * BATCH):
        (cls / f"good_{k}.jpg").write_bytes(_jpeg(k + 1, restart_marker_rows=k % 2))
    return tmp_path


@pytest.fixture(params=[True, False], ids=["nvjpeg", "nvimagecodec"])
def hardware(request, stoker_settings):
    pytest.importorskip("nvidia.nvimgcodec")
    stoker_settings(nvjpeg_hw=request.param)
    return request.param


def _pipe(root, on_error, strict):
    @pipeline_def(batch_size=BATCH, num_threads=2, device_id=0, seed=0, on_error=on_error)
    def p():
        jpegs, _ = fn.readers.file(file_root=str(root), name="Reader")
        return fn.decoders.image(jpegs, device="mixed", output_type=types.RGB, strict=strict), \
            fn.get_property(jpegs, key="source_info")

    pipe = p()
    pipe.build()
    return pipe


def test_strict_names_the_damaged_file(root, hardware, stoker_settings):
    stoker_settings(jpeg_structure_check=True)  # (auto: checked under skip / substitute only)
    pipe = _pipe(root, "raise", True)
    try:
        with pytest.raises(OperatorError) as info:
            pipe.run()
        assert BAD in str(info.value) and "corrupt JPEG data" in str(info.value)
    finally:
        pipe.close()


def test_strict_skip_drops_it(root, hardware):
    pipe = _pipe(root, "skip", True)
    try:
        images, sources = pipe.run()
        names = [os.path.basename(bytes(np.asarray(sources.at(i))).decode()) for i in range(len(sources))]
        assert len(images) == BATCH and BAD not in names
        assert [os.path.basename(r["source"]) for r in pipe.error_report()] == [BAD]
    finally:
        pipe.close()


def test_not_strict_decodes_it_on_the_gpu(root, hardware):
    pipe = _pipe(root, "raise", False)
    try:
        images, _ = pipe.run()
        assert len(images) == BATCH and np.asarray(images.at(0).get()).shape == (96, 128, 3)
        assert pipe.error_report() == []
    finally:
        pipe.close()
