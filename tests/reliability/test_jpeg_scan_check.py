"""The structural scan check of the mixed decoders' strict mode (stoker.backend.jpeg_scan_check):
good files of every common kind pass, files with a broken marker structure are flagged, and the
mixed decoders' routing sends flagged files to the CPU decoder only under strict (pure host
logic: no GPU needed)."""

from __future__ import annotations

import hostile_corpus as hc
import numpy as np
import pytest
from reliability_images import jpeg_bytes, photo

from stoker import settings, types
from stoker.backend.jpeg_header import frame_hint
from stoker.backend.jpeg_scan_check import damaged, scan_problem, structure_check_wanted
from stoker.operators.decoders import mixed
from stoker.operators.decoders.cpu import ImageDecodeError, decode_cpu
from stoker.operators.decoders.mixed import hardware


def _good() -> dict[str, bytes]:
    img = photo(120, 152, seed=21)
    gray = np.ascontiguousarray(img[:, :, :1].repeat(3, 2))
    base = jpeg_bytes(img)
    files = {
        "baseline_420": hc._pil("JPEG", img, quality=85),
        "baseline_444": hc._pil("JPEG", img, quality=85, subsampling=0),
        "baseline_422": hc._pil("JPEG", img, quality=85, subsampling=1),
        "opencv": base,
        "gray": hc._pil("JPEG", gray, mode="L", quality=90),
        "progressive": hc._pil("JPEG", img, quality=90, progressive=True),
        "progressive_gray": hc._pil("JPEG", gray, mode="L", progressive=True),
        "restart_rows": hc.jpeg_restart(),
        "restart_blocks_444": hc._pil("JPEG", img, quality=90, subsampling=0, restart_marker_blocks=3),
        "restart_blocks_420": hc._pil("JPEG", photo(77, 131, seed=3), restart_marker_blocks=5),
        "restart_gray": hc._pil("JPEG", gray, mode="L", restart_marker_blocks=7),
        "restart_progressive": hc._pil("JPEG", img, progressive=True, restart_marker_rows=1),
        "odd_size": hc._pil("JPEG", photo(1, 1, seed=1)),
        "app_com": hc._pil("JPEG", img, comment=b"a \xff\xd9 \xff\x01 comment", icc_profile=b"\xff\xd8\xff" * 300,
                           exif=b"Exif\x00\x00" + b"\xff\xda\x00\x02" * 50),
        "trailing_bytes": base + b"\x00" * 100 + b"\xff\xd8\xff\xd9 garbage after the end",
        "fill_before_eoi": base[:-2] + b"\xff\xff\xff\xd9",
        "header_junk": hc.jpeg_with_header_junk(),
    }
    files.update({k: v for k, v in hc.good_files().items() if v[:2] == b"\xff\xd8"})
    return files


def _damaged() -> dict[str, bytes]:
    restart = hc.jpeg_restart()
    rst = hc._rst_positions(restart)
    base = jpeg_bytes(photo(64, 80, seed=22))
    start = hc._scan_start(base)
    files = {name: case.make() for name, case in hc.STRUCTURAL.items()}
    files.update({
        "truncated_scan": hc.truncated(lambda: base)(),
        "truncated_restart": restart[:rst[2] + 40],
        "last_rst_removed": restart[:rst[-1]] + restart[rst[-1] + 2:],
        "extra_rst": restart[:-2] + b"\x01\x02\xff" + bytes([0xD0 + len(rst) % 8]) + b"\x03" + restart[-2:],
        "empty_restart_interval": restart[:rst[1]] + restart[rst[1]:rst[1] + 2] + restart[rst[1]:],
        "no_scan_data": base[:start] + b"\xff\xd9",
        "eoi_before_scan": base[:hc._scan_start(base) - 12] + b"\xff\xd9",
        "sof_in_scan": hc.jpeg_marker_in_scan(0xC0),
        "rst_without_dri": base[:start + 30] + b"\xff\xd0" + base[start + 30:],
    })
    return files


@pytest.mark.parametrize("name", sorted(_good()))
def test_good_files_pass(name):
    assert scan_problem(_good()[name]) is None


@pytest.mark.parametrize("name", sorted(_damaged()))
def test_damaged_structure_is_flagged(name):
    data = _damaged()[name]
    assert scan_problem(data) is not None
    assert scan_problem(np.frombuffer(data, np.uint8)) == scan_problem(data)


@pytest.mark.parametrize("name", sorted(hc.STRUCTURAL))
def test_the_strict_cpu_decoder_refuses_what_the_check_flags(name):
    """Routing a flagged file to the CPU is only useful if the strict CPU decoder then names it."""
    case = hc.STRUCTURAL[name]
    with pytest.raises(ImageDecodeError) as info:
        decode_cpu(np.frombuffer(case.make(), np.uint8), types.RGB, np.uint8, True, strict=True)
    assert all(r in str(info.value) for r in case.reason)


