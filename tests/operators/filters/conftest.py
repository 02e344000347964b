"""Fixtures of the filter operator tests; the oracle helpers are shared with the colour tests."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "color"))

from oracle_helpers import make_images  # noqa: E402


@pytest.fixture(scope="session")
def images():
    return make_images()
