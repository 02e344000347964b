"""GPU modules written without a GPU at hand stay out of the registry until asked for
(STOKER_GPU_PENDING=1), so their operators keep what they had until the kernels' tests have
passed on a GPU."""

import os
import subprocess
import sys

# A stand-in pending module: it registers a "GPU implementation" of a made-up operator (never run here).
_PENDING_MODULE = '''
from stoker.operators.gpu_registry import register_gpu

@register_gpu("stoker_fake_op")
def gpu_fake(op, batch, inputs, arg_inputs):
    raise AssertionError("not run")
'''

_PROBE = ("from stoker.operators import gpu_registry as g; "
          "g.PENDING_GPU_MODULES = ('stoker_fake_pending',); g.load_gpu_impls(); "
          "print('stoker_fake_op' in g._GPU_IMPLS, 'hsv' in g._GPU_IMPLS)")


def _probe(tmp_path, pending: str | None) -> list:
    (tmp_path / "stoker_fake_pending.py").write_text(_PENDING_MODULE)
    env = {k: v for k, v in os.environ.items() if k != "STOKER_GPU_PENDING"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(tmp_path), env.get("PYTHONPATH")) if p)
    if pending is not None:
        env["STOKER_GPU_PENDING"] = pending
    done = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.split()


def test_pending_gpu_modules_load_only_when_asked(tmp_path):
    # hsv's kernel has passed its GPU tests (GPU_MODULES): loaded either way
    assert _probe(tmp_path, None) == ["False", "True"]
    assert _probe(tmp_path, "1") == ["True", "True"]


def test_per_sample_tables_raise_like_the_cpu_path():
    """A GPU implementation's host-side table built with gpu_registry.per_sample fails as the CPU
    path does: an OperatorError naming the operator, the argument and the sample's source."""
    import numpy as np
    import pytest

    from stoker.errors import OperatorError
    from stoker.operators.base import BatchContext
    from stoker.operators.gpu_registry import per_sample
    from stoker.operators.schema import get_operator

    op = get_operator("saturation")({"image_type": None, "saturation": 1.0, "dtype": None}, "gpu", name="sat1")
    batch = BatchContext(batch_size=2, sources=["a.jpg", "b.jpg"])
    tables = per_sample(op, batch, 1, lambda i: op.affine({"saturation": 0.5}, np.dtype(np.uint8)))
    assert len(tables) == 1 and tables[0][0].shape == (3, 3)
    with pytest.raises(OperatorError) as err:
        per_sample(op, batch, 2, lambda i: op.affine({"saturation": [1.0, -1.0][i]}, np.dtype(np.uint8)))
    assert err.value.operator == "sat1" and err.value.source == "b.jpg"
    assert "saturation" in str(err.value) and "b.jpg" in str(err.value)
