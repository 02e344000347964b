"""Shared fixtures: generated sample images, stoker settings for one test, and skipping of GPU /
oracle tests where they can't run."""

import contextlib

import pytest

# the GPU tests' fixtures (cp, batch_ctx, rng, make_images): those tests sit beside their operators'
# CPU tests all over the tree, and only the top conftest may name plugins
pytest_plugins = ["gpu_fixtures"]


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


@pytest.fixture
def null_cupy():
    """The null CUDA device (tests/null_device.py: CuPy's host half on NumPy, kernels recorded and
    skipped) installed for the test; yields the stand-in ``cupy`` module."""
    import null_device

    with null_device.installed() as cp:
        yield cp


@pytest.fixture
def stoker_settings():
    """Change stoker settings until the test ends: ``stoker_settings(fuse=False)`` (by name, as
    ``stoker.settings.override`` takes them; a later call wins)."""
    from stoker import settings

    with contextlib.ExitStack() as stack:
        yield lambda **values: stack.enter_context(settings.override(**values))


@pytest.fixture
def stoker_environ(monkeypatch):
    """Set ``STOKER_*`` variables in this process until the test ends, and have stoker read them
    afresh: ``stoker_environ(STOKER_FUSE="0")`` (the settings' own parsing under test)."""
    from stoker import settings

    def set_variables(**variables):
        for name, value in variables.items():
            monkeypatch.setenv(name, value)
        settings.reload()

    yield set_variables
    monkeypatch.undo()
    settings.reload()
