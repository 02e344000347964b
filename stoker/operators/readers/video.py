"""``fn.readers.video``: windows of frames from video files, decoded on the CPU (PyAV) or the GPU.

A sample is a window of ``sequence_length`` frames taken every ``stride``
frames from one clip; windows start every ``step`` frames (default:
``sequence_length * stride``) from the clip's first frame while
``first + sequence_length * stride`` is within the clip (DALI's rule), or, with
``pad_sequences``, while its first frame is in the clip (the missing frames
are zero, their frame numbers and timestamps -1). Clips are listed and
demuxed once at build (:mod:`stoker.operators.video.clip_listing`); a sample seeks
to the key frame before its window and decodes only from there, or, when an
earlier window of the clip stopped before it with no key frame between,
decodes on from there (:mod:`stoker.operators.video.decoder_pool`).

Outputs, in DALI's order: the frames ``(F, H, W, C)`` layout "FHWC" (uint8,
or float32 with ``dtype=types.FLOAT``, divided by 255 with ``normalized``);
the label (int32, ``(1,)``) when the clips have labels (``file_root``,
``file_list``, or ``filenames`` with ``labels``); then, except with
``file_root``, ``enable_frame_num`` (int32: the first frame ``(1,)`` for
True/"scalar", every frame ``(F,)`` for "sequence") and ``enable_timestamps``
(float32 seconds ``(F,)``).

Clips with a variable frame rate are refused at build unless
``skip_vfr_check``. A clip that cannot be opened or decoded (truncated,
corrupt) is a sample error naming the file: ``on_error`` skips it or stops.
``device="gpu"`` decodes with NVDEC (``gpu_video_reader``, PyNvVideoCodec);
without that module the CPU frames are copied to the GPU.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from stoker import types
from stoker.operators.readers._indexed import IndexedReader
from stoker.operators.readers._listing import ListingError
from stoker.operators.readers.file import READER_ARGS
from stoker.operators.schema import REQUIRED, Arg, Schema, register
from stoker.operators.video import clip_listing, decoder_pool, pyav

_FRAME_NUM = {"none": None, "false": None, "0": None, "scalar": "scalar", "true": "scalar", "1": "scalar",
              "sequence": "sequence"}


def frame_num_mode(value) -> str | None:
    """``enable_frame_num`` as None, "scalar" or "sequence" (DALI takes booleans and strings)."""
    mode = _FRAME_NUM.get(str(value).strip().lower(), "?")
    if mode == "?":
        raise ValueError(f"expected 'none', 'scalar', 'sequence' or a bool, got {value!r}")
    return mode


def _has_labels(a: dict) -> bool:
    return bool(a.get("file_root") or a.get("file_list") or a.get("labels") is not None)


def video_outputs(a: dict) -> list[str]:
    """Names of the reader's outputs for arguments ``a``, in order."""
    out = ["video"]
    if _has_labels(a):
        out.append("label")
    if not a.get("file_root"):  # DALI gives neither with file_root
        try:
            frame_num = frame_num_mode(a.get("enable_frame_num", "none"))
        except ValueError:
            frame_num = None  # (the reader's setup names the argument)
        if frame_num:
            out.append("frame_num")
        if a.get("enable_timestamps"):
            out.append("timestamps")
    return out


