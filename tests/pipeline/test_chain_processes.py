"""Fused CPU chains in worker processes (STOKER_CPU_PROCESSES, stoker.pipeline.chain_processes):
the same batches bit for bit as the in-process chain, bad files skipped or raised exactly as in
process, and chains whose intermediate outputs are read elsewhere left in process."""

import sys
import time

import cv2
import numpy as np
import pytest
from generated_images import write_class_folders

import stoker.fn as fn
from stoker import pipeline_def, types
from stoker.errors import OperatorError


def jpeg_bytes(img):
    ok, buf = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, 90])
    assert ok
    return buf.tobytes()


def photo(h=48, w=64, seed=0):
    rng = np.random.default_rng(seed)
    small = rng.integers(0, 256, (max(2, h // 6), max(2, w // 6), 3), np.uint8)
    return cv2.resize(small, (w, h), interpolation=cv2.INTER_CUBIC)


pytestmark = [pytest.mark.skipif(not sys.platform.startswith("linux"), reason="memfd shared memory"),
              pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return write_class_folders(tmp_path_factory.mktemp("chain_data"), 10,
                               lambda c, i: jpeg_bytes(photo(40 + 7 * i, 60 + 5 * c, seed=10 * c + i)))


def _pipe(root, on_error="raise", also_decoded=False):
    @pipeline_def(batch_size=6, num_threads=2, device_id=None, seed=5, on_error=on_error)
    def p():
        jpegs, labels = fn.readers.file(file_root=str(root), random_shuffle=True, name="r")
        decoded = fn.decoders.image_random_crop(jpegs, output_type=types.RGB)
        images = fn.resize(decoded, resize_x=32, resize_y=24)
        images = fn.crop_mirror_normalize(images, dtype=types.FLOAT, mean=[128.0] * 3, std=[64.0] * 3,
                                          mirror=fn.random.coin_flip())
        outs = (images, labels, fn.get_property(jpegs, key="source_info"))
        return (*outs, decoded) if also_decoded else outs

    pipe = p()
    pipe.build()
    return pipe


def _outputs(pipe):
    return [[np.asarray(out.at(i)).copy() for i in range(len(out))] for out in pipe.run()]


def _wait_ready(pipe):
    """Until the workers have started, the pipeline computes its batches itself."""
    workers = pipe._executor._chain_workers
    deadline = time.monotonic() + 60
    while workers is not None and not workers.ready() and time.monotonic() < deadline:
        time.sleep(0.05)


def _epochs(root, stoker_settings, processes, iterations=8, **kw):
    stoker_settings(cpu_processes=processes)
    pipe = _pipe(root, **kw)
    try:
        runs = [_outputs(pipe)]
        _wait_ready(pipe)
        runs += [_outputs(pipe) for _ in range(iterations - 1)]
        workers = pipe._executor._chain_workers
        used = workers is not None and workers.batches_done > 0
        return runs, used, list(pipe.error_report())
    finally:
        pipe.close()


def _assert_same(a, b):
    assert len(a) == len(b)
    for ra, rb in zip(a, b):
        for oa, ob in zip(ra, rb):
            assert len(oa) == len(ob)
            for x, y in zip(oa, ob):
                np.testing.assert_array_equal(x, y)


def test_worker_processes_give_the_in_process_batches_bit_for_bit(data, stoker_settings):
    ref, used_ref, _ = _epochs(data, stoker_settings, 0)
    got, used, _ = _epochs(data, stoker_settings, 2)
    assert used and not used_ref
    _assert_same(ref, got)


def test_a_bad_file_is_skipped_as_in_process(data, tmp_path, stoker_settings):
    import shutil

    root = tmp_path / "d"
    shutil.copytree(data, root)
    (root / "c1" / "zz_broken.jpg").write_bytes(jpeg_bytes(photo())[:70])
    ref, _, ref_report = _epochs(root, stoker_settings, 0, on_error="skip")
    got, used, report = _epochs(root, stoker_settings, 2, on_error="skip")
    assert used
    _assert_same(ref, got)
    assert [r["source"] for r in report] == [r["source"] for r in ref_report] and report
    assert all("zz_broken.jpg" in r["source"] for r in report)


def test_a_bad_file_raises_naming_it(data, tmp_path, stoker_settings):
    import shutil

    root = tmp_path / "d"
    shutil.copytree(data, root)
    (root / "c0" / "0_broken.jpg").write_bytes(b"\xff\xd8 not much of a jpeg")
    stoker_settings(cpu_processes=2)
    pipe = _pipe(root)
    try:
        with pytest.raises(OperatorError, match="0_broken.jpg"):
            for _ in range(4):
                pipe.run()
    finally:
        pipe.close()


def test_a_chain_whose_intermediate_is_an_output_stays_in_process(data, stoker_settings):
    ref, _, _ = _epochs(data, stoker_settings, 0, iterations=2, also_decoded=True)
    got, used, _ = _epochs(data, stoker_settings, 2, iterations=2, also_decoded=True)
    _assert_same(ref, got)
    from stoker.pipeline import chain_processes

    stoker_settings(cpu_processes=0)
    pipe = _pipe(data, also_decoded=True)
    try:
        steps = [s for s in pipe._executor._cpu_steps if hasattr(s, "chain")]
        assert steps and not any(chain_processes.eligible(s, pipe._executor.graph) for s in steps)
    finally:
        pipe.close()


@pytest.mark.parametrize("env, threads, cpus, expected", [
    (None, 2, 16, 0), (None, 7, 16, 0), (None, 8, 16, 7), (None, 16, 16, 15), (None, 32, 16, 15),
    (None, 16, 4, 0), ("0", 16, 16, 0), ("3", 2, 2, 3), ("auto", 12, 64, 11)])
def test_process_count_follows_the_variable_threads_and_cores(stoker_settings, env, threads, cpus, expected):
    from stoker.pipeline.executor import chain_process_count

    stoker_settings(cpu_processes=env)
    assert chain_process_count(threads, cpus) == expected


def test_a_killed_worker_loses_nothing_and_the_workers_restart(data, stoker_settings, caplog):
    ref, _, _ = _epochs(data, stoker_settings, 0, iterations=7)
    stoker_settings(cpu_processes=2)
    pipe = _pipe(data)
    try:
        got = [_outputs(pipe)]
        _wait_ready(pipe)
        workers = pipe._executor._chain_workers
        old = workers.workers[0].proc
        old.kill()
        old.wait()
        with caplog.at_level("WARNING", logger="stoker"):
            for _ in range(6):  # the first ones may have been computed (prefetched) before the kill
                got.append(_outputs(pipe))
        assert "restarting the workers" in caplog.text
        assert all(w.proc.poll() is None for w in workers.workers) and workers.workers[0].proc is not old
    finally:
        pipe.close()
    _assert_same(ref, got)


@pytest.mark.parametrize("value", ["many", "-2", "1.5"])
def test_a_bad_process_count_names_the_variable(stoker_environ, stoker_settings, value):
    from stoker.errors import PipelineBuildError
    from stoker.pipeline.executor import chain_process_count

    stoker_environ(STOKER_CPU_PROCESSES=value)
    with pytest.raises(PipelineBuildError, match="STOKER_CPU_PROCESSES"):
        chain_process_count(16, 16)
    with pytest.raises(PipelineBuildError, match="STOKER_CPU_PROCESSES"):
        stoker_settings(cpu_processes=value)
