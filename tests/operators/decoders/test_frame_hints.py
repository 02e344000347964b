"""JPEG frame hints: the file reader's I/O process scans each file's frame header, and the mixed
decoders' hardware path reads those instead of scanning in the pipeline's process. The hints must
pick exactly the samples, and the sizes, that scanning each sample would (pure host logic)."""

import os
import sys

import numpy as np
import pytest
from decoder_helpers import make_images, pil_bytes, smooth_image

from stoker.backend.jpeg_header import NO_FRAME, frame_hint
from stoker.backend.jpeg_scan_check import scan_problem
from stoker.backend.nvjpeg import hardware_eligible, hardware_eligible_hints
from stoker.operators.decoders.mixed import hardware


def _samples() -> dict[str, bytes]:
    files = make_images()
    rgb = smooth_image(40, 64, 3, seed=2)
    files["progressive.jpg"] = pil_bytes(rgb, "JPEG", quality=90, progressive=True)
    files["big.jpg"] = pil_bytes(smooth_image(120, 90, 3, seed=3), "JPEG", quality=80)
    files["truncated.jpg"] = files["rgb.jpg"][: len(files["rgb.jpg"]) // 2]
    files["short"] = b"\xff\xd8"
    files["empty"] = b""
    files["text"] = b"not an image at all"
    return files


def test_hints_choose_the_engines_samples_as_scanning_does():
    files = _samples()
    datas = [np.frombuffer(b, np.uint8) for b in files.values()]
    hints = np.asarray([frame_hint(d) for d in datas], np.int64)
    want = [hardware_eligible(d) for d in datas]
    got = hardware_eligible_hints(hints)
    assert got.tolist() == [w is not None for w in want]
    assert [tuple(h[2:4]) for h, ok in zip(hints.tolist(), got) if ok] == [w for w in want if w is not None]
    names = [k for k, ok in zip(files, got) if ok]
    # the fixtures cover both answers: baseline colour and gray on the engines; the rest not
    assert {"rgb.jpg", "gray.jpg", "big.jpg"} <= set(names)
    assert not {"progressive.jpg", "truncated.jpg", "exif6.jpg", "rgb.png", "cmyk.jpg"} & set(names)
    assert frame_hint(np.frombuffer(b"", np.uint8)) == NO_FRAME


@pytest.mark.parametrize("max_pixels", [0, 3000])
def test_scan_with_hints_matches_scan_without(monkeypatch, max_pixels):
    files = _samples()
    arrays = [np.frombuffer(b, np.uint8) for b in files.values()]
    # nvImageCodec reads the headers the engines cannot take; a stand-in here (no GPU packages).
    monkeypatch.setattr(hardware, "header", lambda a: (None, "other", len(a) % 7, 3))
    op = type("Op", (), {"max_pixels": max_pixels})()
    hints = np.asarray([frame_hint(a) for a in arrays], np.int64)
    heads_a, sizes_a, elig_a = hardware.scan(op, arrays, hints)
    heads_b, sizes_b, elig_b = hardware.scan(op, arrays, None)
    assert heads_a == heads_b and elig_a == elig_b
    np.testing.assert_array_equal(sizes_a, sizes_b)
    big = list(files).index("big.jpg")
    assert (big in elig_a) == (max_pixels == 0)  # 120 x 90 is over 3000 pixels: no slot
    if max_pixels:
        assert tuple(sizes_a[big]) == (0, 0)
    # hints of another batch's length are not trusted: the samples are scanned
    assert hardware.scan(op, arrays, hints[:-1])[2] == elig_b


@pytest.mark.skipif(not hasattr(os, "memfd_create"), reason="needs Linux memfd_create")
def test_the_io_process_sends_each_files_hint(tmp_path):
    from stoker.operators.readers.io_worker import ReadWorker

    files = _samples()
    paths = []
    for k, (name, data) in enumerate(files.items()):
        p = tmp_path / f"{k:02d}_{name}"
        p.write_bytes(data)
        paths.append(str(p))
    paths.insert(3, str(tmp_path / "missing.jpg"))
    w = ReadWorker()
    try:
        plain = w.read(paths)[2]
        first = w.read(paths, check_structure=True)[2]
        samples, errors, hints, _ = w.read(paths, check_structure=True)
    finally:
        w.close()
    # the structure check is loaded after the first batch that asks (NumPy's import must not delay it)
    assert plain.shape == first.shape == (len(paths), 6) and (first == hints[:, :6]).all()
    assert list(errors) == [3]
    # six frame-hint values, then the structure check's flag (stoker.backend.jpeg_scan_check)
    assert hints.shape == (len(paths), 7) and hints.dtype == np.int64
    assert tuple(hints[3][:6]) == NO_FRAME and hints[3][6] == 0
    for i, s in enumerate(samples):
        if s is not None:
            assert tuple(hints[i][:6]) == frame_hint(s), paths[i]
            want = int(frame_hint(s)[0] != 0 and scan_problem(s) is not None)
            assert hints[i][6] == want, paths[i]


@pytest.mark.skipif(not hasattr(os, "memfd_create"), reason="needs Linux memfd_create")
def test_the_io_process_flags_jpegs_with_a_broken_structure(tmp_path):
    """The mixed decoders' strict mode reads the flag instead of checking in the pipeline's process."""
    from stoker.operators.readers.io_worker import ReadWorker

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "reliability"))
    import hostile_corpus as hc

    files = {"good": hc.jpeg_restart(), "rst_swapped": hc.jpeg_rst_swapped(), "soi_in_scan": hc.jpeg_marker_in_scan(),
             "no_eoi": hc.jpeg_without_eoi()}
    paths = []
    for name, data in files.items():
        (tmp_path / f"{name}.jpg").write_bytes(data)
        paths.append(str(tmp_path / f"{name}.jpg"))
    w = ReadWorker()
    try:
        w.read(paths, check_structure=True)
        _, errors, hints, _ = w.read(paths, check_structure=True)
    finally:
        w.close()
    assert not errors
    assert hints[:, 6].tolist() == [0, 1, 1, 1]


def test_readers_file_hands_the_hints_to_the_decoder(sample_jpeg_dir, monkeypatch, stoker_environ):
    import stoker.fn as fn
    from stoker import pipeline_def

    if not hasattr(os, "memfd_create"):
        pytest.skip("needs Linux memfd_create")
    stoker_environ(STOKER_READER_PROCESS="1")
    seen = []

    def look(batch):
        seen.append(batch)
        return batch

    @pipeline_def(batch_size=6, num_threads=2, device_id=None, seed=3)
    def p():
        jpegs, _ = fn.readers.file(file_root=sample_jpeg_dir, name="r")
        return jpegs

    pipe = p()
    pipe.build()
    inst = [i for i in pipe._graph.instances.values() if hasattr(i, "_worker")][0]
    real = inst.run_cpu

    def spy(batch, inputs, arg_inputs):
        outs = real(batch, inputs, arg_inputs)
        look(outs[0])
        return outs

    monkeypatch.setattr(inst, "run_cpu", spy)
    pipe.run()
    pipe.close()
    data = seen[0]
    hints = data.read_hints.frame_hints
    assert hints.shape == (6, 6)
    assert [tuple(h) for h in hints.tolist()] == [frame_hint(data.at(i)) for i in range(6)]
    assert hardware_eligible_hints(hints).all()  # the sample set is baseline JPEGs
