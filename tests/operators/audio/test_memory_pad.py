"""The audio operators keep freed heap memory for the next batch (glibc's malloc top pad), once per
process, and leave a top pad the user chose alone."""

import os
import subprocess
import sys

import pytest

_PROBE = ("from stoker.operators.audio._memory import keep_freed_memory as k; "
          "print(k(), k())")


def _probe(**env) -> list[str]:
    base = {k: v for k, v in os.environ.items() if k not in ("MALLOC_TOP_PAD_", "GLIBC_TUNABLES")}
    done = subprocess.run([sys.executable, "-c", _PROBE], env=dict(base, **env), capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.split()


@pytest.mark.skipif(not sys.platform.startswith("linux") or not os.confstr("CS_GNU_LIBC_VERSION").startswith("glibc"),
                    reason="the top pad is glibc's")
def test_top_pad_is_set_once_under_glibc():
    assert _probe() == ["True", "True"]


def test_a_users_own_top_pad_is_left_alone():
    assert _probe(MALLOC_TOP_PAD_="1048576") == ["False", "False"]
    assert _probe(GLIBC_TUNABLES="glibc.malloc.top_pad=1048576") == ["False", "False"]
