"""The glibc malloc tuning that the CPU decoder applies on its first decode: opt-out, respect for
the user's own MALLOC_* settings, and that it takes effect where glibc is the C library."""

import os
import platform
import sys

import numpy as np
import pytest

from stoker import settings
from stoker.operators.decoders import cpu


@pytest.fixture
def clean_env(monkeypatch):
    for k in list(os.environ):
        if k.startswith("MALLOC_"):
            monkeypatch.delenv(k)
    with settings.override(malloc_tuning=True):
        yield monkeypatch


def test_opt_out(clean_env):
    with settings.override(malloc_tuning=False):
        assert cpu._tune_allocator() is False
    assert cpu._ALLOCATOR_TUNED is False


def test_user_settings_win(clean_env):
    clean_env.setenv("MALLOC_TRIM_THRESHOLD_", "1048576")
    assert cpu._tune_allocator() is False


@pytest.mark.skipif(not (sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"),
                    reason="glibc only")
def test_applied_on_glibc_and_decoding_still_works(clean_env):
    import cv2

    assert cpu._tune_allocator() is True
    img = np.random.default_rng(0).integers(0, 256, (40, 30, 3), np.uint8)
    ok, enc = cv2.imencode(".png", img[:, :, ::-1])
    assert ok
    np.testing.assert_array_equal(cpu.decode_cpu(enc.reshape(-1)), img)


def test_a_pipeline_without_a_decoder_tunes_it_when_built(clean_env):
    """A host pipeline that never decodes (readers.numpy -> crop_mirror_normalize) makes image-sized
    arrays all the same: building it applies the tuning once; a GPU-only graph leaves it alone."""
    import stoker
    import stoker.fn as fn

    calls = []
    clean_env.setattr(cpu, "_ALLOCATOR_TUNED", None)
    clean_env.setattr(cpu, "_tune_allocator", lambda: calls.append(1) or cpu.__dict__.__setitem__(
        "_ALLOCATOR_TUNED", False))
    images = [np.zeros((8, 8, 3), np.uint8)] * 2

    @stoker.pipeline_def(batch_size=2, num_threads=1, device_id=None)
    def pipe():
        return fn.crop_mirror_normalize(fn.external_source(source=lambda: images, batch=True, layout="HWC"))

    p = pipe()
    p.build()
    p.close()
    q = pipe()
    q.build()
    q.close()
    assert calls == [1]
