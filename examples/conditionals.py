"""Conditionals: ``if``/``else`` on a per-sample value inside a pipeline (``enable_conditionals``).

The port of DALI's conditional-execution tutorial (import renamed). With
``enable_conditionals=True`` an ``if`` whose condition is a DataNode is taken per sample: each
sample goes through the branch its own condition picks, and the branches' results are merged
back into one batch in sample order. Here images brighter than average are darkened and flipped,
the others brightened, and every sample with an odd label is also rotated by 90 degrees.

    python examples/conditionals.py [--cpu]
"""

from __future__ import annotations

import argparse

import numpy as np

from stoker import fn, pipeline_def, types
from stoker.backend.cuda import cuda_available

BATCH = 6


def images(info):
    """One sample per call (``SampleInfo``): a 16x24 gradient image whose level depends on the index."""
    i = info.idx_in_epoch
    y, x = np.mgrid[0:16, 0:24]
    level = (37 * i) % 200
    img = np.stack([x * 4 + level, y * 6 + level // 2, np.full_like(x, 255 - level)], axis=2)
    return np.clip(img, 0, 255).astype(np.uint8), np.int32(i % 3)


def build(gpu: bool):
    @pipeline_def(batch_size=BATCH, num_threads=2, device_id=0 if gpu else None, enable_conditionals=True)
    def conditional():
        image, label = fn.external_source(source=images, num_outputs=2, batch=False, layout=["HWC", ""],
                                          dtype=[types.UINT8, types.INT32])
        brightness = fn.reductions.mean(image)
        if gpu:
            image = image.gpu()
        bright = brightness > 120
        if bright:
            out = fn.flip(fn.brightness(image, brightness=0.5), horizontal=1)
        else:
            out = fn.brightness(image, brightness=1.5)
        if label % 2 == 1:
            out = fn.rotate(out, angle=90.0)
        return out, fn.cast(brightness, dtype=types.FLOAT), label, bright

    pipe = conditional()
    pipe.build()
    return pipe


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cpu", action="store_true", help="stay on the CPU even where a GPU is found")
    args = parser.parse_args(argv)
    gpu = cuda_available() and not args.cpu
    out, brightness, label, bright = build(gpu).run()
    out = out.as_cpu() if gpu else out
    means = []
    for i in range(BATCH):
        img = np.asarray(out.at(i))
        means.append(float(img.mean()))
        took = "dark+flip" if bool(np.asarray(bright.at(i))) else "brighter"
        print(f"sample {i}: mean in {float(np.asarray(brightness.at(i))):6.1f} -> {took:9} "
              f"label {int(np.asarray(label.at(i)))}, out shape {img.shape}, mean {means[-1]:.2f}")
    print("result:", " ".join(f"{m:.3f}" for m in means))


if __name__ == "__main__":
    main()
