"""GPU modules written without a GPU at hand stay out of the registry until asked for
(STOKER_GPU_PENDING=1), so their operators keep what they had until the kernels' tests have
passed on a GPU."""

import os
import subprocess
import sys

_PROBE = ("from stoker.operators import gpu_registry as g; g.load_gpu_impls(); "
          "from stoker.operators.schema import registered; "
          "print('hsv' in g._GPU_IMPLS, 'gpu' in registered()['hsv'].schema.devices)")


def _probe(pending: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "STOKER_GPU_PENDING"}
    if pending is not None:
        env["STOKER_GPU_PENDING"] = pending
    done = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.split()


def test_pending_gpu_modules_load_only_when_asked():
    assert _probe(None)[0] == "False"
    assert _probe("1") == ["True", "True"]
