"""torchvision's ways of feeding a GPU, for the side-by-side rows of the GPU benchmark.

    python benchmarks/torchvision_gpu.py DATA_DIR [--seconds 10] [--workers 16] [--batch 256]
        [--modes dataloader,decode_jpeg_cuda] [--pipelines train,val]

The same training / validation pipelines as ``shared/bench/gpu_bench.py`` runs through the DALI
API (random-crop 224 + mirror, or resize shorter 256 + centre crop 224; float CHW normalized on the
GPU):

* ``dataloader``: a ``torch.utils.data.DataLoader`` with ``--workers`` worker processes, PIL
  decode and transforms v2 in the workers, pinned batches copied to the GPU, normalized there.
* ``decode_jpeg_cuda``: a DataLoader (``--workers``) only reads the files; the training process
  decodes each batch with ``torchvision.io.decode_jpeg(list, device="cuda")`` (nvJPEG, batched),
  then crops / resizes / flips on the GPU, one image at a time (torchvision has no batched
  variable-size resize).

Each (mode, pipeline) runs in its own process. Prints one JSON line each: images/s, first batch
time, GPU memory taken (cudaMemGetInfo difference, and torch's peak allocation).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time

MEAN = [0.485 * 255, 0.456 * 255, 0.406 * 255]
STD = [0.229 * 255, 0.224 * 255, 0.225 * 255]


def _files(root):
    classes = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
    return [(os.path.join(root, c, f), k) for k, c in enumerate(classes)
            for f in sorted(os.listdir(os.path.join(root, c)))]


class _Decoded:
    """PIL decode + transforms in the worker (the classic torchvision input pipeline)."""

    def __init__(self, items, train):
        from torchvision.transforms import v2

        self.items = items
        steps = [v2.RandomResizedCrop(224, antialias=True), v2.RandomHorizontalFlip()] if train else \
            [v2.Resize(256, antialias=True), v2.CenterCrop(224)]
        self.transform = v2.Compose([v2.PILToTensor(), *steps])

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        from PIL import Image

        path, label = self.items[i]
        with Image.open(path) as im:
            return self.transform(im.convert("RGB")), label


class _Encoded:
    """Only the file's bytes (decoded on the GPU by the training process)."""

    def __init__(self, items):
        self.items = items

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        import torch

        path, label = self.items[i]
        with open(path, "rb") as f:
            return torch.frombuffer(bytearray(f.read()), dtype=torch.uint8), label


def _as_list(batch):
    return [b[0] for b in batch], [b[1] for b in batch]


def _gpu_transform(images, train):
    import torch
    from torchvision.transforms import v2
    from torchvision.transforms.v2 import functional as F

    out = []
    for img in images:
        if train:
            i, j, h, w = v2.RandomResizedCrop.get_params(img, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3))
            img = F.resized_crop(img, i, j, h, w, [224, 224], antialias=True)
            if torch.rand(()) < 0.5:
                img = F.horizontal_flip(img)
        else:
            img = F.center_crop(F.resize(img, 256, antialias=True), 224)
        out.append(img)
    return torch.stack(out)


def child(mode, pipeline, root, seconds, workers, batch):
    import torch
    from torch.utils.data import DataLoader
    from torchvision.io import ImageReadMode, decode_jpeg

    train = pipeline == "train"
    dev = torch.device("cuda", 0)
    torch.cuda.init()
    free0, _ = torch.cuda.mem_get_info(dev)
    mean = torch.tensor(MEAN, device=dev).view(1, 3, 1, 1)
    std = torch.tensor(STD, device=dev).view(1, 3, 1, 1)
    items = _files(root)
    t0 = time.perf_counter()
    if mode == "dataloader":
        ds, collate = _Decoded(items, train), None
    else:
        ds, collate = _Encoded(items), _as_list
    loader = DataLoader(ds, batch_size=batch, shuffle=train, num_workers=workers, pin_memory=mode == "dataloader",
                        drop_last=True, persistent_workers=True, prefetch_factor=4, collate_fn=collate)

    def batches():
        while True:
            for images, labels in loader:
                if mode == "dataloader":
                    x = images.to(dev, non_blocking=True)
                else:
                    x = _gpu_transform(decode_jpeg(images, mode=ImageReadMode.RGB, device=dev), train)
                x = (x.float() - mean) / std
                yield x, torch.as_tensor(labels).to(dev, non_blocking=True)

    it = batches()
    next(it)
    torch.cuda.synchronize()
    first = time.perf_counter() - t0
    for _ in range(3):
        next(it)
    n, t1 = 0, time.perf_counter()
    while time.perf_counter() - t1 < seconds:
        next(it)
        n += batch
    torch.cuda.synchronize()
    rate = n / (time.perf_counter() - t1)
    free1, _ = torch.cuda.mem_get_info(dev)
    print(json.dumps({"lib": f"torchvision-{mode}", "pipeline": pipeline, "workers": workers, "img_s": round(rate),
                      "first_batch_s": round(first, 2), "gpu_mem_mib": round((free0 - free1) / 2**20),
                      "torch_peak_mib": round(torch.cuda.max_memory_allocated(dev) / 2**20)}), flush=True)
    os._exit(0)  # skip the workers' orderly shutdown


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        _, _, mode, pipeline, root, seconds, workers, batch = sys.argv
        child(mode, pipeline, root, float(seconds), int(workers), int(batch))
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("root")
    ap.add_argument("--seconds", default="10")
    ap.add_argument("--workers", default="16")
    ap.add_argument("--batch", default="256")
    ap.add_argument("--modes", default="dataloader,decode_jpeg_cuda")
    ap.add_argument("--pipelines", default="train,val")
    a = ap.parse_args()
    for mode in a.modes.split(","):
        for pipeline in a.pipelines.split(","):
            print(_run_child(mode, pipeline, a), flush=True)


def _run_child(mode, pipeline, a) -> str:
    """The child's JSON line. The child's process group is killed once it has printed: the
    DataLoader's worker processes would otherwise keep the pipe open until they notice their
    parent is gone."""
    p = subprocess.Popen([sys.executable, __file__, "--child", mode, pipeline, a.root, a.seconds, a.workers,
                          a.batch], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    timer = threading.Timer(300, os.killpg, (p.pid, signal.SIGKILL))
    timer.start()
    try:
        for line in p.stdout:
            if line.startswith("{"):
                return line.strip()
        return json.dumps({"lib": f"torchvision-{mode}", "pipeline": pipeline, "error": p.stderr.read()[-600:]})
    finally:
        timer.cancel()
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait()


if __name__ == "__main__":
    main()
