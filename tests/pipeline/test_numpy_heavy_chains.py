"""Fused chains with an operator that ``prefers_worker_processes`` (the speech front end's spectrogram,
mel bank, MFCC) run in chain worker processes from 2 threads on, by default; image chains keep the
8-thread rule. Outputs are those of the in-process chain, bit for bit."""

import io
import sys
import time

import numpy as np
import pytest

import stoker.fn as fn
import stoker.types as types
from stoker import pipeline_def
from stoker.pipeline import fusion
from stoker.pipeline.stage_setup import chain_process_count

sf = pytest.importorskip("soundfile")
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="chain workers need Linux")


@pytest.mark.parametrize("threads, cpus, heavy, expected", [
    (2, 2, True, 2), (4, 2, True, 2), (3, 16, True, 3), (1, 16, True, 0), (2, 1, True, 0),
    (16, 16, True, 15), (2, 2, False, 0), (7, 16, False, 0), (8, 16, False, 7)])
def test_auto_count_with_and_without_numpy_heavy_chains(stoker_settings, threads, cpus, heavy, expected):
    stoker_settings(cpu_processes=None)
    assert chain_process_count(threads, cpus, numpy_heavy=heavy) == expected


def test_the_variable_still_wins(stoker_settings):
    stoker_settings(cpu_processes=0)
    assert chain_process_count(4, 4, numpy_heavy=True) == 0
    stoker_settings(cpu_processes=3)
    assert chain_process_count(2, 2, numpy_heavy=False) == 3


def _wav_files(tmp_path, n=10):
    rng = np.random.default_rng(4)
    paths = []
    for i in range(n):
        t = np.arange(int(rng.integers(1600, 9000))) / 16000
        wave = 0.3 * np.sin(2 * np.pi * (200 + 40 * i) * t) + 0.01 * rng.standard_normal(t.size)
        buf = io.BytesIO()
        sf.write(buf, wave.astype(np.float32), 16000, format="WAV", subtype="PCM_16")
        path = tmp_path / f"u{i:02d}.wav"
        path.write_bytes(buf.getvalue())
        paths.append(str(path))
    return paths


def _front_end(files):
    @pipeline_def(batch_size=4, num_threads=2, device_id=None, seed=1)
    def pipe():
        data, _ = fn.readers.file(files=files, name="r")
        audio, _ = fn.decoders.audio(data, dtype=types.FLOAT, downmix=True)
        spec = fn.spectrogram(fn.preemphasis_filter(audio), nfft=256, window_length=200, window_step=80)
        return fn.normalize(fn.to_decibels(fn.mel_filter_bank(spec, nfilter=32), cutoff_db=-80.0), axes=[1])

    return pipe()


def _batches(pipe, count):
    out = []
    for _ in range(count):
        (x,) = pipe.run()
        out.append([np.array(x.at(i)) for i in range(len(x))])
    return out


def test_speech_front_end_runs_in_workers_at_two_threads_with_the_same_outputs(tmp_path, stoker_settings,
                                                                               monkeypatch):
    files = _wav_files(tmp_path)
    monkeypatch.setattr("stoker.pipeline.stage_setup.usable_cores", lambda: 2)
    stoker_settings(cpu_processes=0)
    ref_pipe = _front_end(files)
    ref_pipe.build()
    try:
        assert fusion.numpy_heavy(ref_pipe._executor.graph, ref_pipe._executor._cpu_steps)
        want = _batches(ref_pipe, 5)
    finally:
        ref_pipe.close()
    stoker_settings(cpu_processes=None)
    pipe = _front_end(files)
    pipe.build()
    try:
        assert pipe._executor._chain_processes == 2
        got = _batches(pipe, 1)
        workers = pipe._executor._chain_workers
        deadline = time.monotonic() + 60
        while not workers.ready() and time.monotonic() < deadline:
            time.sleep(0.05)  # (until they have started, the pipeline computes its batches itself)
        got += _batches(pipe, 4)
        assert workers.batches_done > 0  # the chain did go to the workers
    finally:
        pipe.close()
    for a, b in zip(got, want):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x, y)


def test_an_image_chain_at_two_threads_stays_in_process(tmp_path, stoker_settings, monkeypatch):
    import cv2

    for i in range(4):
        cv2.imwrite(str(tmp_path / f"i{i}.jpg"), np.full((20, 30, 3), 40 * i, np.uint8))
    monkeypatch.setattr("stoker.pipeline.stage_setup.usable_cores", lambda: 2)
    stoker_settings(cpu_processes=None)

    @pipeline_def(batch_size=2, num_threads=2, device_id=None, seed=1)
    def pipe():
        jpegs, _ = fn.readers.file(files=[str(p) for p in sorted(tmp_path.glob("*.jpg"))], name="r")
        return fn.crop_mirror_normalize(fn.resize(fn.decoders.image(jpegs), resize_x=16, resize_y=16),
                                        dtype=types.FLOAT)

    p = pipe()
    p.build()
    try:
        assert not fusion.numpy_heavy(p._executor.graph, p._executor._cpu_steps)
        assert p._executor._chain_processes == 0
    finally:
        p.close()
