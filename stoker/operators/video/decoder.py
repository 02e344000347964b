"""``fn.decoders.video`` (and ``fn.experimental.decoders.video``): whole encoded clips to FHWC frames.

Input per sample: the bytes of a video file (a container such as MP4, MKV,
WebM or AVI), uint8 1-D, as ``readers.file`` gives them. Output per sample:
the selected frames, ``(F, H, W, 3)`` uint8 RGB, layout "FHWC".

Which frames, as DALI selects them (every argument may be given per sample):

* ``frames``: these indices, in this order, repeats allowed;
* ``start_frame`` (default 0), ``stride`` (default 1) and either
  ``sequence_length`` frames or up to ``end_frame`` (exclusive);
* none of them: every frame.

An index past the clip's end is padded by ``pad_mode``, on the frame index:
``constant`` (a frame of ``fill_value``), ``edge``/``repeat`` (the last frame),
``reflect_1001``/``symmetric`` (index ``2n-1-i``), ``reflect_101``/``reflect``
(index ``2n-2-i``), ``none`` (no padding: shorter output, an error for
``frames``). Only the frames needed are decoded, from the key frame before
each run of them (:func:`stoker.operators.video.pyav.decode_frames`).

stoker decodes every codec FFmpeg (PyAV's wheel) decodes on the CPU, H.264,
HEVC and AV1 included; DALI's CPU variant takes only VP8, VP9 and MJPEG.
"""

from __future__ import annotations

import numpy as np

from stoker.operators.base import Operator
from stoker.operators.schema import Arg, Schema, register
from stoker.operators.video import pyav

PAD_MODES = {"none": "none", "constant": "constant", "edge": "edge", "repeat": "edge",
             "reflect_1001": "reflect_1001", "symmetric": "reflect_1001", "reflect_101": "reflect_101",
             "reflect": "reflect_101"}


def pad_indices(idx: np.ndarray, n: int, mode: str) -> np.ndarray:
    """Map frame indices past the clip's end (``>= n``) by pad ``mode`` (a PAD_MODES value); -1 marks
    a constant (fill) frame. Indices inside the clip stay as they are."""
    idx = np.asarray(idx, np.int64)
    past = idx >= n
    if not past.any():
        return idx
    if mode == "constant":
        return np.where(past, -1, idx)
    if mode == "edge":
        return np.minimum(idx, n - 1)
    period = 2 * n if mode == "reflect_1001" else max(2 * n - 2, 1)
    r = idx % period
    mirrored = (2 * n - 1 - r) if mode == "reflect_1001" else (2 * n - 2 - r)
    return np.where(past, np.where(r < n, r, mirrored), idx)


def select_frames(n: int, args: dict) -> np.ndarray:
    """The frame indices one sample asks for (-1: a fill frame) in a clip of ``n`` frames."""
    mode = PAD_MODES.get(str(args.get("pad_mode") or "constant"))
    if mode is None:
        raise ValueError(f"argument 'pad_mode': expected one of {', '.join(PAD_MODES)}, got {args.get('pad_mode')!r}")
    if args.get("frames") is not None:
        idx = np.asarray(args["frames"], np.int64).reshape(-1)
        if (idx < 0).any():
            raise ValueError(f"argument 'frames': indices must not be negative, got {idx.tolist()}")
        if mode == "none" and (idx >= n).any():
            raise ValueError(f"argument 'frames': frame {int(idx.max())} is past the clip's {n} frames "
                             "and pad_mode is 'none'")
        return pad_indices(idx, n, "constant" if mode == "none" else mode)
    start = int(args.get("start_frame") or 0)
    stride = int(args.get("stride") or 1)
    if start < 0 or stride < 1:
        raise ValueError(f"start_frame must be >= 0 and stride >= 1, got {start} and {stride}")
    if start >= n:
        raise ValueError(f"argument 'start_frame': {start} is past the clip's {n} frames")
    if args.get("sequence_length") is not None:
        idx = start + stride * np.arange(int(args["sequence_length"]), dtype=np.int64)
    else:
        end = int(args["end_frame"]) if args.get("end_frame") is not None else n
        idx = np.arange(start, end, stride, dtype=np.int64)
    if mode == "none":
        return idx[idx < n]
    return pad_indices(idx, n, mode)


