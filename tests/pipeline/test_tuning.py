"""num_threads="auto" / prefetch_queue_depth="auto": chosen at build from measured trials that leave
the user's batches as a fixed setting gives them (stoker.pipeline.tuning)."""

import logging
import time

import numpy as np
import pytest

import stoker.fn as fn
import stoker.types as types
from stoker import Pipeline, pipeline_def
from stoker.errors import PipelineBuildError
from stoker.pipeline import executor as executor_module
from stoker.pipeline import tuning


@pytest.fixture(autouse=True)
def short_tuning(stoker_settings):
    stoker_settings(tune_seconds=1.5)


def _make(root, batch=4, **kw):
    kw.setdefault("seed", 7)

    @pipeline_def(batch_size=batch, device_id=None, **kw)
    def p():
        jpegs, labels = fn.readers.file(file_root=root, random_shuffle=True, name="r")
        images = fn.decoders.image_random_crop(jpegs, output_type=types.RGB)
        images = fn.resize(images, resize_x=32, resize_y=32)
        images = fn.crop_mirror_normalize(images, mirror=fn.random.coin_flip(), dtype=types.FLOAT)
        return images, labels, fn.random.uniform(range=(0, 1))

    return p()


def _arrays(outs):
    return [np.array(o.at(i)) for o in outs for i in range(len(o))]


def _batches(pipe, n):
    out = [_arrays(pipe.run()) for _ in range(n)]
    pipe.close()
    return out


def _assert_same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        for u, v in zip(x, y):
            np.testing.assert_array_equal(u, v)


def test_auto_picks_a_measured_candidate_and_reports_it(sample_jpeg_dir, caplog):
    pipe = _make(sample_jpeg_dir, num_threads="auto", prefetch_queue_depth="auto")
    assert pipe.num_threads == "auto" and pipe.prefetch_queue_depth == "auto"
    with caplog.at_level(logging.INFO, logger="stoker"):
        pipe.build()
    report = pipe.tuning()
    assert report["why"] == "measured"
    assert sorted(report["auto"]) == ["num_threads", "prefetch_queue_depth"]
    tried = {(c["num_threads"], c["prefetch_queue_depth"]): c["batches_per_s"] for c in report["candidates"]}
    assert tried and all(n in tuning.thread_candidates(False) and d in (2, 3) for n, d in tried)
    chosen = (report["num_threads"], report["prefetch_queue_depth"])
    assert chosen == (pipe.num_threads, pipe.prefetch_queue_depth) and chosen in tried
    assert tried[chosen] == max(r for r in tried.values() if r is not None)
    assert report["seconds"] > 0
    assert "hw_decoder_load" in report
    assert any("auto-tuned" in r.getMessage() for r in caplog.records if r.name == "stoker")
    # one executor is open (the best trial's, kept), the others were closed
    assert [e for e in list(executor_module._open_executors) if e.graph is pipe._graph] == [pipe._executor]
    pipe.run()
    pipe.close()
    assert not [e for e in list(executor_module._open_executors) if e.graph is pipe._graph]


def test_first_batches_are_those_of_a_fixed_setting(sample_jpeg_dir):
    auto = _batches(_make(sample_jpeg_dir, num_threads="auto", prefetch_queue_depth="auto"), 8)
    fixed = _batches(_make(sample_jpeg_dir, num_threads=1, prefetch_queue_depth=2), 8)
    _assert_same(auto, fixed)  # 24 files at batch 4: 8 batches cross into the second epoch


def test_one_auto_setting_with_the_other_fixed(sample_jpeg_dir):
    pipe = _make(sample_jpeg_dir, num_threads=2, prefetch_queue_depth="auto")
    pipe.build()
    report = pipe.tuning()
    assert report["auto"] == ["prefetch_queue_depth"] and pipe.num_threads == 2
    assert {c["num_threads"] for c in report["candidates"]} == {2}
    assert pipe.prefetch_queue_depth in (2, 3)
    _assert_same(_batches(pipe, 3), _batches(_make(sample_jpeg_dir, num_threads=2), 3))
    fixed = _make(sample_jpeg_dir, num_threads=2, prefetch_queue_depth=3)
    assert fixed.tuning()["why"] == "fixed: given by the caller" and fixed.tuning()["candidates"] == []
    fixed.close()


