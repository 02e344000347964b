"""stoker.plugin.tf: runs tf_cases.py in a pytest process of its own.

TensorFlow and the ``tfrecord`` package (the independent writer of the TFRecord reader tests,
imported when those are collected) register the same protobuf messages (``tensorflow.BytesList``
...) in protobuf's default pool, so whichever is imported second fails ("duplicate symbol"):
they cannot share the main test process. TensorFlow also adds 0.7 GB and its thread pools to a
process; here only the child pays for them.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

if importlib.util.find_spec("tensorflow") is None:
    pytest.skip("TensorFlow is not installed (pip install tensorflow-cpu)", allow_module_level=True)


def test_tf_plugin_cases():
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
                           os.path.join(HERE, "tf_cases.py")], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)
    summary = done.stdout.strip().splitlines()[-1:] or ["(no output)"]
    print("tf_cases.py:", summary[0])
    assert done.returncode == 0, done.stdout[-8000:] + done.stderr[-4000:]
