"""Fixtures of the decoder tests (helpers live in decoder_helpers.py)."""

import numpy as np
import pytest
from decoder_helpers import H, W, make_images, smooth_image


@pytest.fixture(scope="session")
def images() -> dict[str, bytes]:
    """Every supported format, generated: name -> encoded bytes."""
    return make_images()


@pytest.fixture(scope="session")
def reference_rgb() -> np.ndarray:
    """The pixels every generated file encodes (losslessly, except JPEG)."""
    return smooth_image(H, W, 3)