def test_reader_helper_follows_each_trials_thread_count(sample_jpeg_dir, monkeypatch):
    # "8 cores": candidates 8, 4, 2, so the file reader's I/O helper process (4+ threads) is
    # started and stopped between trials; the batches stay those of a fixed setting.
    monkeypatch.setattr(tuning, "usable_cores", lambda: 8)
    pipe = _make(sample_jpeg_dir, num_threads="auto")
    pipe.build()
    assert pipe.tuning()["why"] == "measured"
    reader = pipe._graph.instance("r")
    assert reader._use_worker == (pipe.num_threads >= 4)
    _assert_same(_batches(pipe, 4), _batches(_make(sample_jpeg_dir, num_threads=2), 4))


def test_external_source_callback_falls_back_to_the_heuristic(sample_jpeg_dir):
    def sample(info):
        return np.full((3,), info.idx_in_epoch, dtype=np.int32)

    def make(**kw):
        @pipeline_def(batch_size=4, device_id=None, seed=3, **kw)
        def p():
            x = fn.external_source(source=sample, batch=False, name="src")
            jpegs, _ = fn.readers.file(file_root=sample_jpeg_dir, name="r")
            return x + 1, fn.decoders.image(jpegs), fn.random.uniform(range=(0, 1))
        return p()

    pipe = make(num_threads="auto", prefetch_queue_depth="auto")
    pipe.build()
    report = pipe.tuning()
    assert report["why"].startswith("heuristic:") and "callback" in report["why"]
    assert report["candidates"] == []
    assert pipe.num_threads == tuning.heuristic_threads(False) and pipe.prefetch_queue_depth == 2
    _assert_same(_batches(pipe, 3), _batches(make(num_threads=1), 3))


def test_no_reader_falls_back_to_the_heuristic():
    @pipeline_def(batch_size=2, device_id=None, seed=1, num_threads="auto")
    def p():
        return fn.random.uniform(range=(0, 1), shape=(2,))

    pipe = p()
    pipe.build()
    assert pipe.tuning()["why"].startswith("heuristic: no reader")
    pipe.close()


@pytest.mark.parametrize("arg", ["num_threads", "prefetch_queue_depth"])
@pytest.mark.parametrize("value", ["fast", 0, -2, 1.5, True])
def test_invalid_values_name_the_argument(arg, value):
    with pytest.raises(PipelineBuildError, match=arg):
        Pipeline(batch_size=2, device_id=None, **{arg: value})


def test_checkpoint_and_restore_after_an_auto_build(sample_jpeg_dir):
    pipe = _make(sample_jpeg_dir, num_threads="auto", prefetch_queue_depth="auto", enable_checkpointing=True)
    for _ in range(3):
        pipe.run()
    state = pipe.checkpoint()
    ref = [_arrays(pipe.run()) for _ in range(3)]
    pipe.restore_checkpoint(state)  # in place
    _assert_same([_arrays(pipe.run()) for _ in range(3)], ref)
    pipe.close()
    resumed = _make(sample_jpeg_dir, num_threads="auto", prefetch_queue_depth="auto", checkpoint=state)
    assert resumed.tuning()["why"] == "measured"  # trials ran from the checkpoint's positions
    _assert_same(_batches(resumed, 3), ref)


def test_tuning_time_is_bounded_by_the_setting(sample_jpeg_dir, stoker_settings):
    stoker_settings(tune_seconds=0.3)
    pipe = _make(sample_jpeg_dir, batch=8, num_threads="auto", prefetch_queue_depth="auto")
    t0 = time.perf_counter()
    pipe.build()
    took = time.perf_counter() - t0
    report = pipe.tuning()
    assert report["seconds"] < 0.3 + 1.0  # the budget, and at most the batch in flight
    assert took < report["seconds"] + 1.0  # (listing and the rest of the build)
    pipe.close()
    stoker_settings(tune_seconds=0)
    pipe = _make(sample_jpeg_dir, num_threads="auto", prefetch_queue_depth="auto")
    pipe.build()
    report = pipe.tuning()
    assert report["why"] == "heuristic: STOKER_TUNE_SECONDS is 0" and report["candidates"] == []
    assert report["seconds"] < 0.5
    pipe.close()


def test_serialize_keeps_auto_and_debug_mode_uses_the_heuristic(sample_jpeg_dir):
    pipe = _make(sample_jpeg_dir, num_threads="auto", prefetch_queue_depth="auto")
    pipe.build()
    again = Pipeline.deserialize(pipe.serialize())
    assert again.num_threads == "auto" and again.prefetch_queue_depth == "auto"
    pipe.close()

    @pipeline_def(batch_size=2, device_id=None, seed=1, num_threads="auto", debug=True)
    def p():
        return fn.random.uniform(range=(0, 1), shape=(2,))

    dbg = p()
    dbg.run()
    assert dbg.tuning()["why"] == "heuristic: debug mode" and isinstance(dbg.num_threads, int)
    dbg.close()
