"""Exact resume: a pipeline restored from checkpoint() continues with bit-identical batches."""

import json
import subprocess
import sys

import numpy as np
import pytest

import stoker.fn as fn
import stoker.types as types
from stoker import pipeline_def
from stoker.errors import StokerError

PIPELINE_SRC = """
import stoker.fn as fn, stoker.types as types
from stoker import pipeline_def

def make(root, **kw):
    @pipeline_def(batch_size=5, num_threads=2, device_id=None, seed=11, enable_checkpointing=True, **kw)
    def p():
        jpegs, labels = fn.readers.file(file_root=root, random_shuffle=True, name="r")
        images = fn.decoders.image_random_crop(jpegs, output_type=types.RGB)
        images = fn.resize(images, resize_x=32, resize_y=32)
        images = fn.crop_mirror_normalize(images, mirror=fn.random.coin_flip(), dtype=types.FLOAT)
        return images, labels, fn.random.uniform(range=(0, 1))
    pipe = p()
    pipe.build()
    return pipe
"""
namespace: dict = {}
exec(PIPELINE_SRC, namespace)  # the same definition is run in a fresh process below
make = namespace["make"]


def arrays(outs):
    return [np.array(o.as_array()) for o in outs]


@pytest.mark.parametrize("stop_at", [1, 4, 7])  # 24 files at batch 5: 7 crosses an epoch boundary
def test_resume_is_bit_identical(sample_jpeg_dir, stop_at):
    reference = make(sample_jpeg_dir)
    ref = [arrays(reference.run()) for _ in range(stop_at + 3)]
    reference.close()

    first = make(sample_jpeg_dir)
    for _ in range(stop_at):
        first.run()
    state = first.checkpoint()
    first.close()
    assert len(state) < 2000 and json.loads(state)["iteration"] == stop_at

    resumed = make(sample_jpeg_dir, checkpoint=state)
    for k in range(3):
        for a, b in zip(arrays(resumed.run()), ref[stop_at + k]):
            np.testing.assert_array_equal(a, b)
    resumed.close()


def test_resume_in_a_fresh_process(sample_jpeg_dir, tmp_path):
    first = make(sample_jpeg_dir)
    for _ in range(3):
        first.run()
    state = first.checkpoint()
    expected = arrays(first.run())
    first.close()
    script = tmp_path / "resume.py"
    script.write_text(PIPELINE_SRC + f"""
import numpy as np, sys
pipe = make({sample_jpeg_dir!r}, checkpoint={state!r})
np.savez(sys.argv[1], *[np.array(o.as_array()) for o in pipe.run()])
""")
    out = tmp_path / "out.npz"
    subprocess.run([sys.executable, str(script), str(out)], check=True, timeout=120)
    got = np.load(out)
    for i, exp in enumerate(expected):
        np.testing.assert_array_equal(got[f"arr_{i}"], exp)


def test_checkpoint_needs_enabling():
    @pipeline_def(batch_size=1, num_threads=1, device_id=None)
    def p():
        return fn.cast(fn.constant(idata=[1]), dtype=types.FLOAT)

    pipe = p()
    pipe.build()
    with pytest.raises(StokerError, match="enable_checkpointing"):
        pipe.checkpoint()
    pipe.close()
