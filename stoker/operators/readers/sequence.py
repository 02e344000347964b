"""``fn.readers.sequence``: windows of consecutive frames from folders of image files.

Every sub-folder of ``file_root`` (sorted by name) is one sequence; its frames
are its image files (by extension, as ``readers.file`` lists them) sorted by
name; files directly in ``file_root`` and deeper folders are not frames. A
sample is a window of ``sequence_length`` frames taken every ``stride`` frames;
windows start at frame 0 and every ``step`` frames after it as long as the
whole window fits in its sequence (a sequence shorter than one window gives
none). The samples are the windows of the first sequence in order, then those
of the next, as DALI lists them.

Output per sample: the decoded frames stacked, ``(F, H, W, C)`` uint8, layout
"FHWC" (every frame of a window must have one size); no label. ``source_info``
names the sequence folder and the window's first frame.
"""

from __future__ import annotations

import os

import numpy as np

from stoker import types
from stoker.operators.decoders.cpu import decode_cpu
from stoker.operators.readers import storage
from stoker.operators.readers._indexed import IndexedReader
from stoker.operators.readers._listing import ListingError
from stoker.operators.readers.file import READER_ARGS
from stoker.operators.schema import REQUIRED, Arg, Schema, register

# The frame files: the image extensions DALI's sequence reader takes (any case).
_IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff", ".pnm", ".ppm", ".pgm", ".pbm", ".jp2", ".webp")


def list_sequences(file_root: str) -> list[tuple[str, list[str]]]:
    """``(folder, sorted frame file names)`` of every sub-folder of ``file_root``, sorted by folder."""
    if not os.path.isdir(file_root):
        what = "is not a directory" if os.path.exists(file_root) else "does not exist"
        raise ListingError("file_root", f"{file_root!r} {what}")
    try:
        with os.scandir(file_root) as it:
            folders = sorted(e.name for e in it if e.is_dir())
    except OSError as e:
        raise ListingError("file_root", f"cannot list {file_root!r}: {e.strerror or e}") from None
    out = []
    for d in folders:
        try:
            with os.scandir(os.path.join(file_root, d)) as it:
                names = sorted(e.name for e in it if e.name.lower().endswith(_IMAGE_EXTENSIONS) and not e.is_dir())
        except OSError as e:
            raise ListingError("file_root", f"cannot list {os.path.join(file_root, d)!r}: {e.strerror or e}") from None
        out.append((d, names))
    return out


def window_starts(frames: int, length: int, step: int, stride: int) -> range:
    """First frames of the windows of a sequence of ``frames`` frames."""
    span = (length - 1) * stride + 1
    return range(0, max(frames - span + 1, 0), step)


@register
class SequenceReader(IndexedReader):
    """Reads windows of frames from folders of images (``fn.readers.sequence`` / ``ops.readers.Sequence``)."""

    schema = Schema(
        name="readers.sequence",
        doc="Reads sequences of frames: each sub-folder of file_root holds one sequence's image files "
            "(sorted by name). A sample is sequence_length frames, one every stride frames, from a start that "
            "moves by step; the frames are decoded and stacked (F, H, W, C) uint8, layout 'FHWC'.",
        args=[
            Arg("file_root", "str", REQUIRED, doc="folder with one sub-folder of frames per sequence"),
            Arg("sequence_length", "int", REQUIRED, doc="frames per sample"),
            Arg("step", "int", 1, doc="frames between the starts of consecutive windows"),
            Arg("stride", "int", 1, doc="frames between consecutive frames of a window"),
            Arg("image_type", "image_type", types.RGB, doc="color space of the decoded frames (RGB, BGR, GRAY...)"),
            *READER_ARGS,
        ],
        inputs=(0, 0),
        num_outputs=1,
        legacy_name="SequenceReader",
    )

    def setup(self) -> None:
        super().setup()
        for name in ("sequence_length", "step", "stride"):
            if self.args[name] < 1:
                raise self._arg_error(name, f"must be at least 1, got {self.args[name]}")

    def output_layouts(self, input_layouts):
        return ["FHWC"]

    def list_samples(self) -> int:
        a = self.args
        self._root = a["file_root"]
        self._windows: list[tuple[str, list[str]]] = []  # (folder, frame names of the window)
        for folder, names in list_sequences(self._root):
            for s in window_starts(len(names), a["sequence_length"], a["step"], a["stride"]):
                self._windows.append((folder, names[s:s + (a["sequence_length"] - 1) * a["stride"] + 1:a["stride"]]))
        if not self._windows:
            raise ListingError("sequence_length", f"no sub-folder of {self._root!r} holds {a['sequence_length']} "
                               f"frames (stride {a['stride']}); each sub-folder of image files is one sequence")
        return len(self._windows)

    def sample_source(self, i: int) -> str:
        folder, frames = self._windows[i]
        return f"{folder}/{frames[0]}" + (f" (+{len(frames) - 1} frames)" if len(frames) > 1 else "")

    def load_sample(self, i: int) -> tuple:
        folder, frames = self._windows[i]
        out = None
        for k, name in enumerate(frames):
            path = storage.join(self._root, f"{folder}/{name}")
            try:
                img = decode_cpu(storage.read_bytes(path), self.args["image_type"])
            except ValueError as e:
                raise ValueError(f"cannot decode frame {path!r}: {e}") from None
            if out is None:
                out = np.empty((len(frames), *img.shape), np.uint8)
            elif img.shape != out.shape[1:]:
                raise ValueError(f"frame {path!r} is {img.shape[1]}x{img.shape[0]}, the window's first frame "
                                 f"{out.shape[2]}x{out.shape[1]}: the frames of a sequence must have one size")
            out[k] = img
        return (out,)
