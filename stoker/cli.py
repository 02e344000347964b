"""Command line: ``stoker demo`` (sample data -> training pipeline -> images/s + preview PNG),
``stoker sample-data`` and ``stoker info``.

The demo's pipeline is the standard ImageNet training pipeline written with the
DALI API: file reader, decode with random crop, resize 224, random mirror,
normalize to float CHW.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

MEAN = [0.485 * 255, 0.456 * 255, 0.406 * 255]
STD = [0.229 * 255, 0.224 * 255, 0.225 * 255]


def training_pipeline(root: str, batch_size: int, num_threads: int, device_id=None, seed: int = 42):
    """The standard training pipeline (CPU decode when device_id is None, mixed decode otherwise)."""
    import stoker.fn as fn
    from stoker import pipeline_def, types

    decode_device = "cpu" if device_id is None else "mixed"

    @pipeline_def(batch_size=batch_size, num_threads=num_threads, device_id=device_id, seed=seed)
    def train():
        jpegs, labels = fn.readers.file(file_root=root, random_shuffle=True, name="reader")
        images = fn.decoders.image_random_crop(jpegs, device=decode_device, output_type=types.RGB)
        images = fn.resize(images, resize_x=224, resize_y=224)
        images = fn.crop_mirror_normalize(images, dtype=types.FLOAT, output_layout="CHW", mean=MEAN, std=STD,
                                          mirror=fn.random.coin_flip(probability=0.5))
        return images, labels

    return train()


def write_preview(images: np.ndarray, path: str, columns: int = 8) -> None:
    """Save up to 16 normalized CHW float images as one PNG grid (un-normalized to RGB)."""
    import cv2

    tiles = []
    for chw in images[:16]:
        rgb = chw.transpose(1, 2, 0) * np.asarray(STD, np.float32) + np.asarray(MEAN, np.float32)
        tiles.append(np.clip(rgb, 0, 255).astype(np.uint8))
    while len(tiles) % columns:
        tiles.append(np.zeros_like(tiles[0]))
    rows = [np.hstack(tiles[i:i + columns]) for i in range(0, len(tiles), columns)]
    cv2.imwrite(path, cv2.cvtColor(np.vstack(rows), cv2.COLOR_RGB2BGR))


def demo(args) -> None:
    from stoker.sample_data import write_dataset

    t0 = time.perf_counter()
    stats = write_dataset(args.data, args.images, classes=10)
    print(f"sample data: {stats['images']} JPEGs ({stats['mean_kb']:.0f} KB mean) in {args.data} "
          f"[{time.perf_counter() - t0:.1f} s]")
    device_id = None if args.device_id < 0 else args.device_id
    t0 = time.perf_counter()
    pipe = training_pipeline(args.data, args.batch_size, args.threads, device_id)
    pipe.build()
    images, labels = pipe.run()
    first = time.perf_counter() - t0
    batch = images.as_cpu().as_array() if hasattr(images, "as_cpu") else images.as_array()
    write_preview(batch, args.preview)
    print(f"first batch: {first:.2f} s; batch {batch.shape} {batch.dtype}, labels {labels.as_cpu().as_array()[:8, 0]}"
          f" -> preview written to {args.preview}")
    n, t1 = 0, time.perf_counter()
    while time.perf_counter() - t1 < args.seconds:
        pipe.run()
        n += args.batch_size
    rate = n / (time.perf_counter() - t1)
    where = "CPU only" if device_id is None else f"GPU {device_id}"
    print(f"training pipeline ({where}, {args.threads} threads, batch {args.batch_size}): {rate:,.0f} images/s")
    pipe.close()


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="stoker", description="stoker: keeps GPUs fed")
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("demo", help="generate sample data, run the training pipeline, print images/s")
    d.add_argument("--data", default="sample_data")
    d.add_argument("--images", type=int, default=1000)
    d.add_argument("--batch-size", type=int, default=64)
    d.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    d.add_argument("--device-id", type=int, default=-1, help="GPU index; -1 (default) runs on the CPU")
    d.add_argument("--seconds", type=float, default=10.0)
    d.add_argument("--preview", default="preview.png")
    s = sub.add_parser("sample-data", help="write an ImageNet-like JPEG folder")
    s.add_argument("out")
    s.add_argument("n", type=int)
    s.add_argument("--classes", type=int, default=10)
    sub.add_parser("info", help="what stoker sees: version, operators, GPU")
    a = ap.parse_args(argv)
    if a.cmd == "demo":
        demo(a)
    elif a.cmd == "sample-data":
        from stoker.sample_data import main as sample_main

        sample_main([a.out, str(a.n), "--classes", str(a.classes)])
    else:
        import stoker
        from stoker.backend.cuda import unavailable_reason
        from stoker.operators.schema import registered

        ops = sorted(k for k in registered() if not k.startswith("_"))
        print(f"stoker {stoker.__version__}; {len(ops)} operators: {', '.join(ops)}")
        print("GPU:", unavailable_reason(0) or "available")


if __name__ == "__main__":
    main()
