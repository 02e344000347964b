"""Command line: ``stoker demo`` (sample data -> training pipeline -> images/s + preview PNG),
``stoker sample-data``, ``stoker info``, ``stoker show`` (a grid of a pipeline's images),
``stoker graph`` (its operator graph) and ``stoker index`` (TFRecord / webdataset index files).
``stoker --help`` and ``stoker CMD --help`` describe them.

The demo's pipeline is the standard ImageNet training pipeline written with the
DALI API: file reader, decode with random crop, resize 224, random mirror,
normalize to float CHW.
"""

from __future__ import annotations

import argparse
import os
import sys
import textwrap
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
    """``stoker demo``: write sample data, run the training pipeline, print images/s."""
    from stoker.sample_data import write_dataset

    t0 = time.perf_counter()
    stats = write_dataset(args.data, args.images, classes=10, progress=args.progress)
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


PIPELINE_CONVENTION = """\
PIPELINE.py is a Python file defining a function decorated with @pipeline_def that takes no
arguments or one, the data root (given with --data DIR). With exactly one such function it is
used; otherwise name it with --function NAME. The pipeline is traced (and for show, built) with
device_id=None, on the CPU."""


def wrap_help(text: str) -> str:
    """``text`` wrapped for a parser's description: these parsers use RawDescriptionHelpFormatter
    (to keep the epilog's lines), so descriptions are wrapped by hand."""
    return textwrap.fill(text, 88)


def _add_pipeline_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("pipeline", metavar="PIPELINE.py", help="Python file that defines the pipeline")
    p.add_argument("--function", metavar="NAME", help="the pipeline function to use (default: the only "
                   "@pipeline_def function of the file)")
    p.add_argument("--data", metavar="DIR", help="data root passed to a pipeline function that takes one argument")


def _progress_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="progress bar on stderr while writing images (default: only when stderr is a terminal)")


