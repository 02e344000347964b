"""The mixed decoders' hardware path on the null CUDA device, with a fake engine that decodes with
OpenCV (libjpeg-turbo) into the slots nvJPEG would write. Covers, without a GPU, what the GPU
tests cannot isolate: the split between engines and pool, the flat buffer's layout, a refused
engines' call redone on the host (also in the CPU stage under on_error="skip"), and a dropped
batch's cancel. Pixels against the real engines: tests/operators/decoders/test_mixed_decode_gpu.py."""

import ctypes
import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import cv2
import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
import null_device  # noqa: E402

from stoker.backend.nvjpeg import NvjpegUnavailable  # noqa: E402
from stoker.operators.decoders.mixed.common import cpu_decode  # noqa: E402


class FakeEngines:
    """Stands in for :class:`stoker.backend.nvjpeg.HardwareDecoder`: the same stage/run/discard
    protocol; ``run`` decodes each window with OpenCV and copies it to its destination pointer
    (host memory under the null device)."""

    refuse = False  # True: every call fails as nvJPEG's would (NvjpegUnavailable)

    def __init__(self, device_id, share_handle=None):
        self.last_run = (0.0, 0.0, 0.0)
        self.calls = self.discarded = 0

    def stage(self, datas, windows, fixed_batch=0, located=None):
        return list(datas), np.asarray(windows, np.int64).reshape(-1, 4)

    def run(self, call, dst_ptrs, stream, ready=None):
        self.calls += 1
        if FakeEngines.refuse:
            raise NvjpegUnavailable("nvjpegDecodeBatchedEx failed (nvjpegStatus 6)")
        for data, win, ptr in zip(call[0], call[1].tolist(), np.asarray(dst_ptrs).tolist()):
            img = np.ascontiguousarray(cpu_decode(data, False, win))
            ctypes.memmove(int(ptr), img.ctypes.data, img.nbytes)

    def discard(self, call):
        self.discarded += 1

    def close(self):
        pass


@pytest.fixture
def fake(monkeypatch):
    from stoker.backend import nvjpeg
    from stoker.operators.decoders.mixed import hardware

    def header(data):  # nvImageCodec's header read, by OpenCV (no GPU packages here)
        img = cv2.imdecode(np.asarray(data, np.uint8), cv2.IMREAD_UNCHANGED)
        return (None, "", 0, 0) if img is None else (None, "other", img.shape[0], img.shape[1])

    class Pinned(bytearray):  # CuPy's pinned memory has the address as .ptr (the null device's lacks it)
        @property
        def ptr(self):
            return ctypes.addressof(ctypes.c_char.from_buffer(self))

    monkeypatch.setattr(nvjpeg, "HardwareDecoder", FakeEngines)
    monkeypatch.setattr(hardware, "header", header)
    monkeypatch.setattr(FakeEngines, "refuse", False)
    with null_device.installed() as cp:
        monkeypatch.setattr(cp.cuda, "alloc_pinned_memory", lambda size: Pinned(int(size)))
        yield cp


def _write_jpegs(root, count: int, seed: int, largest: int) -> None:
    """``count`` random RGB JPEGs of 30 to ``largest`` - 1 pixels a side in two class folders."""
    rng = np.random.default_rng(seed)
    for k in range(count):
        folder = root / f"c{k % 2}"
        folder.mkdir(exist_ok=True)
        h, w = rng.integers(30, largest, 2)
        cv2.imwrite(str(folder / f"{k}.jpg"), rng.integers(0, 255, (h, w, 3), np.uint8))


def _op(cpu_share=0.0, on_error=None):
    from stoker.operators.decoders import mixed

    op = SimpleNamespace(args={"output_type": None, "on_error": on_error}, op_seed=7,
                         instance_name="decoders.image", origin="test")
    op.sample_args = lambda arg_inputs, i: op.args
    st = op._mixed_state = mixed.DecoderState(0)
    st.cpu_share, st.share_auto, st.procs_count, st.hw_problem = cpu_share, False, 0, None
    return op


