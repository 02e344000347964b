"""Getting started: read JPEG files from class folders, decode them and resize them.

The port of DALI's first tutorial: only the import changes (``nvidia.dali`` -> ``stoker``). The
script writes a dozen generated JPEGs in three class folders to a temporary directory, builds the
pipeline (decoding on the GPU with ``device="mixed"`` when one is found, else on the CPU), runs
one batch and prints each sample's shape, label and mean value.

    python examples/getting_started.py [--cpu] [--batch 4]
"""

from __future__ import annotations

import argparse
import tempfile

import numpy as np

from stoker import fn, pipeline_def, types
from stoker.backend.cuda import cuda_available
from stoker.sample_data import write_dataset


def build(root: str, batch_size: int, gpu: bool):
    """file reader -> decoder -> resize to 96x64; outputs (images HWC uint8, labels)."""

    @pipeline_def(batch_size=batch_size, num_threads=2, device_id=0 if gpu else None, seed=12)
    def simple_pipeline():
        jpegs, labels = fn.readers.file(file_root=root, random_shuffle=False, name="Reader")
        images = fn.decoders.image(jpegs, device="mixed" if gpu else "cpu", output_type=types.RGB)
        images = fn.resize(images, resize_x=96, resize_y=64)
        return images, labels

    pipe = simple_pipeline()
    pipe.build()
    return pipe


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cpu", action="store_true", help="stay on the CPU even where a GPU is found")
    parser.add_argument("--batch", type=int, default=4)
    args = parser.parse_args(argv)
    gpu = cuda_available() and not args.cpu
    with tempfile.TemporaryDirectory() as root:
        write_dataset(root, 12, classes=3, seed=0, workers=1, progress=False)
        pipe = build(root, args.batch, gpu)
        print(f"epoch size: {pipe.reader_meta('Reader')['epoch_size']}, device: {'gpu' if gpu else 'cpu'}")
        images, labels = pipe.run()
        if gpu:
            images = images.as_cpu()
        means = []
        for i in range(len(images)):
            img = np.asarray(images.at(i))
            means.append(float(img.mean()))
            print(f"sample {i}: shape {img.shape} {img.dtype}, label {int(np.asarray(labels.at(i)).item())}, "
                  f"mean {means[-1]:.2f}")
        print("result:", " ".join(f"{m:.3f}" for m in means))


if __name__ == "__main__":
    main()