VIDEO_ARGS = (
    Arg("filenames", "str_list", None, doc="video files to read (or file_root, or file_list)"),
    Arg("labels", "int_list", None, doc="a label per file of filenames; [] numbers them 0, 1, ..."),
    Arg("file_root", "str", None, doc="folder with one sub-folder of clips per class"),
    Arg("file_list", "str", None, doc="text file of 'path label [start [end]]' lines (start/end in seconds)"),
    Arg("file_list_frame_num", "bool", False, doc="start/end of file_list are frame numbers, not seconds"),
    Arg("file_list_include_preceding_frame", "bool", False,
        doc="seconds to frames with floor(start*fps)/ceil(end*fps) instead of ceil/floor"),
    Arg("sequence_length", "int", REQUIRED, doc="frames per sample"),
    Arg("stride", "int", 1, doc="frames between consecutive frames of a sample"),
    Arg("step", "int", -1,
        doc="frames between the first frames of consecutive samples (< 0: sequence_length * stride)"),
    Arg("pad_sequences", "bool", False,
        doc="also windows that run past the clip's end; missing frames are zero, their numbers -1"),
    Arg("enable_frame_num", "any", "none", doc="output frame numbers: 'none', 'scalar'/True, 'sequence'"),
    Arg("enable_timestamps", "bool", False, doc="output each frame's timestamp in seconds"),
    Arg("dtype", "dtype", types.UINT8, doc="UINT8 or FLOAT"),
    Arg("normalized", "bool", False, doc="with dtype FLOAT: pixel values divided by 255"),
    Arg("image_type", "image_type", types.RGB, doc="RGB (default), BGR, YCbCr (4:4:4 planes as decoded) or GRAY"),
    Arg("channels", "int", 3, doc="channels of the output (3; 1 with image_type GRAY)"),
    Arg("skip_vfr_check", "bool", False, doc="read variable frame rate clips instead of refusing them"),
    Arg("additional_decode_surfaces", "int", 2, doc="accepted for compatibility (NVDEC surfaces)"),
    *READER_ARGS,
)


