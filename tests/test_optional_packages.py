"""A pipeline's pixels do not depend on which optional packages are installed.

The same CPU pipeline (decoders, every resize form, random_resized_crop, warp, crop_mirror_normalize)
runs in three fresh processes: with torch importable, with torch imported by the script before
stoker (as a training script does), and with torch made unimportable (a ``torch`` package on
``PYTHONPATH`` whose import fails, as on a machine without it). The outputs must be equal to the
bit. torch's resize kernel is an explicit opt-in (``STOKER_TORCH_RESIZE=1``) for that reason.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest
from generated_images import smooth, write_class_folders

import stoker

STOKER_ROOT = str(Path(stoker.__file__).resolve().parent.parent)

SCRIPT = r'''
import hashlib, json, sys
if sys.argv[2] == "import-torch":
    import torch  # noqa: F401  (a training script imports it before stoker)
import stoker.fn as fn
import stoker.types as types
from stoker import pipeline_def


@pipeline_def(batch_size=6, num_threads=2, device_id=None, seed=7)
def pipe():
    jpegs, labels = fn.readers.file(file_root=sys.argv[1], random_shuffle=True)
    full = fn.decoders.image(jpegs, output_type=types.RGB)
    crop = fn.decoders.image_random_crop(jpegs, output_type=types.RGB)
    outs = [
        fn.resize(full, resize_x=224, resize_y=224),
        fn.resize(full, resize_shorter=97),
        fn.resize(full, resize_longer=150, interp_type=types.INTERP_CUBIC),
        fn.resize(crop, size=(64, 80)),
        fn.random_resized_crop(full, size=(56, 56)),
        fn.rotate(full, angle=fn.random.uniform(range=(-20.0, 20.0))),
        fn.crop_mirror_normalize(fn.resize(crop, resize_shorter=60), crop=(48, 48), dtype=types.FLOAT,
                                 mean=[120.0, 110.0, 100.0], std=[60.0, 61.0, 62.0],
                                 mirror=fn.random.coin_flip()),
    ]
    return tuple(outs)


p = pipe()
p.build()
digests = []
for _ in range(2):
    for out in p.run():
        h = hashlib.sha256()
        for i in range(len(out)):
            a = out.at(i)
            h.update(str((a.shape, a.dtype)).encode())
            h.update(a.tobytes())
        digests.append(h.hexdigest())
p.close()
print("DIGESTS " + json.dumps({"digests": digests, "torch": "torch" in sys.modules}))
'''


@pytest.fixture(scope="module")
def data_and_script(tmp_path_factory):
    base = tmp_path_factory.mktemp("optional_packages")
    rng = np.random.default_rng(3)
    sizes = [(375, 500), (333, 250), (480, 640), (210, 370)]

    def encode(c, i):
        h, w = sizes[(2 * c + i) % len(sizes)]
        return cv2.imencode(".jpg", smooth(rng, h, w, 3), [cv2.IMWRITE_JPEG_QUALITY, 90])[1].tobytes()

    (base / "data").mkdir()
    data = write_class_folders(base / "data", 4, encode)
    script = base / "pipe.py"
    script.write_text(SCRIPT)
    blocker = base / "no_torch" / "torch"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text('raise ImportError("torch is not installed here (test)")\n')
    return str(data), str(script), str(blocker.parent)


def _run(data: str, script: str, mode: str, extra_path: str | None = None, settings: dict | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STOKER_")}
    env.update(settings or {})
    env["PYTHONPATH"] = os.pathsep.join(p for p in (extra_path, STOKER_ROOT) if p)
    env["STOKER_CPU_PROCESSES"] = "0"
    done = subprocess.run([sys.executable, script, data, mode], capture_output=True, text=True, env=env,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    line = [x for x in done.stdout.splitlines() if x.startswith("DIGESTS ")][-1]
    return json.loads(line[len("DIGESTS "):])


@pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                    reason="torch is not installed: nothing to compare against")
def test_outputs_are_identical_with_and_without_torch(data_and_script):
    data, script, no_torch = data_and_script
    plain = _run(data, script, "plain")
    imported = _run(data, script, "import-torch")
    without = _run(data, script, "plain", extra_path=no_torch)
    assert imported["torch"] and not without["torch"]
    assert len(plain["digests"]) == 14
    assert plain["digests"] == without["digests"], "the pixels changed with torch installed"
    assert imported["digests"] == without["digests"], "importing torch first changed the pixels"


def test_the_torch_opt_in_is_what_changes_them(data_and_script):
    """The check above can fail: with the opt-in, the resizes take torch's kernel and some values
    differ."""
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed: the opt-in has no effect")
    data, script, _ = data_and_script
    opted = _run(data, script, "plain", settings={"STOKER_TORCH_RESIZE": "1"})
    default = _run(data, script, "plain")
    assert opted["torch"] and not default["torch"]
    assert opted["digests"] != default["digests"]