def _batch(cp, n, pool, on_error="raise"):
    from stoker.operators.base import BatchContext

    batch = BatchContext(batch_size=0, stream=cp.cuda.Stream(non_blocking=True), device_id=0, pool=pool)
    batch.sources = [f"s{i}" for i in range(n)]
    batch.on_error = on_error
    return batch


def _encoded(rng, n=7):
    """Baseline JPEGs (the engines'), a progressive one and a PNG (the host's)."""
    out = []
    for k in range(n):
        h, w = rng.integers(20, 70, 2)
        img = rng.integers(0, 255, (h, w, 3), np.uint8)
        if k == 3:
            ok, enc = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_PROGRESSIVE, 1])
        elif k == 5:
            ok, enc = cv2.imencode(".png", img)
        else:
            ok, enc = cv2.imencode(".jpg", img)
        out.append(enc.reshape(-1))
    return out


def _decode(op, kind, enc, batch, prepare_first=False):
    from stoker.operators.decoders import mixed
    from stoker.tensors import TensorListCPU

    inputs = [TensorListCPU(enc)]
    if prepare_first:  # as the executor does: the host half in the CPU stage
        batch.prepared = mixed.prepare(op, kind, batch, inputs, {})
    out = mixed.mixed_decode(op, kind, batch, inputs, {})[0]
    return [np.asarray(s.get()) for s in out.samples()], out


@pytest.mark.parametrize("share", [0.0, 0.5])
@pytest.mark.parametrize("kind", ["image", "image_random_crop"])
def test_engines_and_pool_fill_one_flat_buffer(fake, kind, share):
    from stoker.operators.base import SampleContext
    from stoker.operators.random.crop_window import sample_crop_window

    enc = _encoded(np.random.default_rng(3))
    op = _op(share)
    with ThreadPoolExecutor(2) as pool:
        got, tl = _decode(op, kind, enc, _batch(fake, len(enc), pool), prepare_first=True)
    assert tl._flat is not None and tl.source_info() == [f"s{i}" for i in range(len(enc))]
    for i, (g, data) in enumerate(zip(got, enc)):
        want = cpu_decode(data, False, None)
        if kind == "image_random_crop":
            y, x, h, w = sample_crop_window(SampleContext(i, 0, op.op_seed, f"s{i}").rng, *want.shape[:2])
            want = want[y:y + h, x:x + w]
        np.testing.assert_array_equal(g, want)
    engines = op._mixed_state.stats.timing["hw_images"]
    assert engines == (5 if share == 0.0 else 3)  # of the 5 baseline JPEGs, round(2.5) = 2 moved to the host


@pytest.mark.parametrize("on_error", ["raise", "skip"])
def test_a_refused_engines_call_is_redone_on_the_host(fake, on_error):
    FakeEngines.refuse = True
    enc = _encoded(np.random.default_rng(4))
    op = _op(on_error=on_error)
    with ThreadPoolExecutor(2) as pool:
        batch = _batch(fake, len(enc), pool, on_error)
        got, tl = _decode(op, "image", enc, batch, prepare_first=True)
        # under skip the CPU stage waited for the call and redid its images there
        assert (batch.prepared.redone is not None) == (on_error == "skip")
    assert tl._flat is not None and not batch.failures
    for g, data in zip(got, enc):
        np.testing.assert_array_equal(g, cpu_decode(data, False, None))


def test_a_bad_sample_on_the_pool_is_recorded_under_skip(fake):
    enc = _encoded(np.random.default_rng(5))
    enc[5] = np.frombuffer(b"\x89PNG\r\n\x1a\n not a png at all", np.uint8)
    op = _op(on_error="skip")
    with ThreadPoolExecutor(2) as pool:
        batch = _batch(fake, len(enc), pool, "skip")
        from stoker.operators.decoders import mixed
        from stoker.tensors import TensorListCPU

        mixed.prepare(op, "image", batch, [TensorListCPU(enc)], {})
    assert list(batch.failures) == [5] and "s5" in str(batch.failures[5])


