"""Helpers for the image operator tests: generated images and runners that put
the same batch through a stoker pipeline and through DALI's CPU operator."""

import cv2
import numpy as np
import pytest


def _smooth(rng, h, w, c):
    """Photo-like content: upsampled noise (edges and gradients, no constant areas)."""
    small = rng.integers(0, 256, (max(2, h // 8), max(2, w // 8), c)).astype(np.uint8)
    big = cv2.resize(small, (w, h), interpolation=cv2.INTER_CUBIC)
    return big.reshape(h, w, c)


@pytest.fixture(scope="session")
def images():
    """Odd sizes, 1 and 3 channels, smooth and noisy content."""
    rng = np.random.default_rng(7)
    return {
        "rgb": _smooth(rng, 375, 500, 3),
        "rgb_odd": _smooth(rng, 77, 131, 3),
        "noise": rng.integers(0, 256, (61, 83, 3), np.uint8),
        "gray": _smooth(rng, 53, 37, 1),
        "tall": rng.integers(0, 256, (101, 9, 3), np.uint8),
    }


def _batch_source(values):
    """A zero-argument callable giving the same batch every time."""
    batch = [np.asarray(a) for a in values]
    return lambda: batch


def _stoker_pipeline(op_name, batch, layout, per_sample, kwargs, num_threads=2, seed=5):
    from stoker import fn, pipeline_def

    op = fn
    for part in op_name.split("."):
        op = getattr(op, part)

    @pipeline_def(batch_size=len(batch), num_threads=num_threads, device_id=None, seed=seed)
    def pipe():
        x = fn.external_source(source=lambda: list(batch), batch=True, layout=layout)
        extra = {k: fn.external_source(source=_batch_source(v), batch=True) for k, v in per_sample.items()}
        return op(x, **kwargs, **extra)

    p = pipe()
    p.build()
    return p


@pytest.fixture
def run_stoker():
    """run_stoker(op_name, batch, layout="HWC", per_sample={arg: [values]}, **kwargs) -> list of arrays."""

    def run(op_name, batch, layout="HWC", per_sample=None, **kwargs):
        p = _stoker_pipeline(op_name, batch, layout, per_sample or {}, kwargs)
        out = p.run()[0]
        return [np.asarray(out.at(i)) for i in range(len(out))]

    return run


@pytest.fixture
def run_dali():
    """Same as run_stoker, through DALI's CPU operator (the oracle)."""
    dali = pytest.importorskip("nvidia.dali")
    from nvidia.dali import fn, pipeline_def

    def run(op_name, batch, layout="HWC", per_sample=None, **kwargs):
        op = fn
        for part in op_name.split("."):
            op = getattr(op, part)
        per_sample = per_sample or {}
        kwargs = {k: _to_dali(v, dali) for k, v in kwargs.items()}

        @pipeline_def(batch_size=len(batch), num_threads=1, device_id=None, seed=5)
        def pipe():
            x = fn.external_source(source=lambda: list(batch), batch=True, layout=layout)
            extra = {k: fn.external_source(source=_batch_source(v), batch=True) for k, v in per_sample.items()}
            return op(x, **kwargs, **extra)

        p = pipe()
        p.build()
        out = p.run()[0]
        return [np.array(out.at(i)) for i in range(len(out))]

    return run


def _to_dali(v, dali):
    """stoker's enums -> DALI's (same names and numbers)."""
    from stoker import types as st

    if isinstance(v, st.DALIDataType):
        return getattr(dali.types, v.name)
    if isinstance(v, st.DALIInterpType):
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
                f"{what} sample {i}: mean diff {d.mean():.4f}, max diff {d.max()} (tolerance {mean_tol}, {max_tol})"
