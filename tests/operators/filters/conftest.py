"""Fixtures of the filter operator tests: the same images as the colour tests."""

import pytest
from generated_images import small_images


@pytest.fixture(scope="session")
def images():
    return small_images()
