"""DALI's "Getting Started" walkthrough, ported by changing only the imports."""

import numpy as np
import pytest
from oracle import libs

import stoker.fn as fn
import stoker.types as types
from stoker import pipeline_def


def simple_pipeline_factory(image_dir, pipeline_def, fn):
    @pipeline_def
    def simple_pipeline():
        jpegs, labels = fn.readers.file(file_root=image_dir, random_shuffle=True, initial_fill=21)
        images = fn.decoders.image(jpegs, device="cpu")
        images = fn.rotate(images, angle=fn.random.uniform(range=(-10.0, 10.0)), fill_value=0)
        return images, labels

    return simple_pipeline


def test_getting_started_walkthrough(sample_jpeg_dir):
    simple_pipeline = simple_pipeline_factory(sample_jpeg_dir, pipeline_def, fn)
    # device_id=0 as in the walkthrough: CPU-only operators need no GPU
    pipe = simple_pipeline(batch_size=8, num_threads=1, device_id=0, seed=1234)
    pipe.build()
    images, labels = pipe.run()
    assert images.is_dense_tensor() is False  # rotated photos of different sizes
    assert labels.is_dense_tensor() is True
    labels_tensor = labels.as_tensor()
    assert labels_tensor.shape() == [8, 1]
    assert np.array(labels_tensor).dtype == np.int32
    assert set(np.array(labels_tensor).ravel()) <= {0, 1, 2}
    assert images.layout() == "HWC" and images.dtype == types.UINT8
    assert len(images) == 8
    first = images.at(0)
    assert first.ndim == 3 and first.shape[2] == 3
    assert "TensorListCPU" in str(images) and "HWC" in repr(images)
    sample = images[0]
    assert sample.shape() == list(first.shape) and sample.layout() == "HWC"
    with pytest.raises(ValueError, match="differ in shape"):
        images.as_tensor()
    pipe.close()


@pytest.mark.oracle
def test_walkthrough_outputs_match_dali_structure(sample_jpeg_dir):
    """The walkthrough's own pipeline (its factory, as written) in both libraries."""
    results = {}
    for name in ("stoker", "dali"):
        f, pdef, _ = libs(name)
        pipe = simple_pipeline_factory(sample_jpeg_dir, pdef, f)(batch_size=8, num_threads=1, device_id=None,
                                                                 seed=1234)
        pipe.build()
        labels_seen = []
        for _ in range(3):  # 24 files, batch 8: exactly one epoch
            images, labels = pipe.run()
            labels_seen.extend(np.array(labels.as_tensor()).ravel().tolist())
        results[name] = (images.layout(), np.array(images.at(0)).dtype, np.array(images.at(0)).ndim,
                         labels.as_tensor().shape(), sorted(labels_seen))
    assert results["stoker"] == results["dali"]