@register
class VideoReader(IndexedReader):
    """Reads windows of frames from video files (``fn.readers.video`` / ``ops.VideoReader``)."""

    schema = Schema(
        name="readers.video",
        doc="Reads video files as samples of sequence_length frames (every stride frames; a new sample every "
            "step frames): (F, H, W, C) frames, layout 'FHWC', then label, frame_num and timestamps as enabled. "
            "CPU decoding through PyAV (FFmpeg); device='gpu' decodes with NVDEC where PyNvVideoCodec is installed.",
        args=list(VIDEO_ARGS),
        inputs=(0, 0),
        devices=("cpu", "gpu"),
        num_outputs=lambda a: len(video_outputs(a)),
        legacy_name="VideoReader",
    )

    def setup(self) -> None:
        super().setup()
        pyav.require_av()
        a = self.args
        for name in ("sequence_length", "stride"):
            if a[name] < 1:
                raise self._arg_error(name, f"must be at least 1, got {a[name]}")
        if a["step"] == 0:
            raise self._arg_error("step", "must not be 0 (< 0 means sequence_length)")
        self._step = a["step"] if a["step"] > 0 else a["sequence_length"] * a["stride"]
        try:
            self._frame_num = frame_num_mode(a["enable_frame_num"])
        except ValueError as e:
            raise self._arg_error("enable_frame_num", str(e)) from None
        self._dtype = np.dtype(types.dtype_from_arg(a["dtype"]))
        if self._dtype not in (np.uint8, np.float32):
            raise self._arg_error("dtype", f"must be types.UINT8 or types.FLOAT, got {a['dtype']}")
        if a["image_type"] not in (types.RGB, types.BGR, types.YCbCr, types.GRAY):
            raise self._arg_error("image_type", f"must be RGB, BGR, YCbCr or GRAY, got {a['image_type']}")
        want_c = 1 if a["image_type"] == types.GRAY else 3
        if a["channels"] not in (want_c, 3):
            raise self._arg_error("channels", f"must be {want_c} for image_type {a['image_type'].name}")
        self._outputs = video_outputs(a)
        self._decoders = decoder_pool.DecoderPool()

    def output_layouts(self, input_layouts):
        return ["FHWC"] + [""] * (len(self._outputs) - 1)

    # --- listing --------------------------------------------------------------------------------
    def list_samples(self) -> int:
        a = self.args
        self._clips = clip_listing.list_clips(a)
        clip_listing.probe_clips(self._clips, a)
        self._which, self._first = clip_listing.windows(self._clips, a["sequence_length"], a["stride"], self._step,
                                                    a["pad_sequences"])
        if self._which.size == 0:
            span = a["sequence_length"] * a["stride"]
            raise ListingError("sequence_length", f"no clip holds {span} frames (sequence_length "
                               f"{a['sequence_length']}, stride {a['stride']}); {len(self._clips)} clip(s) listed")
        return int(self._which.size)

    def listing_digest(self, digest) -> None:
        for clip in self._clips:
            n = clip.info.frames if clip.info is not None else -1
            digest.update(f"{clip.name}\0{clip.label}\0{n}\0{clip.start}\0{clip.end}\0".encode("utf-8",
                                                                                               "surrogateescape"))

    def sample_source(self, i: int) -> str:
        clip = self._clips[int(self._which[i])]
        first = int(self._first[i])
        return clip.name if first < 0 else f"{clip.name} (frame {first})"

    def window(self, i: int) -> tuple[clip_listing.Clip, np.ndarray]:
        """Sample ``i``'s clip and frame indices, -1 for frames past the clip's range (padding).
        Raises OSError when the clip could not be probed at listing."""
        clip = self._clips[int(self._which[i])]
        first = int(self._first[i])
        if first < 0:
            raise OSError(clip.broken or f"cannot read video {clip.path!r}")
        a = self.args
        idx = first + a["stride"] * np.arange(a["sequence_length"], dtype=np.int64)
        return clip, np.where(idx < clip.end, idx, -1)

    # --- reading --------------------------------------------------------------------------------
    def load_sample(self, i: int) -> tuple:
        clip, idx = self.window(i)
        size = self.decode_size(clip)
        real = idx[idx >= 0]
        decoder = self._decoders.acquire(clip.path, clip.path, clip.info, int(real.min()), repr(clip.path))
        frames = pyav.decode_frames(clip.path, clip.info, real, repr(clip.path), self.args["image_type"], size,
                                   decoder=decoder)
        self._decoders.release(clip.path, decoder)  # (a decoder that raised is closed and not returned)
        video = self.assemble(frames, idx, clip)
        if size is None:
            video = self.transform(video)
        return (self.convert(video), *self.extras(clip, idx))

    def decode_size(self, clip) -> tuple[int, int] | None:
        """``(height, width)`` the decoder resizes frames of ``clip`` to (here: None, as decoded)."""
        return None

    def advance(self, batch):
        """The batch's references; with device="gpu" they are also kept by iteration for the GPU
        reader's host half (stoker/operators/video/gpu_video_reader.py: ``prepare`` gets only the
        iteration's number, and refills after a skipped sample arrive here)."""
        refs = super().advance(batch)
        if self.device == "gpu":
            self.__dict__.setdefault("_gpu_refs", defaultdict(list))[batch.iteration].extend(refs)
        return refs

    def transform(self, video: np.ndarray) -> np.ndarray:
        """What a subclass does to the uint8 FHWC frames before the dtype conversion when the decoder
        did not resize them (here: nothing)."""
        return video

    def close(self) -> None:
        """Close the open decoders (and what the base reader holds)."""
        super().close()
        self._decoders.close()

    def assemble(self, frames: dict, idx: np.ndarray, clip) -> np.ndarray:
        """The window's FHWC uint8 frames, zero frames for padding."""
        shape = pyav.stack(list(frames.values()), repr(clip.path)).shape[1:]
        out = np.zeros((idx.size, *shape), np.uint8)
        for j, k in enumerate(idx):
            if k >= 0:
                out[j] = frames[int(k)]
        return out

    def convert(self, video: np.ndarray) -> np.ndarray:
        """Frames in the output dtype (float32 divided by 255 with normalized)."""
        if self._dtype == np.uint8:
            return video
        out = video.astype(np.float32)
        if self.args["normalized"]:
            out *= np.float32(1 / 255)
        return out

    def extras(self, clip, idx: np.ndarray) -> list[np.ndarray]:
        """The outputs after the frames: label, frame numbers, timestamps, as enabled."""
        out = []
        for name in self._outputs[1:]:
            if name == "label":
                out.append(np.asarray([clip.label if clip.label is not None else 0], np.int32))
            elif name == "frame_num":
                seq = idx.astype(np.int32)
                out.append(seq[:1].copy() if self._frame_num == "scalar" else seq)
            else:
                ts = np.full(idx.size, -1.0, np.float32)
                ok = idx >= 0
                ts[ok] = clip.info.seconds(idx[ok]).astype(np.float32)
                out.append(ts)
        return out
