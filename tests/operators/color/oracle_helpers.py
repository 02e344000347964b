"""Helpers for the colour and filter operator tests: generated images, and runners that put
the same batch through a stoker pipeline and through DALI's CPU operator (the oracle)."""

from __future__ import annotations

import cv2
import numpy as np
import pytest


def smooth(rng, h, w, c, dtype=np.uint8):
    """Photo-like content: upsampled noise (edges and gradients, no constant areas)."""
    small = rng.integers(0, 256, (max(2, h // 8), max(2, w // 8), c)).astype(np.uint8)
    big = cv2.resize(small, (w, h), interpolation=cv2.INTER_CUBIC).reshape(h, w, c)
    return big if dtype == np.uint8 else (big / 255.0).astype(dtype)


def make_images():
    """Odd sizes, 1 and 3 channels, smooth and noisy content, uint8 and float."""
    rng = np.random.default_rng(11)
    return {
        "rgb": smooth(rng, 67, 91, 3),
        "noise": rng.integers(0, 256, (41, 53, 3), np.uint8),
        "gray": smooth(rng, 33, 27, 1),
        "rgb_f": rng.random((29, 45, 3), dtype=np.float32),
        "gray_f": smooth(rng, 31, 23, 1, np.float32),
    }


def _op(fn, name):
    for part in name.split("."):
        fn = getattr(fn, part)
    return fn


def _const_source(values):
    batch = [np.asarray(v) for v in values]
    return lambda: batch


def run_pipeline(lib, op_name, batch, layout="HWC", per_sample=None, seed=5, **kwargs):
    """Run ``fn.<op_name>(x, **kwargs)`` of ``lib`` ("stoker" or "dali") on one batch; per_sample
    maps argument names to per-sample values fed through external_source."""
    if lib == "dali":
        dali = pytest.importorskip("nvidia.dali")
        from nvidia.dali import fn, pipeline_def

        kwargs = {k: _to_dali(v, dali) for k, v in kwargs.items()}
    else:
        from stoker import fn, pipeline_def
    per_sample = per_sample or {}
    data = [np.asarray(a) for a in batch]

    @pipeline_def(batch_size=len(data), num_threads=2 if lib == "stoker" else 1, device_id=None, seed=seed)
    def pipe():
        x = fn.external_source(source=lambda: list(data), batch=True, layout=layout)
        extra = {k: fn.external_source(source=_const_source(v), batch=True) for k, v in per_sample.items()}
        return _op(fn, op_name)(x, **kwargs, **extra)

    p = pipe()
    p.build()
    out = p.run()[0]
    return [np.array(out.at(i)) for i in range(len(out))]


def _to_dali(v, dali):
    """stoker's enums -> DALI's (same names and numbers)."""
    from stoker import types as st

    if isinstance(v, (st.DALIDataType, st.DALIImageType, st.DALIInterpType)):
        return getattr(dali.types, v.name)
    return v


def assert_close(ours, theirs, mean_tol, max_tol, what=""):
    """Same shapes and dtypes; mean and max absolute difference within tolerance."""
    assert len(ours) == len(theirs)
    for i, (a, b) in enumerate(zip(ours, theirs)):
        assert a.shape == b.shape, f"{what} sample {i}: shape {a.shape} != DALI's {b.shape}"
        assert a.dtype == b.dtype, f"{what} sample {i}: dtype {a.dtype} != DALI's {b.dtype}"
        d = np.abs(a.astype(np.float64) - b.astype(np.float64))
        if d.size:
            assert d.mean() <= mean_tol and d.max() <= max_tol, \
                f"{what} sample {i}: mean diff {d.mean():.5f}, max diff {d.max()} (tolerance {mean_tol}, {max_tol})"


def compare(op_name, batch, mean_tol, max_tol, layout="HWC", per_sample=None, **kwargs):
    """stoker vs DALI on the same batch and arguments."""
    ours = run_pipeline("stoker", op_name, batch, layout, per_sample, **kwargs)
    theirs = run_pipeline("dali", op_name, batch, layout, per_sample, **kwargs)
    assert_close(ours, theirs, mean_tol, max_tol, f"{op_name}({kwargs}, per_sample={per_sample})")
    return ours
