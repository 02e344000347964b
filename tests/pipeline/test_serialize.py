"""Pipeline.serialize() / Pipeline.deserialize(): one file rebuilds the graph, its settings and its
random streams in a fresh process, Python callables included where they pickle."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import stoker.fn as fn
import stoker.types as types
from stoker import Pipeline, pipeline_def
from stoker.errors import StokerError

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import _serialize_callables as callables  # noqa: E402


@pipeline_def(batch_size=3, num_threads=2, device_id=None, seed=21, enable_conditionals=True)
def _pipe(root):
    jpegs, labels = fn.readers.file(file_root=root, random_shuffle=True)
    images = fn.random_resized_crop(fn.decoders.image(jpegs), size=(16, 16))
    side = fn.external_source(source=callables.sample, batch=False, layout="HWC")
    side = fn.python_function(side, function=callables.double_plus_one)
    unused = fn.random.normal()  # never an output: still takes its place in the seed order
    del unused
    flip = fn.random.coin_flip()
    if flip:
        images = fn.flip(images, horizontal=1)
    out = fn.cast(images, dtype=types.FLOAT) * fn.random.uniform(range=(0.5, 2.0)) - 3
    return out, labels, side, flip


def _outputs(pipe, n=3):
    runs = []
    for _ in range(n):
        runs.append([[np.asarray(s) for s in o.samples()] for o in pipe.run()])
    return runs


_LOADER = textwrap.dedent("""
    import pickle, sys
    import numpy as np
    from stoker import Pipeline
    pipe = Pipeline.deserialize(filename=sys.argv[1])
    runs = [[[np.asarray(s) for s in o.samples()] for o in pipe.run()] for _ in range(3)]
    with open(sys.argv[2], "wb") as f:
        pickle.dump((pipe.batch_size, pipe.seed, runs), f)
    pipe.close()
""")


def test_a_serialized_pipeline_gives_the_same_outputs_in_a_fresh_process(sample_jpeg_dir, tmp_path):
    import pickle

    pipe = _pipe(sample_jpeg_dir)
    path = str(tmp_path / "pipe.stoker")
    data = pipe.serialize(filename=path)
    assert open(path, "rb").read() == data
    expected = _outputs(pipe)
    pipe.close()
    result = tmp_path / "out.pkl"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([HERE, os.environ.get("PYTHONPATH", "")]))
    subprocess.run([sys.executable, "-c", _LOADER, path, str(result)], check=True, env=env, timeout=240)
    batch_size, seed, runs = pickle.loads(result.read_bytes())
    assert (batch_size, seed) == (3, 21)
    for want, got in zip(expected, runs):
        for w, g in zip(want, got):
            for a, b in zip(w, g):
                np.testing.assert_array_equal(a, b)


def test_deserialize_from_bytes_with_overrides():
    @pipeline_def(batch_size=2, num_threads=1, device_id=None, seed=3)
    def p():
        return fn.random.uniform(range=(0, 1), shape=[2])

    original = p()
    data = original.serialize()
    same = Pipeline.deserialize(serialized_pipeline=data)
    bigger = Pipeline.deserialize(data, batch_size=4)
    a, b, c = original.run()[0], same.run()[0], bigger.run()[0]
    np.testing.assert_array_equal(a.as_array(), b.as_array())
    np.testing.assert_array_equal(a.as_array(), c.as_array()[:2])  # streams are per sample
    assert len(c) == 4


def test_a_callable_that_does_not_pickle_is_named():
    @pipeline_def(batch_size=2, num_threads=1, device_id=None)
    def p():
        return fn.external_source(source=lambda i: [np.zeros(2)] * 2, name="lam")

    with pytest.raises(StokerError, match=r"external_source 'lam'.*argument 'source'.*module level"):
        p().serialize()


def test_deserialize_refuses_other_data():
    with pytest.raises(StokerError, match="not a stoker pipeline"):
        Pipeline.deserialize(serialized_pipeline=b"\x0a\x05hello")
    with pytest.raises(StokerError, match="exactly one"):
        Pipeline.deserialize()
