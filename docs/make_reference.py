"""Write the operator reference in docs/operators/ from the operator schemas.

    python docs/make_reference.py            # pages and pictures
    python docs/make_reference.py --text     # pages only (what tests/test_docs.py checks)

One Markdown page per ``fn`` namespace (``fn``, ``fn.readers``, ``fn.decoders`` ...) listing each
operator's description, devices, inputs and arguments, all read from its
:class:`~stoker.operators.schema.Schema`, so the pages cannot say something the code does not.
Image operators listed in :data:`PICTURES` also get a before/after picture: the operator run
eagerly (``stoker.dynamic``) with the fixed arguments given there on one synthetic sample photo.
Operators whose names start with ``_`` are the graph's internals and are left out.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import defaultdict

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "operators")
IMG = os.path.join(OUT, "img")
TILE = 128  # height of each half of a before/after picture, in pixels

# Operator -> the fixed arguments its picture is made with (an HWC uint8 RGB input).
PICTURES: dict[str, dict] = {
    "resize": {"size": [96, 160]},
    "random_resized_crop": {"size": [128, 128], "seed": 3},
    "crop": {"crop": [200, 200]},
    "slice": {"rel_start": [0.2, 0.2], "rel_shape": [0.5, 0.5], "axis_names": "HW"},
    "flip": {"horizontal": 1},
    "rotate": {"angle": 20.0, "fill_value": 0},
    "warp_affine": {"matrix": [1.0, 0.3, 0.0, 0.1, 1.0, 0.0], "fill_value": 0},
    "pad": {"axis_names": "HW", "shape": [700, 700], "fill_value": 64},
    "paste": {"ratio": 1.5, "fill_value": [40, 40, 40], "paste_x": 0.5, "paste_y": 0.5},
    "erase": {"anchor": [150, 150], "shape": [200, 250], "axis_names": "HW", "fill_value": 0},
    "crop_mirror_normalize": {"crop": [300, 300], "mirror": 1, "mean": [128.0], "std": [64.0]},
    "brightness": {"brightness": 1.6},
    "contrast": {"contrast": 2.0},
    "brightness_contrast": {"brightness": 1.2, "contrast": 0.5},
    "hue": {"hue": 90.0},
    "saturation": {"saturation": 0.2},
    "hsv": {"hue": 45.0, "saturation": 1.5, "value": 0.8},
    "color_twist": {"hue": -45.0, "saturation": 1.3, "contrast": 1.2},
    "color_space_conversion": {"image_type": "RGB", "output_type": "GRAY"},
    "gaussian_blur": {"sigma": 4.0},
    "laplacian": {"window_size": 5, "dtype": "float"},  # (float: a uint8 result clips the negative half)
    "jpeg_compression_distortion": {"quality": 5},
    "clahe": {"tiles_x": 4, "tiles_y": 4, "clip_limit": 4.0},
    "jitter": {"nDegree": 4, "seed": 3},
    "water": {"ampl_x": 10.0, "ampl_y": 10.0},
    "sphere": {},
    "grid_mask": {"ratio": 0.4, "tile": 100},
    "noise.gaussian": {"stddev": 30.0, "seed": 3},
    "noise.salt_and_pepper": {"prob": 0.1, "seed": 3},
    "noise.shot": {"factor": 20.0, "seed": 3},
}


def _cell(text) -> str:
    """Text safe inside a Markdown table cell."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _default(value) -> str:
    from stoker.operators.schema import REQUIRED

    if value is REQUIRED:
        return "required"
    if callable(value) or " at 0x" in repr(value):  # (an address would change at every run)
        return f"`{getattr(value, '__name__', type(value).__name__)}`"
    return f"`{value!r}`"


def namespace(name: str) -> str:
    """The ``fn`` namespace a dotted operator name lives in ("fn.readers" for "readers.file")."""
    return "fn." + name.rsplit(".", 1)[0] if "." in name else "fn"


def picture_name(op: str) -> str:
    return op.replace(".", "_") + ".png"


