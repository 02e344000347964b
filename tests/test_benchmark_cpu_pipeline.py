"""benchmarks/cpu_pipeline.py's pipelines build and run in stoker on a few images: every kind gives
float CHW batches of 224 x 224 (detection: 384 x 384 HWC), so a benchmark run measures the
pipelines it names."""

import os
import sys

import cv2
import numpy as np
import pytest

BENCH = os.path.join(os.path.dirname(__file__), "..", "benchmarks")
sys.path.insert(0, BENCH)
import cpu_pipeline  # noqa: E402


@pytest.fixture(scope="module")
def image_folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("cpu_pipeline_images")
    rng = np.random.default_rng(0)
    for k in range(4):
        folder = root / f"class{k % 2}"
        folder.mkdir(exist_ok=True)
        h, w = (int(v) for v in rng.integers(180, 300, 2))
        cv2.imwrite(str(folder / f"{k}.jpg"), rng.integers(0, 256, (h, w, 3), np.uint8))
    return str(root)


@pytest.mark.parametrize("kind", ["train", "val", *cpu_pipeline.ZOO_KINDS])
def test_every_kind_runs_in_stoker(image_folder, kind):
    step = cpu_pipeline.dali_style("stoker", image_folder, kind, 2, 1)
    images, labels = step()
    shapes = {tuple(np.asarray(s).shape) for s in images.samples()}
    assert shapes == ({(384, 384, 3)} if kind == "detection" else {(3, 224, 224)})
    assert all(np.asarray(s).dtype == np.float32 for s in images.samples())
    assert len(labels) == 2
