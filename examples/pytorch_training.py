"""PyTorch: a training loop fed by ``DALIGenericIterator`` (import renamed from
``nvidia.dali.plugin.pytorch``).

Writes 32 generated JPEGs in 4 class folders, builds a reader -> decoder -> random resized crop
-> crop_mirror_normalize pipeline (on the GPU when one is found) and trains a tiny convolutional
network for two epochs. The iterator gives dicts of torch tensors keyed by ``output_map``;
``reader_name`` makes it stop at the end of each epoch, and ``LastBatchPolicy.PARTIAL`` keeps
the last, smaller batch.

    python examples/pytorch_training.py [--cpu] [--epochs 2]
"""

from __future__ import annotations

import argparse
import tempfile

import torch

from stoker import fn, pipeline_def, types
from stoker.backend.cuda import cuda_available
from stoker.plugin.pytorch import DALIGenericIterator, LastBatchPolicy
from stoker.sample_data import write_dataset

SIZE = 32
CLASSES = 4


def build(root: str, batch_size: int, gpu: bool):
    @pipeline_def(batch_size=batch_size, num_threads=2, device_id=0 if gpu else None, seed=5)
    def training():
        jpegs, labels = fn.readers.file(file_root=root, random_shuffle=True, name="Reader")
        images = fn.decoders.image(jpegs, device="mixed" if gpu else "cpu", output_type=types.RGB)
        images = fn.random_resized_crop(images, size=(SIZE, SIZE))
        images = fn.crop_mirror_normalize(images, dtype=types.FLOAT, output_layout="CHW",
                                          mirror=fn.random.coin_flip(probability=0.5),
                                          mean=[127.5] * 3, std=[64.0] * 3)
        return images, labels.gpu() if gpu else labels

    pipe = training()
    pipe.build()
    return pipe


def tiny_net() -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(8, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(), torch.nn.Linear(16, CLASSES))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cpu", action="store_true", help="stay on the CPU even where a GPU is found")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch", type=int, default=10)
    args = parser.parse_args(argv)
    gpu = cuda_available() and not args.cpu
    device = torch.device("cuda" if gpu else "cpu")
    torch.manual_seed(0)
    model = tiny_net().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    with tempfile.TemporaryDirectory() as root:
        write_dataset(root, 32, classes=CLASSES, seed=2, workers=1, progress=False)
        loader = DALIGenericIterator([build(root, args.batch, gpu)], ["data", "label"], reader_name="Reader",
                                     last_batch_policy=LastBatchPolicy.PARTIAL, auto_reset=True)
        steps = 0
        for epoch in range(args.epochs):
            seen, total = 0, 0.0
            for batch in loader:
                data, label = batch[0]["data"], batch[0]["label"].reshape(-1).long()
                loss = torch.nn.functional.cross_entropy(model(data), label)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                steps += 1
                seen += data.shape[0]
                total += loss.item() * data.shape[0]
            print(f"epoch {epoch}: {seen} samples, mean loss {total / seen:.4f}")
    print(f"trained {steps} steps on {device.type}")
    print(f"result: {total / seen:.4f}")


if __name__ == "__main__":
    main()