def operator_section(name: str, cls) -> str:
    """One operator's Markdown: description, devices, inputs/outputs and the argument table."""
    s = cls.schema
    lo, hi = s.inputs
    inputs = f"{lo}" if lo == hi else f"{lo} to {hi}"
    outputs = s.num_outputs if isinstance(s.num_outputs, int) else "depends on the arguments"
    lines = [f"## `fn.{name}`", "", s.doc.strip(), "",
             f"- devices: {', '.join(f'`{d}`' for d in s.devices)}",
             f"- inputs: {inputs}; outputs: {outputs}"]
    legacy = [n for n in (s.legacy_name, *s.extra_legacy_names) if n]
    if legacy:
        lines.append(f"- legacy API: {', '.join(f'`ops.{n}`' for n in legacy)}")
    if s.random:
        lines.append("- draws random values: `seed` (or the pipeline's) decides them")
    if name in PICTURES:
        args = ", ".join(f"{k}={v!r}" for k, v in PICTURES[name].items()) or "defaults"
        lines += ["", f"![fn.{name} before and after](img/{picture_name(name)})", "",
                  f"*Left: the input; right: `fn.{name}({args})`.*"]
    if s.args:
        lines += ["", "| argument | type | default | per-sample | what it does |",
                  "| --- | --- | --- | --- | --- |"]
        for a in s.args:
            lines.append(f"| `{a.name}` | {a.kind} | {_default(a.default)} | {'yes' if a.tensor else ''} | "
                         f"{_cell(a.doc)} |")
    return "\n".join(lines) + "\n"


def pages() -> dict[str, str]:
    """File name (in docs/operators/) -> Markdown text, for every namespace and the index."""
    from stoker.operators.schema import COMMON_ARGS, registered

    by_ns: dict[str, list] = defaultdict(list)
    for name, cls in sorted(registered().items()):
        if not any(part.startswith("_") for part in name.split(".")):
            by_ns[namespace(name)].append((name, cls))
    out = {}
    index = ["# Operator reference", "",
             "Generated from the operator schemas by `python docs/make_reference.py`; do not edit by hand.",
             "`help(stoker.fn.NAME)` shows the same text in Python.", "",
             "| namespace | operators |", "| --- | --- |"]
    for ns in sorted(by_ns):
        ops = by_ns[ns]
        file = f"{ns}.md"
        index.append(f"| [`{ns}`]({file}) | {', '.join(n.rsplit('.', 1)[-1] for n, _ in ops)} |")
        body = [f"# `stoker.{ns}`", "",
                f"{len(ops)} operators. Arguments every operator takes are listed in [the index](README.md).", ""]
        body += [operator_section(name, cls) for name, cls in ops]
        out[file] = "\n".join(body)
    index += ["", "## Arguments of every operator", "", "| argument | type | default | what it does |",
              "| --- | --- | --- | --- |"]
    index += [f"| `{a.name}` | {a.kind} | {_default(a.default)} | {_cell(a.doc)} |" for a in COMMON_ARGS]
    out["README.md"] = "\n".join(index) + "\n"
    return out


def sample_image():
    """The picture's input: a synthetic photo from stoker.sample_data, HWC uint8 RGB."""
    from stoker.sample_data import make_image

    return make_image(3, 1)[0]


def _tile(a, layout: str = "HWC"):
    import cv2
    import numpy as np

    from stoker._cli_show import to_rgb8

    rgb = to_rgb8(np.asarray(a), layout)
    h, w = rgb.shape[:2]
    return cv2.resize(rgb, (max(1, round(w * TILE / h)), TILE), interpolation=cv2.INTER_AREA)


def write_pictures() -> list[str]:
    """Run each operator of :data:`PICTURES` on the sample photo and save input | output PNGs;
    returns the files written."""
    import cv2
    import numpy as np

    import stoker.dynamic as ndd
    from stoker import types

    os.makedirs(IMG, exist_ok=True)
    src = sample_image()
    before = _tile(src)
    written = []
    for op, kwargs in PICTURES.items():
        func = ndd
        for part in op.split("."):
            func = getattr(func, part)
        kwargs = {k: (types.FLOAT if v == "float" else v) for k, v in kwargs.items()}
        out = func(ndd.as_tensor(src, layout="HWC"), **kwargs)
        layout = out.layout if isinstance(getattr(out, "layout", None), str) else ""
        after = _tile(np.asarray(out), layout or "HWC")
        gap = np.full((TILE, 6, 3), 255, np.uint8)
        path = os.path.join(IMG, picture_name(op))
        cv2.imwrite(path, cv2.cvtColor(np.hstack([before, gap, after]), cv2.COLOR_RGB2BGR),
                    [cv2.IMWRITE_PNG_COMPRESSION, 9])
        written.append(path)
    return written


def write_pages() -> list[str]:
    os.makedirs(OUT, exist_ok=True)
    written = []
    for file, text in pages().items():
        path = os.path.join(OUT, file)
        with open(path, "w") as f:
            f.write(text)
        written.append(path)
    return written


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--text", action="store_true", help="write the pages only, not the pictures")
    a = ap.parse_args(argv)
    files = write_pages()
    if not a.text:
        files += write_pictures()
    size = sum(os.path.getsize(p) for p in files)
    print(f"{len(files)} files, {size / 1e6:.2f} MB, in {os.path.relpath(OUT)}")


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(HERE))  # run from a checkout without installing
    main()