def test_a_dropped_batch_gives_its_permit_back_and_skips_the_call(fake):
    from stoker.operators.decoders import mixed
    from stoker.pipeline.executor import cancel_prepared
    from stoker.tensors import TensorListCPU

    enc = _encoded(np.random.default_rng(6))
    op = _op()
    st = op._mixed_state
    with ThreadPoolExecutor(2) as pool:
        batch = _batch(fake, len(enc), pool)
        ahead = st.ahead._value
        gate = threading.Event()
        st.submit(gate.wait)  # the decoder's thread is busy: the batch's job waits behind this
        prep = mixed.prepare(op, "image", batch, [TensorListCPU(enc)], {})
        cancel_prepared(prep)  # the executor drops the batch before its GPU stage
        gate.set()
        assert prep.engines.result() == (None, None)  # the job ran after the drop: no call
        assert st.lane.decoder.calls == 0 and st.lane.decoder.discarded == 1
    assert st.ahead._value == ahead


def test_the_engines_start_at_build_on_a_thread_of_their_own(fake, monkeypatch, tmp_path):
    """A mixed decoder makes its hardware decoder while the pipeline builds, once, on its own
    thread; the first batch uses that one."""
    import stoker.fn as fn
    from stoker import pipeline_def

    made = []

    class SlowEngines(FakeEngines):
        def __init__(self, device_id, share_handle=None):
            made.append(threading.current_thread().name)
            threading.Event().wait(0.2)  # (nvJPEG's hardware backend takes about 0.5 s to start)
            super().__init__(device_id, share_handle)

    from stoker.backend import nvjpeg

    monkeypatch.setattr(nvjpeg, "HardwareDecoder", SlowEngines)
    path = tmp_path / "a.jpg"
    cv2.imwrite(str(path), np.full((16, 24, 3), 90, np.uint8))

    @pipeline_def(batch_size=2, num_threads=1, device_id=0, seed=1)
    def pipe():
        data = fn.external_source(source=lambda info: np.fromfile(path, np.uint8), batch=False)
        return fn.decoders.image(data, device="mixed")

    p = pipe()
    p.build()
    try:
        for _ in range(200):  # (the thread was started at build; give it time to begin)
            if made:
                break
            threading.Event().wait(0.01)
        assert made == ["stoker-nvjpeg-start"]
        decoder = next(i for i in p._graph.instances.values() if hasattr(i, "_mixed_state"))
        p.run()
        assert made == ["stoker-nvjpeg-start"] and isinstance(decoder._mixed_state.hw, SlowEngines)
    finally:
        p.close()


def test_an_ssd_like_pipeline_gives_the_same_batches_with_two_cpu_lanes(fake, tmp_path):
    """random_bbox_crop in the batch helpers, its windows into a mixed image_slice on the (fake)
    engines: two CPU-stage lanes (stoker.pipeline.cpu_lanes) give one lane's batches."""
    import stoker.fn as fn
    from stoker import pipeline_def, settings

    _write_jpegs(tmp_path, 12, seed=11, largest=80)
    boxes = [np.array([[0.1, 0.1, 0.5, 0.6], [0.3, 0.2, 0.9, 0.8]], np.float32)] * 4
    labels = [np.array([1, 2], np.int32)] * 4

    def run(lanes):
        @pipeline_def(batch_size=4, num_threads=2, device_id=0, seed=3)
        def pipe():
            jpegs, _ = fn.readers.file(file_root=str(tmp_path), random_shuffle=True)
            b = fn.external_source(source=lambda info: boxes[info.idx_in_batch], batch=False)
            lab = fn.external_source(source=lambda info: labels[info.idx_in_batch], batch=False)
            anchor, shape, b, lab = fn.random_bbox_crop(b, lab, bbox_layout="xyXY", allow_no_crop=True,
                                                        thresholds=[0.1, 0.5], scaling=[0.3, 1.0])
            return fn.decoders.image_slice(jpegs, anchor, shape, device="mixed"), b

        with settings.override(batch_offload=True, cpu_lanes=lanes):
            p = pipe()
            p.build()
            try:
                assert p._executor._cpu_lanes == lanes
                helpers = p._executor._batch_offload
                for _ in range(600):  # (so that the batches do go through the helpers)
                    if helpers.is_ready():
                        break
                    threading.Event().wait(0.05)
                out = []
                for _ in range(5):
                    images, b = p.run()
                    out.append(([np.asarray(s.get()) for s in images.samples()], [np.array(x) for x in b.samples()]))
                assert helpers.offloaded > 0
                assert any(x.size for x in out[0][0])
                return out
            finally:
                p.close()

    one, two = run(1), run(2)
    for (ia, ba), (ib, bb) in zip(one, two):
        for x, y in zip(ia + ba, ib + bb):
            np.testing.assert_array_equal(x, y)