def assemble(frames: dict, idx: np.ndarray, fill, where: str) -> np.ndarray:
    """The output FHWC array: decoded ``frames`` ({index: HWC}) in the order of ``idx``, fill frames
    (``-1``) of value ``fill`` (one value, or one per channel)."""
    real = [frames[int(k)] for k in idx if k >= 0]
    if not real:
        raise ValueError(f"video {where}: every frame asked for is past the clip's end")
    shape = pyav.stack(list(frames.values()), where).shape[1:]
    out = np.empty((len(idx), *shape), np.uint8)
    fill_px = np.broadcast_to(np.asarray(fill, np.uint8).reshape(-1), (shape[-1],)) if (idx < 0).any() else None
    for j, k in enumerate(idx):
        out[j] = frames[int(k)] if k >= 0 else fill_px
    return out


@register
class VideoDecoder(Operator):
    """Decodes whole encoded clips to frames (``fn.decoders.video``, CPU)."""

    schema = Schema(
        name="decoders.video",
        doc="Decodes encoded video files (bytes) on the CPU with FFmpeg (PyAV) into (F, H, W, 3) uint8 RGB "
            "frames, layout 'FHWC'; frames are chosen by frames, or start_frame/stride with sequence_length or "
            "end_frame, and padded past the clip's end by pad_mode.",
        args=[
            Arg("frames", "int_list", None, tensor=True, doc="indices of the frames to return, in order"),
            Arg("start_frame", "int", None, tensor=True, doc="first frame (default 0)"),
            Arg("end_frame", "int", None, tensor=True, doc="frame to stop before (not with sequence_length)"),
            Arg("sequence_length", "int", None, tensor=True, doc="number of frames to return"),
            Arg("stride", "int", None, tensor=True, doc="step between returned frames (default 1)"),
            Arg("pad_mode", "str", "constant", tensor=True,
                doc="frames past the end: 'none', 'constant', 'edge'/'repeat', 'reflect_1001'/'symmetric', "
                    "'reflect_101'/'reflect'"),
            Arg("fill_value", "int_list", [0], doc="value of constant padding frames (one, or one per channel)"),
            Arg("affine", "bool", True, doc="accepted for compatibility (thread pinning)"),
            Arg("build_index", "bool", True, doc="accepted for compatibility (stoker always indexes by demuxing)"),
        ],
        inputs=(1, 1),
        devices=("cpu",),
    )

    def setup(self) -> None:
        pyav.require_av()
        a = self.args
        if a["frames"] is not None and any(a.get(k) is not None for k in ("start_frame", "stride", "end_frame",
                                                                            "sequence_length")):
            raise self._arg_error("frames", "cannot be combined with start_frame, stride, end_frame or "
                                  "sequence_length")
        if a["end_frame"] is not None and a["sequence_length"] is not None:
            raise self._arg_error("end_frame", "cannot be combined with sequence_length")
        if a["pad_mode"] not in PAD_MODES:
            raise self._arg_error("pad_mode", f"must be one of {', '.join(PAD_MODES)}, got {a['pad_mode']!r}")
        if not a["fill_value"] or any(not 0 <= v <= 255 for v in a["fill_value"]):
            raise self._arg_error("fill_value", f"takes values in [0, 255], got {a['fill_value']}")

    def _arg_error(self, arg: str, message: str):
        from stoker.errors import arg_error

        return arg_error(self.schema.name, arg, message)

    def output_layouts(self, input_layouts):
        return ["FHWC"]

    def run_sample(self, inputs, args, ctx):
        data = np.asarray(inputs[0])
        if data.dtype != np.uint8 or data.ndim != 1:
            raise self.error(f"expects encoded bytes (uint8, 1-D) per sample, got {data.dtype} {data.shape}")
        where = repr(ctx.source) if ctx.source else f"sample {ctx.index}"
        info = pyav.probe(data, where)
        idx = select_frames(info.frames, args)
        fill = self.args["fill_value"]
        if len(fill) not in (1, 3):
            raise ValueError(f"argument 'fill_value': give one value or 3 (one per channel), got {len(fill)}")
        frames = pyav.decode_frames(data, info, idx[idx >= 0], where)
        return assemble(frames, idx, fill, where)


@register
class ExperimentalVideoDecoder(VideoDecoder):
    """``fn.experimental.decoders.video``: DALI's older name of ``fn.decoders.video``, same operator."""

    schema = Schema(
        name="experimental.decoders.video",
        doc="Deprecated name of decoders.video (the same operator): " + VideoDecoder.schema.doc,
        args=VideoDecoder.schema.args,
        inputs=(1, 1),
        devices=("cpu",),
    )
