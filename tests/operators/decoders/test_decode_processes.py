"""The mixed decoders' helper processes (``mixed.helper_processes``): random-crop windows decoded in other
processes into shared memory must equal the in-process ``turbo.decode_window`` pixel for pixel,
jobs the library refuses come back as failures, and a batch called off before its answers were
read does not hand its slot to another batch early. (The GPU upload from the slot is covered by
the GPU tests.)"""

import gc
import sys

import cv2
import numpy as np
import pytest

from stoker.operators.decoders import turbo
from stoker.operators.decoders.mixed.helper_processes import DecodeProcesses, helper_cores

pytestmark = [
    pytest.mark.skipif(not turbo.available(), reason="no TurboJPEG 3 library (pip install turbojpeg)"),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="memfd shared memory"),
    pytest.mark.timeout(60),
]


def _jpeg(h, w, seed):
    rng = np.random.default_rng(seed)
    small = rng.integers(0, 256, (max(2, h // 5), max(2, w // 5), 3), np.uint8)
    img = cv2.resize(small, (w, h), interpolation=cv2.INTER_CUBIC)
    ok, enc = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, 90])
    assert ok
    return enc.reshape(-1)


def _batch(n, seed=0):
    rng = np.random.default_rng(seed)
    datas, wins = [], []
    for k in range(n):
        h, w = int(rng.integers(20, 90)), int(rng.integers(20, 120))
        ch, cw = int(rng.integers(1, h + 1)), int(rng.integers(1, w + 1))
        datas.append(_jpeg(h, w, seed * 100 + k))
        wins.append((int(rng.integers(0, h - ch + 1)), int(rng.integers(0, w - cw + 1)), ch, cw))
    return datas, wins


def _submit(procs, datas, wins):
    """Lay the batch out in a slot as the mixed decoder does: outputs first, then the encoded bytes."""
    sizes = [h * w * 3 for _, _, h, w in wins]
    out_offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(int)
    out_total = int(sum(sizes))
    lease = procs.lease(out_total + sum(d.size for d in datas))
    pos, jobs = out_total, []
    for d, (y, x, h, w), dst in zip(datas, wins, out_offsets):
        lease.view[pos:pos + d.size] = d
        jobs.append((pos, d.size, y, x, h, w, int(dst)))
        pos += d.size
    return lease, procs.submit(lease, jobs), out_offsets


@pytest.fixture
def procs():
    p = DecodeProcesses(2, 2, turbo.library_path(), pin=False)
    yield p
    p.close()


def test_windows_decoded_in_helpers_equal_the_in_process_decode(procs):
    datas, wins = _batch(24)
    lease, pending, offsets = _submit(procs, datas, wins)
    assert pending.failed() == []
    for d, win, off in zip(datas, wins, offsets):
        want = turbo.decode_window(d, win)
        got = lease.view[off:off + want.nbytes].reshape(want.shape)
        np.testing.assert_array_equal(got, want)


def test_refused_files_are_reported_by_position(procs):
    datas, wins = _batch(8, seed=1)
    datas[2] = np.frombuffer(b"not a jpeg at all" * 10, np.uint8)
    datas[5] = datas[5][:40].copy()  # header cut short
    _, pending, _ = _submit(procs, datas, wins)
    assert pending.failed() == [2, 5]
    assert procs.alive()


def test_a_called_off_batch_keeps_its_slot_until_answered(procs):
    datas, wins = _batch(16, seed=2)
    lease, pending, _ = _submit(procs, datas, wins)
    first = lease.slot
    del lease, pending  # the batch is dropped without waiting
    gc.collect()
    lease2, pending2, offsets2 = _submit(procs, *_batch(16, seed=3))
    assert lease2.slot is not first  # the first is still owed answers
    datas2, wins2 = _batch(16, seed=3)
    assert pending2.failed() == []  # reads the first batch's answers too
    want = turbo.decode_window(datas2[3], wins2[3])
    np.testing.assert_array_equal(lease2.view[offsets2[3]:offsets2[3] + want.nbytes].reshape(want.shape), want)
    del lease2, pending2
    gc.collect()
    assert len(procs.free) == 2  # both slots back once answered and dropped


def test_batches_in_flight_together_get_their_own_answers(procs):
    """A helper takes the next batch's jobs while the previous batch's last images decode; each
    batch's answer (failures by position, pixels) must still be its own, whichever is read first."""
    batches = [_batch(12, seed=10 + b) for b in range(4)]
    batches[1][0][4] = np.frombuffer(b"broken" * 30, np.uint8)
    batches[3][0][0] = batches[3][0][0][:30].copy()
    sent = [_submit(procs, datas, wins) for datas, wins in batches]
    assert [p.failed() for _, p, _ in reversed(sent)] == [[0], [], [4], []]
    for (datas, wins), (lease, _, offsets) in zip(batches, sent):
        for k in (1, 7, 11):
            want = turbo.decode_window(datas[k], wins[k])
            got = lease.view[offsets[k]:offsets[k] + want.nbytes].reshape(want.shape)
            np.testing.assert_array_equal(got, want)


def test_helper_cores_leave_the_first_spare_cores_or_do_not_restrict(monkeypatch):
    import os

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {3, 1, 7, 5, 2, 9}, raising=False)
    assert helper_cores(2) == [3, 5, 7, 9]  # the lowest-numbered allowed cores stay free
    assert helper_cores(4) == [7, 9]
    assert helper_cores(5) is None  # one core left: better unrestricted than all helpers on it
    assert helper_cores(0) is None