def build_parser() -> argparse.ArgumentParser:
    """The ``stoker`` argument parser (every command and option with help)."""
    from stoker._cli_info import stoker_version

    ap = argparse.ArgumentParser(prog="stoker", description="stoker: keeps GPUs fed. DALI-compatible data "
                                 "loading and augmentation on the GPU and the CPU.")
    ap.add_argument("--version", action="version", version=f"stoker {stoker_version()}",
                    help="print stoker's version and exit")
    sub = ap.add_subparsers(dest="cmd", required=True, metavar="COMMAND")

    d = sub.add_parser("demo", help="generate sample data, run the training pipeline, print images/s",
                       description="Write sample JPEGs (kept between runs), run the standard ImageNet training "
                       "pipeline on them, save a preview grid and print the throughput.")
    d.add_argument("--data", default="sample_data", help="folder for the sample data (default: %(default)s)")
    d.add_argument("--images", type=int, default=1000, help="number of sample images (default: %(default)s)")
    d.add_argument("--batch-size", type=int, default=64, help="batch size (default: %(default)s)")
    d.add_argument("--threads", type=int, default=os.cpu_count() or 2,
                   help="CPU worker threads (default: the number of cores, %(default)s)")
    d.add_argument("--device-id", type=int, default=-1, help="GPU index; -1 (default) runs on the CPU")
    d.add_argument("--seconds", type=float, default=10.0, help="how long to measure (default: %(default)s)")
    d.add_argument("--preview", default="preview.png", help="PNG grid of the first batch (default: %(default)s)")
    _progress_arg(d)

    s = sub.add_parser("sample-data", help="write an ImageNet-like folder of synthetic JPEGs",
                       description="Write N synthetic photo-like JPEGs into OUT/class_NNN/ folders (the layout "
                       "fn.readers.file reads), the data set the demo uses. Existing files are kept.")
    s.add_argument("out", metavar="OUT", help="output folder")
    s.add_argument("n", metavar="N", type=int, help="number of images")
    s.add_argument("--classes", type=int, default=10, help="number of class folders (default: %(default)s)")
    s.add_argument("--seed", type=int, default=0, help="seed of the image content (default: %(default)s)")
    _progress_arg(s)

    sub.add_parser("info", help="versions, optional packages, GPU and CPU cores that stoker sees",
                   description="Print stoker's version, Python, NumPy/OpenCV/Pillow versions, whether "
                   "libjpeg-turbo, torch, CuPy, nvImageCodec and a CUDA GPU are usable, and the CPU cores.")

    sh = sub.add_parser("show", help="save a labelled PNG grid of a pipeline's images",
                        description=wrap_help("Run a pipeline on the CPU and write its first image-like output "
                        "(HWC uint8; CHW or float outputs are min-max scaled per sample) as a grid of tiles labelled "
                        "with index, shape and label (a second output of one number per sample)."),
                        epilog=PIPELINE_CONVENTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_pipeline_args(sh)
    sh.add_argument("--n", type=int, default=16, help="number of samples to show (default: %(default)s)")
    sh.add_argument("-o", "--output", metavar="FILE.png", default="grid.png",
                    help="PNG file to write (default: %(default)s)")
    sh.add_argument("--columns", type=int, help="tiles per row (default: up to 8)")
    sh.add_argument("--tile", type=int, default=160, help="tile size in pixels (default: %(default)s)")
    sh.add_argument("--batch-size", type=int, help="override the pipeline's batch size")

    g = sub.add_parser("graph", help="draw a pipeline's operator graph (.dot, .svg or .png)",
                       description=wrap_help("Trace a pipeline and draw its operators (name, instance name, device "
                       "cpu/mixed/gpu) and edges. DOT is always written; .svg/.png are rendered by Graphviz's "
                       "dot if it is on PATH, else by a built-in layered layout."),
                       epilog=PIPELINE_CONVENTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_pipeline_args(g)
    g.add_argument("-o", "--output", metavar="FILE", default="graph.svg", help="graph.dot, graph.svg or graph.png "
                   "(default: %(default)s)")
    g.add_argument("--renderer", choices=["auto", "graphviz", "builtin"], default="auto",
                   help="auto (default): Graphviz if installed, else built-in; graphviz: require it")
    from stoker._cli_index import add_parser as add_index_parser

    add_index_parser(sub)
    from stoker._cli_bench import add_parser as add_bench_parser

    add_bench_parser(sub)
    return ap


def _sample_data(a) -> None:
    from stoker.sample_data import summary, write_dataset

    if a.n < 1 or a.classes < 1:
        raise _usage(f"N and --classes must be positive, got N={a.n}, --classes={a.classes}")
    t0 = time.perf_counter()
    stats = write_dataset(a.out, a.n, a.classes, a.seed, progress=a.progress)
    print(summary(stats, a.out, time.perf_counter() - t0))


def _usage(msg: str):
    from stoker._cli_pipeline import CLIError

    return CLIError(msg)


def main(argv=None) -> int:
    """Run the ``stoker`` command line; returns (and as a script, exits with) the exit status.

    Problems with the user's input end with a one-line ``stoker: error: ...`` on stderr and
    status 1, never a traceback.
    """
    from stoker._cli_pipeline import CLIError

    a = build_parser().parse_args(argv)
    try:
        if a.cmd == "demo":
            demo(a)
        elif a.cmd == "sample-data":
            _sample_data(a)
        elif a.cmd == "info":
            from stoker._cli_info import print_info

            print_info()
        elif a.cmd == "show":
            from stoker._cli_show import show

            print(show(a.pipeline, a.output, n=a.n, function=a.function, data=a.data, columns=a.columns,
                       tile=a.tile, batch_size=a.batch_size))
        elif a.cmd == "graph":
            from stoker._cli_graph import graph

            print(graph(a.pipeline, a.output, function=a.function, data=a.data, renderer=a.renderer))
        elif a.cmd == "index":
            from stoker._cli_index import run as write_indexes

            print(write_indexes(a))
        elif a.cmd == "bench":
            from stoker._cli_bench import run as bench

            print(bench(a))
    except CLIError as e:
        print(f"stoker {a.cmd}: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
