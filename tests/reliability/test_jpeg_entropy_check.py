"""The entropy check of the mixed decoders' strict mode (stoker.backend.jpeg_entropy_check).

JPEGs whose Huffman data is damaged (bits flipped in the middle of a scan) while their marker
structure stays intact pass the structure check and are refused by the strict CPU decoder; the
entropy check flags them, file by file as the strict CPU decoder does. The mixed decoders then
send them to the CPU decoder, which skips or substitutes them with their name (here on the fake
engines and the null CUDA device: no GPU needed; on a device: tests/operators/decoders/test_mixed_entropy_check_gpu.py).
"""

from __future__ import annotations

import os
import sys
from concurrent.futures import ThreadPoolExecutor

import hostile_corpus as hc
import numpy as np
import pytest
from reliability_images import jpeg_bytes, photo
from test_jpeg_scan_check import _good, _op

import stoker.fn as fn
from stoker import pipeline_def, settings, types
from stoker.backend.jpeg_entropy_check import damaged, entropy_check_wanted, entropy_problem
from stoker.backend.jpeg_header import frame_hint
from stoker.backend.jpeg_scan_check import scan_problem
from stoker.backend.nvjpeg import hardware_eligible_hints
from stoker.operators.decoders import mixed, turbo
from stoker.operators.decoders.cpu import ImageDecodeError, decode_cpu
from stoker.operators.decoders.mixed import hardware

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "operators", "decoders"))
from test_mixed_fake_engines import fake  # noqa: E402, F401 - a fixture: the engines on the null device

pytestmark = [pytest.mark.timeout(120),
              pytest.mark.skipif(not turbo.available(), reason="needs TurboJPEG (pip install stoker[jpeg])")]


# --- the corpus: bits flipped inside Huffman data, markers intact -------------------------------

def scan_ranges(data: bytes) -> list[tuple[int, int]]:
    """(start, end) of each scan's entropy-coded data: from the end of its SOS header to the
    first marker that is neither a stuffed 0xFF 0x00, a fill byte nor a restart marker."""
    out, pos = [], 0
    while (sos := data.find(b"\xff\xda", pos)) >= 0:
        start = end = sos + 2 + int.from_bytes(data[sos + 2:sos + 4], "big")
        while (end := data.find(b"\xff", end)) >= 0 and (data[end + 1] in (0x00, 0xFF) or
                                                          0xD0 <= data[end + 1] <= 0xD7):
            end += 1
        out.append((start, end))
        pos = end
    return out


def flip_bits(data: bytes, seed: int, flips: int = 8, span: int = 48) -> bytes:
    """``flips`` single bits flipped within ``span`` bytes of the middle third of the file's
    largest scan. No byte next to a 0xFF is touched and none becomes 0xFF, so that every marker,
    stuffed byte and restart marker stays as it was: only decoding can see the damage."""
    start, end = max(scan_ranges(data), key=lambda r: r[1] - r[0])
    rng = np.random.default_rng(seed)
    third = (end - start) // 3
    lo = start + third + int(rng.integers(0, max(1, third - span)))
    out = bytearray(data)
    done = 0
    while done < flips:
        at = lo + int(rng.integers(0, span))
        value = out[at] ^ (1 << int(rng.integers(0, 8)))
        if 0xFF in (out[at - 1], out[at], out[at + 1], value):
            continue
        out[at] = value
        done += 1
    return bytes(out)


def strict_cpu_refuses(data: bytes) -> bool:
    try:
        decode_cpu(np.frombuffer(data, np.uint8), types.RGB, np.uint8, True, strict=True)
    except ImageDecodeError as e:
        assert "corrupt JPEG data" in str(e)
        return True
    return False


def entropy_damaged(data: bytes, flips: int = 8) -> bytes:
    """``data`` with bits flipped (:func:`flip_bits`, the first seed of 100 whose damage libjpeg
    notices: a flipped bit often leaves a Huffman code that still decodes)."""
    for seed in range(100):
        bad = flip_bits(data, seed, flips)
        if strict_cpu_refuses(bad):
            return bad
    raise AssertionError("no damage the strict CPU decoder notices in 100 tries")


def _bases() -> dict[str, bytes]:
    """Photo-like JPEGs of the layouts GPU decoders take: baseline 4:2:0 (OpenCV's and Pillow's),
    4:4:4, 4:2:2, gray, progressive, restart-marked, CMYK."""
    img = photo(120, 160, seed=31)
    return {
        "baseline_420": jpeg_bytes(img),
        "pillow_420": hc._pil("JPEG", img, quality=85),
        "baseline_444": hc._pil("JPEG", img, quality=90, subsampling=0),
        "baseline_422": hc._pil("JPEG", img, quality=90, subsampling=1),
        "gray": hc._pil("JPEG", img[:, :, :1].repeat(3, 2), mode="L", quality=90),
        "progressive": hc._pil("JPEG", img, quality=90, progressive=True),
        "restart": hc._pil("JPEG", img, quality=90, restart_marker_blocks=4),
        "cmyk": hc._pil("JPEG", img, mode="CMYK", quality=90),  # (no gray output: checked as CMYK)
    }


