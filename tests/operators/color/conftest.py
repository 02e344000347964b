"""Fixtures of the colour operator tests (helpers live in oracle_helpers.py)."""

import pytest
from oracle_helpers import make_images


@pytest.fixture(scope="session")
def images():
    return make_images()
