"""TensorFlow / Keras: ``model.fit`` on a stoker pipeline through ``DALIDataset`` (import renamed
from ``nvidia.dali.plugin.tf``).

Writes 32 generated JPEGs in 4 class folders, builds a reader -> decoder -> resize ->
crop_mirror_normalize pipeline on the CPU and trains a tiny Keras network for a few steps. The
dataset is a real ``tf.data.Dataset`` whose elements are ``(images, labels)`` batches; like
DALI's, it does not stop at the end of the reader's epoch (readers wrap around), so ``fit`` gets
``steps_per_epoch``.

    python examples/tf_keras_train.py [--cpu] [--epochs 2] [--steps 4]
"""

from __future__ import annotations

import argparse
import os
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow's start-up notices

import tensorflow as tf  # noqa: E402

import stoker.plugin.tf as dali_tf  # noqa: E402
from stoker import fn, pipeline_def, types  # noqa: E402
from stoker.sample_data import write_dataset  # noqa: E402

SIZE = 32
CLASSES = 4


@pipeline_def(num_threads=2, device_id=None, seed=5)
def training(root: str):
    jpegs, labels = fn.readers.file(file_root=root, random_shuffle=True, name="Reader")
    images = fn.decoders.image(jpegs, output_type=types.RGB)
    images = fn.resize(images, size=(SIZE, SIZE))
    images = fn.crop_mirror_normalize(images, dtype=types.FLOAT, output_layout="HWC",
                                      mirror=fn.random.coin_flip(probability=0.5),
                                      mean=[127.5] * 3, std=[64.0] * 3)
    return images, fn.cast(labels, dtype=types.INT32)


def tiny_net() -> tf.keras.Model:
    return tf.keras.Sequential([
        tf.keras.Input((SIZE, SIZE, 3)),
        tf.keras.layers.Conv2D(8, 3, padding="same", activation="relu"),
        tf.keras.layers.MaxPooling2D(),
        tf.keras.layers.Conv2D(16, 3, padding="same", activation="relu"),
        tf.keras.layers.GlobalAveragePooling2D(),
        tf.keras.layers.Dense(CLASSES),
    ])


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cpu", action="store_true", help="accepted for the examples' test; this one is CPU only")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--steps", type=int, default=4, help="steps per epoch")
    parser.add_argument("--batch", type=int, default=8)
    args = parser.parse_args(argv)
    tf.keras.utils.set_random_seed(0)
    with tempfile.TemporaryDirectory() as root:
        write_dataset(root, 32, classes=CLASSES, seed=2, workers=1, progress=False)
        pipe = training(root, batch_size=args.batch)
        dataset = dali_tf.DALIDataset(
            pipeline=pipe, batch_size=args.batch, device_id=None,
            output_dtypes=(tf.float32, tf.int32),
            output_shapes=((args.batch, SIZE, SIZE, 3), (args.batch, 1)),  # labels: (batch, 1) as the reader gives
        ).prefetch(2)
        model = tiny_net()
        model.compile(optimizer=tf.keras.optimizers.SGD(0.05, momentum=0.9),
                      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        history = model.fit(dataset, epochs=args.epochs, steps_per_epoch=args.steps, verbose=0)
        for epoch, loss in enumerate(history.history["loss"]):
            print(f"epoch {epoch}: {args.steps} steps, mean loss {loss:.4f}")
    print(f"trained {args.epochs * args.steps} steps on cpu")
    print(f"result: {history.history['loss'][-1]:.4f}")


if __name__ == "__main__":
    main()
