"""A clip loader for a video-classification model (a 3D CNN / video transformer) on stoker.

file_root with one folder per class -> readers.video (16 frames, every 2nd frame, shuffled)
-> resize the shorter side to 128 -> random crop 112x112 with random mirror, normalized, as
float "CFHW" clips (channels first, then frames: what torchvision's video models take).

Without --root, writes a small data set of generated H.264 clips (moving gradients, 3 classes)
into a temporary folder. Prints the shapes of the first batch and the clips/s. Needs PyAV
(``pip install 'stoker[video]'``); ``--device gpu`` decodes with NVDEC where PyNvVideoCodec and
a GPU are present.

    python examples/video_clips.py [--root DIR] [--clips 24] [--batch 8] [--threads 4] [--device cpu]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np

from stoker import fn, pipeline_def, types


def write_dataset(folder: str, count: int, frames: int = 64) -> None:
    """``count`` clips of ``frames`` 160x120 frames in class folders c0, c1, c2 of ``folder``."""
    import av

    codec = "libx264"
    try:
        av.codec.Codec(codec, "w")
    except Exception:  # noqa: BLE001 - a PyAV wheel without x264: MPEG-4 part 2 instead
        codec = "mpeg4"
    y, x = np.mgrid[0:120, 0:160]
    for i in range(count):
        d = os.path.join(folder, f"c{i % 3}")
        os.makedirs(d, exist_ok=True)
        with av.open(os.path.join(d, f"clip{i:03d}.mp4"), "w") as c:
            s = c.add_stream(codec, rate=25)
            s.width, s.height, s.pix_fmt = 160, 120, "yuv420p"
            for t in range(frames):
                img = np.stack([(x * (i % 3 + 1) + t * 5) % 256, (y * 2 + t * 3) % 256,
                                np.full_like(x, (i * 40) % 256)], -1).astype(np.uint8)
                for p in s.encode(av.VideoFrame.from_ndarray(img, format="rgb24")):
                    c.mux(p)
            for p in s.encode():
                c.mux(p)


def make_pipeline(root: str, batch: int, threads: int, device: str):
    @pipeline_def(batch_size=batch, num_threads=threads, device_id=0 if device == "gpu" else None, seed=7)
    def clips():
        video, label = fn.readers.video(device=device, file_root=root, sequence_length=16, stride=2,
                                        random_shuffle=True, initial_fill=64, name="Reader")
        video = fn.resize(video, resize_shorter=128)
        video = fn.crop_mirror_normalize(
            video, crop=(112, 112), crop_pos_x=fn.random.uniform(range=(0, 1)),
            crop_pos_y=fn.random.uniform(range=(0, 1)), mirror=fn.random.coin_flip(),
            mean=[0.43 * 255, 0.39 * 255, 0.38 * 255], std=[0.23 * 255, 0.22 * 255, 0.22 * 255],
            dtype=types.FLOAT, output_layout="CFHW")
        return video, label

    return clips()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", help="folder of class sub-folders of clips (default: generated)")
    ap.add_argument("--clips", type=int, default=24, help="clips to generate without --root")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--iterations", type=int, default=10)
    ap.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = args.root
        if root is None:
            root = tmp
            write_dataset(root, args.clips)
        pipe = make_pipeline(root, args.batch, args.threads, args.device)
        pipe.build()
        print("samples per epoch:", pipe.reader_meta("Reader")["epoch_size"])
        video, label = pipe.run()
        print("clips:", video.layout(), [tuple(video[i].shape()) for i in range(min(2, len(video)))],
              "labels:", [int(np.array(label.as_cpu().at(i) if args.device == "gpu" else label.at(i))[0])
                          for i in range(len(label))])
        start = time.perf_counter()
        for _ in range(args.iterations):
            pipe.run()
        took = time.perf_counter() - start
        print(f"{args.iterations * args.batch / took:.1f} clips/s ({args.threads} threads, device {args.device})")


if __name__ == "__main__":
    main()
