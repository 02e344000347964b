"""Fixtures of the colour operator tests (the DALI oracle lives in tests/oracle.py)."""

import pytest
from generated_images import small_images


@pytest.fixture(scope="session")
def images():
    return small_images()
