"""Augmentation gallery: one decoded image through several of the image operators.

The port of DALI's augmentation gallery (import renamed). Each operator gets fixed arguments, so
the numbers are the same run after run (and comparable with DALI's). Prints the mean value of
every augmented image; ``--save gallery.png`` also writes them side by side (needs OpenCV).

    python examples/augmentation_gallery.py [--cpu] [--save gallery.png]
"""

from __future__ import annotations

import argparse
import tempfile

import numpy as np

from stoker import fn, pipeline_def, types
from stoker.backend.cuda import cuda_available
from stoker.sample_data import write_dataset

SIZE = 128
NAMES = ("original", "flip", "rotate", "brightness_contrast", "hsv", "saturation", "gaussian_blur", "crop",
         "color_space", "cmn")


def augmentations(images) -> dict:
    """The gallery: a name for each augmented version of ``images`` (HWC uint8, SIZE x SIZE)."""
    return {
        "original": images,
        "flip": fn.flip(images, horizontal=1, vertical=0),
        "rotate": fn.rotate(images, angle=30.0, fill_value=0, keep_size=True),
        "brightness_contrast": fn.brightness_contrast(images, brightness=1.3, contrast=0.7),
        "hsv": fn.hsv(images, hue=40.0, saturation=1.6, value=0.9),
        "saturation": fn.saturation(images, saturation=0.2),
        "gaussian_blur": fn.gaussian_blur(images, window_size=7, sigma=2.0),
        "crop": fn.crop(images, crop=(64, 64), crop_pos_x=0.25, crop_pos_y=0.75),
        "color_space": fn.color_space_conversion(images, image_type=types.RGB, output_type=types.GRAY),
        "cmn": fn.crop_mirror_normalize(images, crop=(96, 96), mirror=1, dtype=types.FLOAT, output_layout="CHW",
                                        mean=[0.485 * 255, 0.456 * 255, 0.406 * 255],
                                        std=[0.229 * 255, 0.224 * 255, 0.225 * 255]),
    }


def build(root: str, gpu: bool):
    @pipeline_def(batch_size=2, num_threads=2, device_id=0 if gpu else None, seed=7)
    def gallery():
        jpegs, _ = fn.readers.file(file_root=root, random_shuffle=False)
        images = fn.decoders.image(jpegs, device="mixed" if gpu else "cpu", output_type=types.RGB)
        images = fn.resize(images, resize_x=SIZE, resize_y=SIZE)
        versions = augmentations(images)
        return tuple(versions[name] for name in NAMES)

    pipe = gallery()
    pipe.build()
    return pipe


def save(path: str, arrays: list[np.ndarray]) -> None:
    import cv2

    tiles = []
    for a in arrays:
        if a.ndim == 3 and a.shape[0] == 3 and a.shape[2] != 3:  # CHW, normalized: back to viewable HWC
            a = np.clip(a.transpose(1, 2, 0) * 60 + 128, 0, 255)
        a = np.asarray(a, np.uint8)
        a = np.repeat(a, 3, axis=2) if a.shape[2] == 1 else a
        tile = np.zeros((SIZE, SIZE, 3), np.uint8)
        tile[:a.shape[0], :a.shape[1]] = a
        tiles.append(tile)
    cv2.imwrite(path, cv2.cvtColor(np.concatenate(tiles, axis=1), cv2.COLOR_RGB2BGR))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cpu", action="store_true", help="stay on the CPU even where a GPU is found")
    parser.add_argument("--save", help="write the gallery (first image) to this PNG file")
    args = parser.parse_args(argv)
    gpu = cuda_available() and not args.cpu
    with tempfile.TemporaryDirectory() as root:
        write_dataset(root, 4, classes=1, seed=3, workers=1, progress=False)
        pipe = build(root, gpu)
        outputs = pipe.run()
    firsts, means = [], []
    for name, out in zip(NAMES, outputs):
        out = out.as_cpu() if gpu else out
        first = np.asarray(out.at(0))
        firsts.append(first)
        means.append(float(np.mean([np.asarray(out.at(i), np.float64).mean() for i in range(len(out))])))
        print(f"{name:>20}: shape {first.shape} {first.dtype}, mean {means[-1]:.3f}")
    if args.save:
        save(args.save, firsts)
        print(f"gallery written to {args.save}")
    print("result:", " ".join(f"{m:.3f}" for m in means))


if __name__ == "__main__":
    main()