def test_what_it_cannot_see():
    """Damage that leaves the markers intact (zeroed or cut Huffman data without restart markers)
    passes: only decoding finds it. Documented in the decoders' strict argument."""
    assert scan_problem(hc.jpeg_corrupt_scan()) is None
    assert scan_problem(hc.jpeg_scan_cut_short()) is None


def test_damaged_batch_mask():
    good, bad = _good(), _damaged()
    arrays = [np.frombuffer(v, np.uint8) for v in [*good.values(), *bad.values()]]
    mask = damaged(arrays)
    assert mask.tolist() == [False] * len(good) + [True] * len(bad)
    assert damaged(arrays, [0, len(good)]).tolist() == [False, True]
    assert damaged(arrays, []).tolist() == []


def _op(strict: bool, max_pixels: int = 0):
    return type("Op", (), {"max_pixels": max_pixels, "strict": strict})()


@pytest.fixture
def check_on():
    """The structure check switched on whatever the on_error policy (auto: skip / substitute only)."""
    with settings.override(jpeg_structure_check=True):
        yield


def test_the_check_runs_by_default_only_where_damaged_files_are_to_be_dropped():
    assert structure_check_wanted(True, "skip") and structure_check_wanted(True, "substitute")
    assert not structure_check_wanted(True, "raise") and not structure_check_wanted(True, None)
    assert not structure_check_wanted(False, "skip")
    with settings.override(jpeg_structure_check=True):
        assert structure_check_wanted(True, "raise") and not structure_check_wanted(False, "raise")
    with settings.override(jpeg_structure_check=False):
        assert not structure_check_wanted(True, "skip")
    files = [np.frombuffer(hc.jpeg_rst_swapped(), np.uint8)]
    on_skip = type("Ctx", (), {"on_error": "skip"})()
    assert mixed.strict_sound(_op(True), files, [0], None, on_skip) == []
    assert mixed.strict_sound(_op(True), files, [0]) == [0]  # policy unknown: as 'raise', no check


@pytest.mark.usefixtures("check_on")
@pytest.mark.parametrize("strict", [True, False])
def test_mixed_routing_sends_flagged_files_to_the_cpu_only_under_strict(monkeypatch, strict):
    files = {"good": hc._pil("JPEG", photo(48, 64, seed=1)), "restart": hc.jpeg_restart(),
             "rst_swapped": hc.jpeg_rst_swapped(), "rst_removed": hc.jpeg_rst_removed(),
             "chunk_deleted": hc.jpeg_restart_chunk_deleted(), "soi_in_scan": hc.jpeg_marker_in_scan()}
    arrays = [np.frombuffer(b, np.uint8) for b in files.values()]
    flagged = {"rst_swapped", "rst_removed", "chunk_deleted", "soi_in_scan"}
    on_gpu = [i for i, k in enumerate(files) if strict is False or k not in flagged]
    # nvJPEG path: _scan picks the engines' samples (hints from the reader or scanned here)
    monkeypatch.setattr(hardware, "header", lambda a: (None, "other", 0, 0))
    hints = np.asarray([frame_hint(a) for a in arrays], np.int64)
    for h in (hints, None):
        heads, sizes, eligible = hardware.scan(_op(strict), arrays, h)
        assert eligible == on_gpu
        assert (sizes > 0).all()  # flagged files keep their size: the CPU decoder fills their slot
    # nvImageCodec path (and the decision both paths share)
    assert mixed.strict_sound(_op(strict), arrays, list(range(len(arrays)))) == on_gpu
    assert mixed.strict_sound(object(), arrays, [0, 2]) == [0, 2]  # no strict attribute: unchanged


@pytest.mark.usefixtures("check_on")
def test_strict_sound_reads_the_io_process_flag_when_the_hints_have_it():
    """readers.file's I/O process sends the check's result as a seventh hint column: the
    decoders then use it (here it marks a sound file, so only the column can exclude it)."""
    arrays = [np.frombuffer(hc._pil("JPEG", photo(48, 64, seed=k)), np.uint8) for k in range(3)]
    hints = np.asarray([(*frame_hint(a), 0) for a in arrays], np.int64)
    hints[1, 6] = 1
    assert mixed.strict_sound(_op(True), arrays, [0, 1, 2], hints) == [0, 2]
    assert mixed.strict_sound(_op(True), arrays, [0, 1, 2], hints[:, :6]) == [0, 1, 2]  # checked here
    assert mixed.strict_sound(_op(False), arrays, [0, 1, 2], hints) == [0, 1, 2]