def test_helpers_run_only_on_the_cores_given():
    import os

    core = min(os.sched_getaffinity(0))
    p = DecodeProcesses(2, 2, turbo.library_path(), pin=False, cores=[core])
    try:
        datas, wins = _batch(6, seed=4)
        lease, pending, offsets = _submit(p, datas, wins)
        assert pending.failed() == []  # (answered: the helpers are up and set)
        assert [os.sched_getaffinity(h.proc.pid) for h in p.helpers] == [{core}, {core}]
        want = turbo.decode_window(datas[5], wins[5])
        np.testing.assert_array_equal(lease.view[offsets[5]:offsets[5] + want.nbytes].reshape(want.shape), want)
    finally:
        p.close()


def test_close_stops_the_helpers():
    p = DecodeProcesses(2, 1, turbo.library_path(), pin=False)
    helpers = [h.proc for h in p.helpers]
    p.close()
    assert all(proc.poll() is not None for proc in helpers)


def test_turbo_suitable_picks_what_libjpeg_turbo_decodes_like_the_cpu_decoder():
    import io

    from PIL import Image

    from stoker.operators.decoders.mixed.helper_processes import turbo_suitable

    rgb = Image.fromarray(np.random.default_rng(0).integers(0, 255, (30, 40, 3), np.uint8))

    def enc(img, fmt="JPEG", **kw):
        b = io.BytesIO()
        img.save(b, format=fmt, **kw)
        return np.frombuffer(b.getvalue(), np.uint8)

    exif = Image.Exif()
    exif[0x0112] = 6  # orientation: the CPU decoder rotates, libjpeg-turbo would not
    assert turbo_suitable(enc(rgb)) and turbo_suitable(enc(rgb, progressive=True))
    assert turbo_suitable(enc(rgb.convert("L"))) and turbo_suitable(enc(rgb.convert("L"), progressive=True))
    assert not turbo_suitable(enc(rgb, exif=exif.tobytes()))
    assert not turbo_suitable(enc(rgb.convert("CMYK")))
    assert not turbo_suitable(enc(rgb, "PNG"))
    assert not turbo_suitable(enc(rgb)[:200])  # no end marker


def test_a_dead_helper_is_reported_not_waited_for(procs):
    """The mixed decoder turns this EOFError into "decode on the pool from now on"."""
    datas, wins = _batch(6, seed=4)
    procs.helpers[0].proc.kill()
    procs.helpers[0].proc.wait()
    with pytest.raises((EOFError, OSError)):
        _, pending, _ = _submit(procs, datas, wins)
        pending.failed()


def test_the_default_spare_cores_are_a_quarter_of_the_allowed_ones(monkeypatch):
    import os

    from stoker.operators.decoders.mixed.helper_processes import default_spare_cores

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(4, 16)), raising=False)
    assert default_spare_cores() == 3  # 12 allowed (of however many the machine has)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(6)), raising=False)
    assert default_spare_cores() == 0  # under 8: the helpers may use every core
