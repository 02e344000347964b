"""The legacy class API (Pipeline subclass + ops.*) gives the same batches as the fn API."""

import numpy as np

import stoker.fn as fn
import stoker.ops as ops
import stoker.types as types
from stoker import Pipeline, pipeline_def


class LegacyPipeline(Pipeline):
    def __init__(self, root, batch_size, num_threads, device_id, seed):
        super().__init__(batch_size, num_threads, device_id, seed=seed)
        self.input = ops.FileReader(file_root=root, random_shuffle=True)
        self.decode = ops.ImageDecoder(device="cpu", output_type=types.RGB)
        self.resize = ops.Resize(resize_x=64, resize_y=48)
        self.cmn = ops.CropMirrorNormalize(dtype=types.FLOAT, output_layout="CHW", crop=(32, 32),
                                           mean=[128.0, 128.0, 128.0], std=[50.0, 50.0, 50.0])
        self.coin = ops.random.CoinFlip(probability=0.5)

    def define_graph(self):
        jpegs, labels = self.input()
        images = self.resize(self.decode(jpegs))
        return self.cmn(images, mirror=self.coin()), labels


def test_legacy_pipeline_equals_fn_pipeline(sample_jpeg_dir):
    @pipeline_def
    def modern():
        jpegs, labels = fn.readers.file(file_root=sample_jpeg_dir, random_shuffle=True)
        images = fn.resize(fn.decoders.image(jpegs, device="cpu", output_type=types.RGB), resize_x=64, resize_y=48)
        images = fn.crop_mirror_normalize(images, dtype=types.FLOAT, output_layout="CHW", crop=(32, 32),
                                          mean=[128.0, 128.0, 128.0], std=[50.0, 50.0, 50.0],
                                          mirror=fn.random.coin_flip(probability=0.5))
        return images, labels

    legacy = LegacyPipeline(sample_jpeg_dir, 4, 2, None, 7)
    new = modern(batch_size=4, num_threads=2, device_id=None, seed=7)
    legacy.build()
    new.build()
    for _ in range(3):
        (a_img, a_lab), (b_img, b_lab) = legacy.run(), new.run()
        assert a_img.layout() == "CHW" and a_img.as_array().shape == (4, 3, 32, 32)
        np.testing.assert_array_equal(a_img.as_array(), b_img.as_array())
        np.testing.assert_array_equal(a_lab.as_array(), b_lab.as_array())
    legacy.close()
    new.close()


def test_legacy_iter_setup_feeds_external_source():
    class Fed(Pipeline):
        def __init__(self):
            super().__init__(batch_size=2, num_threads=1, device_id=None)
            self.source = ops.ExternalSource()
            self.cast = ops.Cast(dtype=types.FLOAT)
            self.step = 0

        def define_graph(self):
            self.data = self.source()
            return self.cast(self.data) * 2

        def iter_setup(self):
            self.step += 1
            self.feed_input(self.data, [np.full((2,), self.step, np.int32)] * 2)

    pipe = Fed()
    pipe.build()
    outs = [pipe.run()[0].as_array()[0, 0] for _ in range(3)]
    assert outs == [2.0, 4.0, 6.0]
    pipe.close()


def test_legacy_class_names_spell_dali_capitals():
    # DALI writes some words in capitals: ops.readers.COCO, ops.readers.MXNet, ops.MFCC
    for owner, name, op in [(ops.readers, "COCO", "readers.coco"), (ops.readers, "MXNet", "readers.mxnet"),
                            (ops.readers, "TFRecord", "readers.tfrecord"), (ops, "MFCC", "mfcc"),
                            (ops.readers, "Webdataset", "readers.webdataset"), (ops.readers, "File", "readers.file")]:
        assert getattr(owner, name)._op_name == op
    assert not hasattr(ops.readers, "Coco")
