"""on_error: a bad sample never kills a run; "skip" keeps batches full with every good sample once."""

import os

import cv2
import numpy as np
import pytest

import stoker.fn as fn
from stoker import pipeline_def
from stoker.errors import OperatorError


@pytest.fixture
def dataset_with_bad_files(tmp_path):
    """8 files in one class: 6 good JPEG/PNG images and 2 bad ones (truncated, zero bytes)."""
    root = tmp_path / "data" / "class_0"
    root.mkdir(parents=True)
    rng = np.random.default_rng(0)
    good = []
    for i in range(8):
        path = root / f"img_{i}.jpg"
        img = rng.integers(0, 255, (20 + i, 30, 3), dtype=np.uint8)
        if i == 5:  # a PNG named .jpg: decodes fine
            ok, buf = cv2.imencode(".png", img)
        else:
            ok, buf = cv2.imencode(".jpg", img)
        data = buf.tobytes()
        if i == 2:
            data = data[: len(data) // 3]  # truncated
        if i == 6:
            data = b""  # zero bytes
        path.write_bytes(data)
        if i not in (2, 6):
            good.append(f"img_{i}.jpg")
    return str(tmp_path / "data"), good


def make_pipe(root, on_error, batch=3):
    @pipeline_def(batch_size=batch, num_threads=2, device_id=None, seed=0, on_error=on_error)
    def p():
        jpegs, labels = fn.readers.file(file_root=root)
        return fn.decoders.image(jpegs), fn.get_property(jpegs, key="source_info")

    pipe = p()
    pipe.build()
    return pipe


def names(batch):
    return [os.path.basename(bytes(np.asarray(batch.at(i))).decode()) for i in range(len(batch))]


def test_raise_names_the_file(dataset_with_bad_files):
    root, _ = dataset_with_bad_files
    pipe = make_pipe(root, "raise")
    with pytest.raises(OperatorError) as info:
        pipe.run()
    assert "img_2.jpg" in str(info.value) and "decoders.image" in str(info.value)
    pipe.close()


def test_skip_keeps_batches_full_and_each_good_sample_once(dataset_with_bad_files):
    root, good = dataset_with_bad_files
    pipe = make_pipe(root, "skip")
    seen = []
    for _ in range(2):  # 6 good samples = 2 full batches of 3
        images, sources = pipe.run()
        assert len(images) == 3 and len(sources) == 3
        seen += names(sources)
        for i in range(3):
            assert images.at(i).ndim == 3
    assert sorted(seen) == sorted(good)
    report = [r for r in pipe.error_report() if r["iteration"] < 2]
    assert sorted(os.path.basename(r["source"]) for r in report) == ["img_2.jpg", "img_6.jpg"]
    assert all(r["action"] == "skipped" and r["operator"] == "decoders.image" and r["reason"] for r in report)
    pipe.close()


def test_substitute_keeps_positions_filled(dataset_with_bad_files):
    root, good = dataset_with_bad_files
    pipe = make_pipe(root, "substitute", batch=4)
    images, sources = pipe.run()  # files 0..3, file 2 is bad
    got = names(sources)
    assert len(images) == 4 and "img_2.jpg" not in got
    assert set(got) <= set(good)
    # prefetched iterations may already have reported their own bad files: look at iteration 0
    assert [r["action"] for r in pipe.error_report() if r["iteration"] == 0] == ["substituted"]
    pipe.close()
