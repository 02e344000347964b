"""stoker.plugin.pytorch.experimental.proxy: DataLoader workers feed a pipeline run in the main process;
the outputs must equal the pipeline's own on the same batches in the same order."""

import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
cv2 = pytest.importorskip("cv2")

import stoker.fn as fn  # noqa: E402
from stoker import pipeline_def  # noqa: E402
from stoker.plugin.pytorch.experimental import proxy as dali_proxy  # noqa: E402

N_IMAGES = 10
BATCH = 4


@pytest.fixture(scope="module")
def encoded_images():
    """10 small JPEGs (24x32 and 32x24) as uint8 arrays of their bytes."""
    rng = np.random.default_rng(0)
    out = []
    for k in range(N_IMAGES):
        h, w = (24, 32) if k % 2 else (32, 24)
        img = (rng.random((h, w, 3)) * 255).astype(np.uint8)
        ok, buf = cv2.imencode(".jpg", img)
        assert ok
        out.append(np.frombuffer(buf.tobytes(), np.uint8))
    return out


@pipeline_def(batch_size=BATCH, num_threads=2, device_id=None, seed=7)
def image_pipe():
    jpegs = fn.external_source(name="images", no_copy=True)
    images = fn.decoders.image(jpegs)
    images = fn.resize(images, size=[16, 16])
    flipped = fn.flip(images, horizontal=fn.random.coin_flip(probability=0.5))
    return flipped, fn.cast(fn.shapes(images), dtype=7)  # 7 = types.INT32


class EncodedDataset(torch.utils.data.Dataset):
    def __init__(self, images, transform, crash_at=None):
        self.images, self.transform, self.crash_at = images, transform, crash_at

    def __len__(self):
        return len(self.images)

    def __getitem__(self, i):
        if i == self.crash_at and torch.utils.data.get_worker_info() is not None:
            os._exit(3)  # a worker dying without a word (as when it is killed)
        return self.transform(self.images[i]), i


def _direct(images, batches):
    """The pipeline run directly on ``batches`` (lists of sample indices), in order."""
    pipe = image_pipe()
    out = []
    for idx in batches:
        a, b = pipe.run(images=[images[i] for i in idx])
        out.append((np.stack(a.samples()), np.stack(b.samples())))
    return out


def _batches(n, batch, epochs=1):
    return [list(range(k, min(k + batch, n))) for k in range(0, n, batch)] * epochs


@pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")
@pytest.mark.parametrize("num_workers", [0, 2, 4])
def test_loader_matches_the_direct_pipeline(encoded_images, num_workers):
    with dali_proxy.DALIServer(image_pipe()) as server:
        dataset = EncodedDataset(encoded_images, server.proxy)
        loader = dali_proxy.DataLoader(server, dataset, batch_size=BATCH, num_workers=num_workers)
        got = [(imgs, shapes, idx.tolist()) for (imgs, shapes), idx in loader]
    expected = _direct(encoded_images, _batches(N_IMAGES, BATCH))
    assert [g[2] for g in got] == _batches(N_IMAGES, BATCH)  # 4, 4, 2: the short last batch too
    for (imgs, shapes, _), (e_imgs, e_shapes) in zip(got, expected):
        assert isinstance(imgs, torch.Tensor) and imgs.dtype == torch.uint8
        np.testing.assert_array_equal(imgs.numpy(), e_imgs)
        np.testing.assert_array_equal(shapes.numpy(), e_shapes)


def test_persistent_workers_over_two_epochs(encoded_images):
    with dali_proxy.DALIServer(image_pipe()) as server:
        loader = dali_proxy.DataLoader(server, EncodedDataset(encoded_images, server.proxy), batch_size=BATCH,
                                       num_workers=2, persistent_workers=True)
        got = [imgs.numpy() for _ in range(2) for (imgs, _), _ in loader]
    expected = _direct(encoded_images, _batches(N_IMAGES, BATCH, epochs=2))
    assert len(got) == len(expected) == 6
    for g, (e, _) in zip(got, expected):
        np.testing.assert_array_equal(g, e)


def test_worker_crash_raises_and_the_server_recovers(encoded_images):
    with dali_proxy.DALIServer(image_pipe()) as server:
        bad = dali_proxy.DataLoader(server, EncodedDataset(encoded_images, server.proxy, crash_at=5),
                                    batch_size=BATCH, num_workers=2)
        with pytest.raises(RuntimeError, match="exited unexpectedly"):
            for _ in bad:
                pass
        del bad
        # The same server serves a new loader; its pipeline has moved on, so compare shapes and order.
        good = dali_proxy.DataLoader(server, EncodedDataset(encoded_images, server.proxy), batch_size=BATCH,
                                     num_workers=2)
        got = [(tuple(imgs.shape), idx.tolist()) for (imgs, _), idx in good]
    assert got == [((len(b), 16, 16, 3), b) for b in _batches(N_IMAGES, BATCH)]


def test_manual_proxy_calls_with_default_collate(encoded_images):
    """Without a DataLoader: call the proxy, collate with torch, then produce_data (as in DALI's docs)."""
    with dali_proxy.DALIServer(image_pipe()) as server:
        samples = [(server.proxy(encoded_images[i]), {"index": i}) for i in range(BATCH)]
        batch = torch.utils.data.default_collate(samples)
        (imgs, shapes), meta = server.produce_data(batch)
    (e_imgs, e_shapes), = _direct(encoded_images, [list(range(BATCH))])
    np.testing.assert_array_equal(imgs.numpy(), e_imgs)
    np.testing.assert_array_equal(shapes.numpy(), e_shapes)
    assert meta["index"].tolist() == list(range(BATCH))


def test_plain_torch_loader_and_produce_data(encoded_images):
    with dali_proxy.DALIServer(image_pipe()) as server:
        loader = torch.utils.data.DataLoader(EncodedDataset(encoded_images, server.proxy), batch_size=BATCH,
                                             num_workers=2)
        got = [server.produce_data(out)[0].numpy() for out, _ in loader]
    for g, (e, _) in zip(got, _direct(encoded_images, _batches(N_IMAGES, BATCH))):
        np.testing.assert_array_equal(g, e)


def test_proxy_signature_and_errors(encoded_images):
    @pipeline_def(batch_size=2, num_threads=1, device_id=None)
    def two_inputs():
        a = fn.external_source(name="a")
        b = fn.external_source(name="b")
        return a + b

    server = dali_proxy.DALIServer(two_inputs())
    ref = server.proxy(a=np.ones(3, np.float32), b=np.full(3, 2, np.float32))
    assert isinstance(ref, dali_proxy.DALIOutputSampleRef)
    with pytest.raises(TypeError, match="proxy"):
        server.proxy(np.ones(3, np.float32))  # several inputs: by name only
    out = server.produce_data(torch.utils.data.default_collate([ref, ref]))
    assert out.tolist() == [[3.0] * 3] * 2

    small = dali_proxy.DALIServer(image_pipe(batch_size=2))
    too_big = torch.utils.data.default_collate([small.proxy(encoded_images[i]) for i in range(3)])
    with pytest.raises(ValueError, match="batch_size"):
        small.produce_data(too_big)

    @pipeline_def(batch_size=2, num_threads=1, device_id=None)
    def no_inputs():
        return fn.constant(fdata=[1.0])

    with pytest.raises(ValueError, match="external_source"):
        dali_proxy.DALIServer(no_inputs())