def entropy_corpus() -> dict[str, bytes]:
    """Kind -> a damaged file of that kind that the strict CPU decoder refuses."""
    return {f"entropy_{k}.jpg": entropy_damaged(v) for k, v in _bases().items()}


_CORPUS = entropy_corpus()


# --- the check ----------------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(_CORPUS))
def test_the_corpus_passes_the_structure_check_and_the_strict_cpu_decoder_refuses_it(name):
    data = _CORPUS[name]
    assert scan_problem(data) is None
    assert strict_cpu_refuses(data)


@pytest.mark.parametrize("name", sorted(_CORPUS))
def test_the_entropy_check_flags_it(name):
    data = _CORPUS[name]
    assert entropy_problem(data)  # libjpeg's message
    assert entropy_problem(np.frombuffer(data, np.uint8)) == entropy_problem(data)


def test_it_flags_exactly_what_the_strict_cpu_decoder_refuses():
    """Random damage of each layout, 1 or 8 flipped bits: some noticed, many not; the check and
    the strict CPU decoder agree on every file."""
    verdicts = []
    for kind, data in _bases().items():
        for seed in range(12):
            for flips in (1, 8):
                bad = flip_bits(data, seed, flips)
                assert scan_problem(bad) is None, (kind, seed, flips)
                verdicts.append((kind, seed, flips, strict_cpu_refuses(bad), entropy_problem(bad) is not None))
    assert all(v[3] == v[4] for v in verdicts), [v for v in verdicts if v[3] != v[4]]
    refused = sum(v[3] for v in verdicts)
    assert 0.1 * len(verdicts) < refused < 0.9 * len(verdicts)  # (both outcomes are exercised)


def test_good_files_pass():
    """Sound JPEGs of every common kind pass; those with stray bytes between header segments are
    flagged (libjpeg warns) but the strict CPU decoder, to which they go, decodes them."""
    for name, data in _good().items():
        problem = entropy_problem(data)
        if "header_junk" in name:
            assert problem and "extraneous bytes" in problem
            assert not strict_cpu_refuses(data)
        else:
            assert problem is None, (name, problem)


def test_the_batch_mask_on_a_pool_or_not():
    files = [_bases()["baseline_420"], _CORPUS["entropy_baseline_420.jpg"], _bases()["gray"],
             _CORPUS["entropy_progressive.jpg"]]
    arrays = [np.frombuffer(b, np.uint8) for b in files]
    assert damaged(arrays).tolist() == [False, True, False, True]
    with ThreadPoolExecutor(2) as pool:
        assert damaged(arrays, [1, 2, 3], pool).tolist() == [True, False, True]
    assert damaged(arrays, []).tolist() == []


# --- when it runs, and the routing --------------------------------------------------------------

def test_it_runs_by_default_only_where_damaged_files_are_to_be_dropped():
    assert entropy_check_wanted(True, "skip") and entropy_check_wanted(True, "substitute")
    assert not entropy_check_wanted(True, "raise") and not entropy_check_wanted(True, None)
    assert not entropy_check_wanted(False, "skip")
    with settings.override(jpeg_entropy_check=True):
        assert entropy_check_wanted(True, "raise") and not entropy_check_wanted(False, "raise")
    with settings.override(jpeg_entropy_check=False):  # the off switch
        assert not entropy_check_wanted(True, "skip")
    with settings.override(jpeg_structure_check=True):  # auto follows the structure check
        assert entropy_check_wanted(True, "raise")
    with settings.override(jpeg_structure_check=False):
        assert not entropy_check_wanted(True, "skip")
        with settings.override(jpeg_entropy_check=True):
            assert entropy_check_wanted(True, "skip")


def _ctx(on_error, pool=None):
    return type("Ctx", (), {"on_error": on_error, "pool": pool})()


