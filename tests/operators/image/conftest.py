"""Fixtures of the image operator tests: generated images and runners that put the same
batch through a stoker pipeline and through DALI's CPU operator (tests/dali_oracle.py)."""

import pytest
from dali_oracle import run_op
from generated_images import geometry_images


@pytest.fixture(scope="session")
def images():
    """Odd sizes, 1 and 3 channels, smooth and noisy content."""
    return geometry_images()


@pytest.fixture
def run_stoker():
    """run_stoker(op_name, batch, layout="HWC", per_sample={arg: [values]}, **kwargs) -> list of arrays."""

    def run(op_name, batch, layout="HWC", per_sample=None, **kwargs):
        return run_op("stoker", op_name, batch, layout, per_sample, **kwargs)

    return run


@pytest.fixture
def run_dali():
    """Same as run_stoker, through DALI's CPU operator (the oracle)."""
    pytest.importorskip("nvidia.dali")

    def run(op_name, batch, layout="HWC", per_sample=None, **kwargs):
        return run_op("dali", op_name, batch, layout, per_sample, **kwargs)

    return run
