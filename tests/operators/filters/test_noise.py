"""noise.gaussian / salt_and_pepper / shot: distributions (against theory and DALI's), seeding."""

import numpy as np
import pytest
from oracle import run_op

from stoker.errors import OperatorError, PipelineBuildError

FLAT = np.full((120, 150, 3), 100, np.uint8)
FLAT_F = np.full((120, 150, 3), 0.5, np.float32)


def _stats(out, ref):
    d = out.astype(np.float64) - ref.astype(np.float64)
    return d.mean(), d.std()


def test_gaussian_statistics():
    out = run_op("stoker", "noise.gaussian", [FLAT], stddev=10.0, mean=2.0)
    m, s = _stats(out[0], FLAT)
    assert abs(m - 2.0) < 0.2 and abs(s - 10.0) < 0.2  # 54000 values: standard error ~0.05
    assert out[0].dtype == np.uint8 and np.all(out[0] == np.floor(out[0]))
    assert not np.all(out[0][..., 0] == out[0][..., 1])  # channels independently
    out = run_op("stoker", "noise.gaussian", [FLAT_F], stddev=0.1)[0]
    m, s = _stats(out, FLAT_F)
    assert out.dtype == np.float32 and abs(m) < 2e-3 and abs(s - 0.1) < 2e-3


def test_gaussian_saturates_integers():
    out = run_op("stoker", "noise.gaussian", [np.full((50, 50, 1), 250, np.uint8)], stddev=20.0)[0]
    assert out.max() == 255 and 0.3 < np.mean(out == 255) < 0.5  # P(N(250, 20) >= 254.5) = 0.41


def test_salt_and_pepper_statistics():
    out = run_op("stoker", "noise.salt_and_pepper", [FLAT], prob=0.2)[0]
    pix_salt, pix_pepper = (out == 255).all(-1), (out == 0).all(-1)
    assert np.all(pix_salt | pix_pepper | (out == 100).all(-1))  # whole pixels replaced
    assert abs(pix_salt.mean() - 0.1) < 0.01 and abs(pix_pepper.mean() - 0.1) < 0.01
    out = run_op("stoker", "noise.salt_and_pepper", [FLAT], prob=0.2, per_channel=True,
                       salt_vs_pepper=0.25)[0]
    assert abs((out == 255).mean() - 0.05) < 0.01 and abs((out == 0).mean() - 0.15) < 0.01
    assert np.mean((out != 100).any(-1) & ~(out != 100).all(-1)) > 0.2  # channels independently
    out = run_op("stoker", "noise.salt_and_pepper", [FLAT_F], prob=0.5, salt_val=0.9, pepper_val=0.1)[0]
    assert set(np.unique(out).tolist()) == {np.float32(0.1), np.float32(0.5), np.float32(0.9)}
    out = run_op("stoker", "noise.salt_and_pepper", [FLAT_F], prob=1.0)[0]
    assert set(np.unique(out).tolist()) == {-1.0, 1.0}


def test_shot_statistics():
    out = run_op("stoker", "noise.shot", [FLAT], factor=10.0)[0]
    assert np.all((out % 10 == 0) | (out == 255))  # multiples of factor, saturated at 255
    m, s = _stats(out, FLAT)
    assert abs(m) < 0.5 and abs(s ** 2 / 1000.0 - 1.0) < 0.05  # Poisson: variance = factor * mean
    out = run_op("stoker", "noise.shot", [FLAT_F], factor=0.01)[0]
    assert out.dtype == np.float32 and abs(out.var() / (0.01 * 0.5) - 1.0) < 0.05
    np.testing.assert_array_equal(run_op("stoker", "noise.shot", [FLAT], factor=0.0)[0], FLAT)


@pytest.mark.oracle
@pytest.mark.parametrize("name,kwargs", [("noise.gaussian", dict(stddev=10.0)),
                                         ("noise.salt_and_pepper", dict(prob=0.2)),
                                         ("noise.shot", dict(factor=10.0))])
def test_distribution_matches_dali(name, kwargs):
    """Different generators, same distribution: mean and spread of the change agree."""
    ours = run_op("stoker", name, [FLAT], **kwargs)[0].astype(np.float64)
    theirs = run_op("dali", name, [FLAT], **kwargs)[0].astype(np.float64)
    # 4 standard errors of a difference of means over the 18000 independent pixels
    assert abs(ours.mean() - theirs.mean()) < 4 * np.sqrt(2) * theirs.std() / np.sqrt(FLAT[..., 0].size)
    assert abs(ours.std() / theirs.std() - 1.0) < 0.05


def test_seeded_and_varying():
    a = run_op("stoker", "noise.gaussian", [FLAT, FLAT], seed=3)
    b = run_op("stoker", "noise.gaussian", [FLAT, FLAT], seed=3)
    c = run_op("stoker", "noise.gaussian", [FLAT, FLAT], seed=4)
    np.testing.assert_array_equal(a[0], b[0])
    assert not np.array_equal(a[0], a[1]) and not np.array_equal(a[0], c[0])


def test_per_sample_arguments():
    out = run_op("stoker", "noise.gaussian", [FLAT_F, FLAT_F],
                       per_sample={"stddev": [np.float32(0.01), np.float32(0.2)]})
    assert abs(out[0].std() - 0.01) < 1e-3 and abs(out[1].std() - 0.2) < 5e-3


def test_errors():
    with pytest.raises(PipelineBuildError, match="noise.salt_and_pepper.*'prob'"):
        run_op("stoker", "noise.salt_and_pepper", [FLAT], prob=1.5)
    with pytest.raises(PipelineBuildError, match="noise.gaussian.*'stddev'"):
        run_op("stoker", "noise.gaussian", [FLAT], stddev=-1.0)
    with pytest.raises(OperatorError, match="(?s)noise.gaussian.*'stddev'"):
        run_op("stoker", "noise.gaussian", [FLAT], per_sample={"stddev": [np.float32(-2.0)]})