@pytest.mark.parametrize("strict", [True, False])
def test_mixed_routing_sends_flagged_files_to_the_cpu(monkeypatch, strict):
    files = {"good": jpeg_bytes(photo(48, 64, seed=1)), **_CORPUS, "restart": hc.jpeg_restart(),
             "rst_swapped": hc.jpeg_rst_swapped()}
    arrays = [np.frombuffer(b, np.uint8) for b in files.values()]
    flagged = {k for k in files if k.startswith("entropy_") or k == "rst_swapped"}
    on_gpu = [i for i, k in enumerate(files) if not strict or k not in flagged]
    everything = list(range(len(arrays)))
    monkeypatch.setattr(hardware, "header", lambda a: (None, "other", 0, 0))
    hints = np.asarray([frame_hint(a) for a in arrays], np.int64)
    eligible = np.flatnonzero(hardware_eligible_hints(hints)).tolist()  # (the engines': no progressive)
    with ThreadPoolExecutor(2) as pool:
        for ctx in (_ctx("skip"), _ctx("substitute", pool)):
            for h in (hints, None):  # nvJPEG path: hints from the reader or scanned here
                assert hardware.scan(_op(strict), arrays, h, ctx)[2] == [i for i in on_gpu if i in eligible]
            assert mixed.strict_sound(_op(strict), arrays, everything, None, ctx) == on_gpu  # nvImageCodec path
    assert mixed.strict_sound(_op(strict), arrays, everything, None, _ctx("raise")) == everything  # off there
    with settings.override(jpeg_entropy_check=False):
        only_structure = [i for i, k in enumerate(files) if not strict or k != "rst_swapped"]
        assert mixed.strict_sound(_op(strict), arrays, everything, None, _ctx("skip")) == only_structure


# --- through a pipeline: readers.file and a mixed decoder on the fake engines -------------------

BATCH = 4
BAD = ("a_entropy_baseline.jpg", "b_entropy_restart.jpg")  # sort first: in the first batch


def _folder(root, bad: bool = True):
    cls = root / "c0"
    cls.mkdir()
    for k in range(2 * BATCH - (len(BAD) if bad else 0)):
        (cls / f"good_{k}.jpg").write_bytes(jpeg_bytes(photo(40 + 8 * k, 56, seed=40 + k)))
    if bad:
        (cls / BAD[0]).write_bytes(_CORPUS["entropy_baseline_420.jpg"])
        (cls / BAD[1]).write_bytes(_CORPUS["entropy_restart.jpg"])
    return root


def _run(root, on_error, batches=2):
    """((file name, image) of every sample, error report) of ``batches`` batches."""
    @pipeline_def(batch_size=BATCH, num_threads=2, device_id=0, seed=0, on_error=on_error)
    def pipe():
        jpegs, _ = fn.readers.file(file_root=str(root), name="Reader")
        return fn.decoders.image(jpegs, device="mixed", output_type=types.RGB), \
            fn.get_property(jpegs, key="source_info")

    p = pipe()
    p.build()
    try:
        out = []
        for _ in range(batches):
            images, sources = p.run()
            names = [os.path.basename(bytes(np.asarray(sources.at(i))).decode()) for i in range(len(sources))]
            out += list(zip(names, [np.asarray(s.get()) for s in images.samples()]))
        return out, p.error_report()
    finally:
        p.close()


@pytest.mark.usefixtures("fake")
@pytest.mark.parametrize("on_error", ["skip", "substitute"])
def test_damaged_files_are_dropped_with_their_name(tmp_path, on_error):
    out, report = _run(_folder(tmp_path), on_error)
    assert len(out) == 2 * BATCH and not set(BAD) & {name for name, _ in out}
    assert {os.path.basename(r["source"]) for r in report} == set(BAD)  # (once an epoch)
    assert {r["action"] for r in report} == {"skipped" if on_error == "skip" else "substituted"}
    assert all("corrupt JPEG data" in r["reason"] for r in report)


@pytest.mark.usefixtures("fake")
def test_under_raise_they_decode_on_the_gpu_as_before(tmp_path):
    """Off by default under 'raise' (the fake engines, like the real ones, decode the damage)."""
    out, report = _run(_folder(tmp_path), "raise", batches=1)
    assert [name for name, _ in out][:2] == list(BAD) and report == []


@pytest.mark.usefixtures("fake")
def test_the_off_switch(tmp_path, stoker_settings):
    stoker_settings(jpeg_entropy_check=False)
    out, report = _run(_folder(tmp_path), "skip", batches=1)
    assert [name for name, _ in out][:2] == list(BAD) and report == []


@pytest.mark.usefixtures("fake")
def test_good_files_decode_bit_identically_with_the_check_on_and_off(tmp_path, stoker_settings):
    root = _folder(tmp_path, bad=False)
    on, report = _run(root, "skip")
    assert report == []
    stoker_settings(jpeg_entropy_check=False)
    off, _ = _run(root, "skip")
    assert [n for n, _ in on] == [n for n, _ in off]
    for (_, a), (_, b) in zip(on, off):
        np.testing.assert_array_equal(a, b)
