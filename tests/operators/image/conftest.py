"""Fixtures of the image operator tests: generated images (the DALI oracle and its runners live
in tests/oracle.py)."""

import pytest
from generated_images import geometry_images


@pytest.fixture(scope="session")
def images():
    """Odd sizes, 1 and 3 channels, smooth and noisy content."""
    return geometry_images()