def test_two_pipelines_in_one_process_give_their_own_batches_at_once(fake, tmp_path):
    """A training and a validation pipeline in one process (a common set-up; two pipelines once met
    a race in the decode helpers' bookkeeping): run at the same time from two threads, each gives
    the batches it gives alone."""
    from gpu_pipelines import assert_alone_equals_together

    import stoker.fn as fn
    from stoker import pipeline_def

    _write_jpegs(tmp_path, 16, seed=5, largest=90)

    def make(kind):
        @pipeline_def(batch_size=4, num_threads=2, device_id=0, seed=9 if kind == "train" else 4)
        def pipe():
            jpegs, labels = fn.readers.file(file_root=str(tmp_path), random_shuffle=kind == "train")
            if kind == "train":
                return fn.decoders.image_random_crop(jpegs, device="mixed"), labels
            return fn.decoders.image(jpegs, device="mixed"), labels

        p = pipe()
        p.build()
        return p

    def batches(p, count=6):
        out = []
        for _ in range(count):
            images, labels = p.run()
            out.append([np.asarray(s.get()) for s in images.samples()] + [np.array(x) for x in labels.samples()])
        return out

    assert_alone_equals_together(make, batches)


def test_a_split_gpu_stage_gives_the_batches_of_one_thread(fake, tmp_path):
    """STOKER_SPLIT_GPU_STAGE: the decoder's device half on one thread and the GPU operators after
    it on another (stage_setup.split_gpu_nodes) give the batches of the one-thread stage, in order,
    with prefetching; cast and arithmetic compute for real on the null device."""
    import stoker.fn as fn
    import stoker.types as types
    from stoker import pipeline_def, settings

    _write_jpegs(tmp_path, 10, seed=3, largest=70)

    def run(split):
        @pipeline_def(batch_size=3, num_threads=2, device_id=0, seed=5, prefetch_queue_depth=3)
        def pipe():
            jpegs, labels = fn.readers.file(file_root=str(tmp_path), random_shuffle=True)
            x = fn.decoders.image_random_crop(jpegs, device="mixed")
            return fn.cast(x, dtype=types.FLOAT) * 0.5 + labels.gpu(), labels

        with settings.override(split_gpu_stage=split):
            p = pipe()
            p.build()
            try:
                threads = [t.name for t in p._executor._threads]
                out = []
                for _ in range(7):  # (10 files, batches of 3: passes wrap, as in training)
                    images, labels = p.run()
                    out.append([np.asarray(s.get()) for s in images.samples()]
                               + [np.array(x) for x in labels.samples()])
                return threads, out
            finally:
                p.close()

    (one_threads, one), (two_threads, two) = run(False), run(True)
    assert "stoker-gpu-ops" in two_threads and "stoker-gpu-ops" not in one_threads
    assert any(x.size for x in one[0])
    for a, b in zip(one, two, strict=True):
        for x, y in zip(a, b, strict=True):
            np.testing.assert_array_equal(x, y)
