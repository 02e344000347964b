"""Fixtures of the reader tests."""

import pytest
from reader_helpers import write_tree


@pytest.fixture
def tree10(tmp_path):
    """10 files in 3 classes (4, 3, 3): uneven shards for most num_shards."""
    root = str(tmp_path / "data")
    paths = write_tree(root, [4, 3, 3])
    return root, paths
