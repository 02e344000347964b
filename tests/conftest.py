"""Shared fixtures: generated sample images, and skipping of GPU / oracle tests where they can't run."""

import pytest


def _cuda_available() -> bool:
    try:
        from stoker.backend.cuda import cuda_available

        return cuda_available()
    except Exception:  # noqa: BLE001 - any import/driver problem means no GPU here
        return False


def pytest_collection_modifyitems(config, items):
    if not _cuda_available():
        skip_gpu = pytest.mark.skip(reason="needs CUDA, cupy and a GPU")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip_gpu)


@pytest.fixture(scope="session")
def sample_jpeg_dir(tmp_path_factory):
    """A small ImageNet-like folder: 24 JPEGs in 3 class folders (generated, photo-like)."""
    from stoker.sample_data import write_dataset

    root = tmp_path_factory.mktemp("sample_jpegs")
    write_dataset(str(root), 24, classes=3, seed=1, workers=2)
    return str(root)
